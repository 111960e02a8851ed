"""Decoding: greedy and beam search with a key/value cache, and teacher-forced tracing.

The source is encoded once per sentence. Decoder self-attention keeps a per-layer cache of
keys/values; cross-attention keys/values are computed from the encoder output on the first
step and reused. Every function here runs under ``torch.inference_mode`` and never changes
the model's train/eval mode, so one model can serve many threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.capture import capture_attention
from model.transformer import DecoderCache, Transformer


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # generated ids after BOS (prefix included), ending with EOS when finished
    score: float  # log-probability divided by the length penalty
    log_prob: float


def default_max_len(model: Transformer, source_length: int, prefix_length: int = 0) -> int:
    """Generated tokens allowed: 1.5x the source plus 10, within the positional encoding's range."""
    return max(1, min(model.config.max_len - 1 - prefix_length, int(1.5 * source_length) + 10))


def row_limits(model: Transformer, src_ids: torch.Tensor, prefix_length: int, max_len: int | None) -> list[int]:
    """Generated-token limit of each sentence, from its own length (never from its batch neighbours)."""
    if max_len:
        return [max_len] * src_ids.size(0)
    lengths = (src_ids != model.config.pad_id).sum(dim=1).tolist()
    return [default_max_len(model, length, prefix_length) for length in lengths]


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; alpha = 0 ranks by raw log-probability."""
    return ((5.0 + length) / 6.0) ** alpha


def next_token_log_probs(model: Transformer, logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of the next token; padding and BOS can never be generated."""
    logits = logits.float().clone()
    logits[..., [model.config.pad_id, model.config.bos_id]] = float("-inf")
    return torch.log_softmax(logits, dim=-1)


def _start_tokens(model: Transformer, rows: int, prefix: list[int] | None, device: torch.device) -> torch.Tensor:
    start = [model.config.bos_id] + list(prefix or [])
    return torch.tensor(start, dtype=torch.long, device=device).repeat(rows, 1)  # (rows, P)


def _reorder_cache(cache: DecoderCache, order: torch.Tensor) -> None:
    """Beam search: follow each surviving beam's origin. Cross-attention caches are identical within a sentence."""
    for layer in cache:
        for key in ("k", "v"):
            layer["self"][key] = layer["self"][key].index_select(0, order)


@torch.inference_mode()
def greedy_decode(
    model: Transformer, src_ids: torch.Tensor, max_len: int | None = None, prefix: list[int] | None = None
) -> list[list[int]]:
    """src_ids (B, S) -> per sentence the generated ids (prefix included, EOS last when reached)."""
    config = model.config
    batch = src_ids.size(0)
    limits = torch.tensor(row_limits(model, src_ids, len(prefix or []), max_len), device=src_ids.device)
    memory, src_allowed = model.encode(src_ids)
    cache = model.new_cache()
    tokens = _start_tokens(model, batch, prefix, src_ids.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src_ids.device)
    step_input = tokens
    for step in range(int(limits.max())):
        logits = model.decode(step_input, memory, src_allowed, cache=cache, start=tokens.size(1) - step_input.size(1))
        next_token = next_token_log_probs(model, logits[:, -1]).argmax(dim=-1)  # (B,)
        next_token = next_token.masked_fill(finished, config.pad_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= (next_token == config.eos_id) | (limits <= step + 1)
        if bool(finished.all()):
            break
        step_input = next_token[:, None]
    return [_strip(row[1:], config.eos_id, config.pad_id) for row in tokens.tolist()]


def _strip(ids: list[int], eos_id: int, pad_id: int) -> list[int]:
    """Cut after the first EOS and drop padding."""
    out = []
    for token in ids:
        if token == pad_id:
            continue
        out.append(token)
        if token == eos_id:
            break
    return out


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src_ids: torch.Tensor,
    beam_size: int = 5,
    max_len: int | None = None,
    alpha: float = 0.6,
    prefix: list[int] | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search: src_ids (B, S) -> per sentence up to beam_size hypotheses, best first.

    Candidates are the top 2*beam_size extensions of all beams; an EOS among the top
    beam_size finishes a hypothesis. A sentence stops once beam_size hypotheses are
    finished and no live beam can still beat the worst of them (scores only fall as tokens
    are added, and the length penalty is at most that of max_len), so with a beam as wide
    as the search space the result equals exhaustive search.
    """
    if beam_size < 1:
        raise ValueError("beam_size must be at least 1")
    config = model.config
    batch = src_ids.size(0)
    prefix = list(prefix or [])
    limits = row_limits(model, src_ids, len(prefix), max_len)
    beams = beam_size
    memory, src_allowed = model.encode(src_ids)
    memory = memory.repeat_interleave(beams, dim=0)  # (B*K, S, d)
    if src_allowed is not None:
        src_allowed = src_allowed.repeat_interleave(beams, dim=0)
    cache = model.new_cache()
    tokens = _start_tokens(model, batch * beams, prefix, src_ids.device)  # (B*K, P)
    scores = torch.full((batch, beams), float("-inf"), device=src_ids.device)
    scores[:, 0] = 0.0  # all beams start identical: keep one alive
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    done = [False] * batch
    longest_penalty = [length_penalty(len(prefix) + limit, alpha) for limit in limits]
    step_input = tokens
    for step in range(max(limits)):
        logits = model.decode(step_input, memory, src_allowed, cache=cache, start=tokens.size(1) - step_input.size(1))
        log_probs = next_token_log_probs(model, logits[:, -1])  # (B*K, V)
        vocab = log_probs.size(-1)
        candidates = (scores.view(-1, 1) + log_probs).view(batch, beams * vocab)
        top_scores, top_index = candidates.topk(min(2 * beams, beams * vocab), dim=1)  # (B, 2K)
        top_scores, top_index = top_scores.tolist(), top_index.tolist()
        new_scores = torch.full((batch, beams), float("-inf"), device=src_ids.device)
        origins = torch.arange(batch, device=src_ids.device).repeat_interleave(beams) * beams  # (B*K,)
        next_tokens = torch.full((batch * beams,), config.pad_id, dtype=torch.long, device=src_ids.device)
        generated = tokens.size(1)  # length after adding this step's token (BOS excluded)
        for b in range(batch):
            if done[b]:
                continue
            kept = 0
            for rank, (score, index) in enumerate(zip(top_scores[b], top_index[b], strict=True)):
                if score == float("-inf") or kept == beams:
                    break
                origin, token = b * beams + index // vocab, index % vocab
                if token == config.eos_id:
                    if rank < beams:
                        sequence = tokens[origin, 1:].tolist() + [token]
                        finished[b].append(Hypothesis(sequence, score / length_penalty(generated, alpha), score))
                    continue
                new_scores[b, kept] = score
                origins[b * beams + kept] = origin
                next_tokens[b * beams + kept] = token
                kept += 1
            if step + 1 == limits[b]:  # this sentence's limit: live beams end here without EOS
                for k in range(kept):
                    sequence = tokens[origins[b * beams + k], 1:].tolist() + [int(next_tokens[b * beams + k])]
                    score = float(new_scores[b, k])
                    finished[b].append(Hypothesis(sequence, score / length_penalty(generated, alpha), score))
                done[b] = True
            finished[b].sort(key=lambda h: h.score, reverse=True)
            del finished[b][beams:]
            if len(finished[b]) == beams and not done[b]:
                best_alive = float(new_scores[b].max())
                done[b] = best_alive == float("-inf") or best_alive / longest_penalty[b] <= finished[b][-1].score
        if all(done):
            break
        tokens = torch.cat([tokens.index_select(0, origins), next_tokens[:, None]], dim=1)
        _reorder_cache(cache, origins)
        scores = new_scores
        step_input = next_tokens[:, None]
    return finished


@dataclass
class ForcedPass:
    """Teacher-forced pass over a full target: what a Trace is built from (tensors on CPU)."""

    probs: torch.Tensor  # (T, V) next-token distribution at each step
    attention: dict[str, torch.Tensor]  # (H, Q, K), batch dimension removed
    positional: dict[str, torch.Tensor]
    embedding_norms: dict[str, torch.Tensor]


@torch.inference_mode()
def forced_pass(model: Transformer, src_ids: list[int], tgt_ids: list[int]) -> ForcedPass:
    """Run one sentence with the decoder fed ``tgt_ids[:-1]`` (BOS first) under capture.

    Because decoder self-attention is causal, row t of every attention matrix equals what
    step t of incremental decoding computes, so a whole decoding trace costs one forward.
    """
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], dtype=torch.long, device=device)
    tgt = torch.tensor([tgt_ids[:-1]], dtype=torch.long, device=device)
    with capture_attention(model) as capture:
        logits = model(src, tgt)  # (1, T, V)
    return ForcedPass(
        probs=logits[0].float().softmax(dim=-1).cpu(),
        attention={name: value[0] for name, value in capture.attention.items()},
        positional=dict(capture.positional),
        embedding_norms={
            "encoder": model.encoder.embed(src)[0].float().norm(dim=-1).cpu(),
            "decoder": model.decoder.embed(tgt)[0].float().norm(dim=-1).cpu(),
        },
    )
