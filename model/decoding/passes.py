"""The two passes a Trace is built from: the sentence's one encoder pass and the teacher-forced decoder pass over
the output, each under capture (model.translator runs them around the search of model/decoding/search.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.capture import capture_attention
from model.decoding.scoring import Scoring
from model.decoding.search import Encoded, next_token_log_probs
from model.transformer import Transformer


@dataclass
class EncodedSource:
    """One sentence's single encoder pass, under capture: what decoding needs and what a Trace shows of it."""

    src: torch.Tensor  # (1, S) ids on the model's device
    encoded: Encoded  # memory (1, S, d) and source key mask, for greedy_decode / beam_search and forced_pass
    attention: dict[str, torch.Tensor]  # encoder self-attention modules -> (H, S, S), on CPU
    positional: dict[str, torch.Tensor]  # the encoder's positional encoding -> (S, d), on CPU


@torch.inference_mode()
def encode_captured(model: Transformer, src_ids: list[int]) -> EncodedSource:
    """Encode one sentence once with its attention captured, so that decoding and the teacher-forced pass
    share the memory and the encoder attention shown is the one that produced it."""
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], dtype=torch.long, device=device)
    with capture_attention(model) as capture:
        encoded = model.encode(src)
    return EncodedSource(
        src, encoded, {name: value[0] for name, value in capture.attention.items()}, dict(capture.positional)
    )


@dataclass
class ForcedPass:
    """Teacher-forced pass over a full target: what a Trace is built from (tensors on CPU)."""

    probs: torch.Tensor  # (T, V) next-token distribution at each step
    attention: dict[str, torch.Tensor]  # (H, Q, K), batch dimension removed
    positional: dict[str, torch.Tensor]
    embedding_norms: dict[str, torch.Tensor]


@torch.inference_mode()
def forced_pass(
    model: Transformer, source: EncodedSource, tgt_ids: list[int], banned: tuple[int, ...] = ()
) -> ForcedPass:
    """Run the decoder over one encoded sentence, fed ``tgt_ids[:-1]`` (BOS first), under capture. Its
    probabilities are those decoding chooses from: the tokens that can never be generated (and ``banned``, those
    a Scoring bans) have probability 0.

    Because decoder self-attention is causal, row t of every attention matrix equals what
    step t of incremental decoding computes, so a whole decoding trace costs one decoder pass
    (on top of the sentence's one encoder pass, ``source``).
    """
    tgt = torch.tensor([tgt_ids[:-1]], dtype=torch.long, device=source.src.device)
    memory, src_allowed = source.encoded
    with capture_attention(model) as capture:
        logits = model.decode(tgt, memory, src_allowed)  # (1, T, V)
    return ForcedPass(
        probs=next_token_log_probs(model, logits[0], Scoring(banned=banned)).exp().cpu(),  # no <pad>, no BOS
        attention=source.attention | {name: value[0] for name, value in capture.attention.items()},
        positional=source.positional | dict(capture.positional),
        embedding_norms={
            "encoder": model.encoder.embed(source.src)[0].float().norm(dim=-1).cpu(),
            "decoder": model.decoder.embed(tgt)[0].float().norm(dim=-1).cpu(),
        },
    )
