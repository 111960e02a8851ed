"""What each view reads from a Trace: the attention stack with its axes, and one decoding step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.heads import check_kind
from model.trace import Trace


@dataclass(frozen=True)
class AttentionAxes:
    """An attention stack with the tokens of its rows and columns, and what they are, in words."""

    stack: np.ndarray  # (layers, heads, queries, keys)
    query_pieces: list[str]
    key_pieces: list[str]
    query_inputs: list[str] | None = None  # decoder rows: the decoder input each row read (BOS first)
    query_title: str = "query (attending)"
    key_title: str = "key (attended to)"


def attention_axes(trace: Trace, kind: str) -> AttentionAxes:
    """The attention of one kind ("encoder_self", "decoder_self", "cross") with the tokens on each axis.

    Encoder rows and columns are the source pieces (EOS last). A decoder row (self- or
    cross-attention) is one decoding step, labelled with the token that step wrote (the first
    output piece first, </s> last); ``query_inputs`` holds the decoder input that step read
    (<s> first), which the hover shows. Decoder self-attention's columns are the decoder inputs:
    what the output so far is, as the decoder reads it.
    """
    check_kind(kind)
    stack = trace.attention_stack(kind)
    if kind == "encoder_self":
        pieces = list(trace.source_pieces)
        return AttentionAxes(stack, pieces, pieces, None, "source piece (updated)", "source piece (read)")
    inputs = list(trace.decoder_input_pieces)
    if kind == "cross":
        keys, key_title = list(trace.source_pieces), "source piece (looked at)"
    else:
        keys, key_title = inputs, "output so far (decoder input read)"
    return AttentionAxes(
        stack, list(trace.predicted_pieces), keys, inputs, "output token (written at this step)", key_title
    )


@dataclass(frozen=True)
class DecodingStep:
    """Everything shown at decoding step ``step`` for one decoder layer."""

    step: int
    decoder_input: list[str]  # target pieces read so far, BOS first
    predicted: str  # the token output at this step
    predicted_probability: float
    top_pieces: list[str]
    top_probabilities: np.ndarray  # (k,)
    chosen_rank: int | None  # position of ``predicted`` among the top k, None when it is not there
    cross_rows: np.ndarray  # (heads, source tokens)
    self_rows: np.ndarray  # (heads, step + 1)


def decoding_step(trace: Trace, step: int, layer: int) -> DecodingStep:
    """What the decoder read, predicted and attended to at ``step`` (0 = the step after <s>) in ``layer``."""
    if not 0 <= step < trace.n_steps:
        raise ValueError(f"step must be in 0..{trace.n_steps - 1}, not {step}")
    top_ids = [int(i) for i in trace.topk_ids[step]]
    chosen_id = trace.target_ids[step + 1]
    return DecodingStep(
        step=step,
        decoder_input=trace.target_pieces[: step + 1],
        predicted=trace.predicted_pieces[step],
        predicted_probability=float(trace.step_probs[step]),
        top_pieces=list(trace.topk_pieces[step]),
        top_probabilities=np.asarray(trace.topk_probs[step]),
        chosen_rank=top_ids.index(chosen_id) if chosen_id in top_ids else None,
        cross_rows=trace.attention_stack("cross")[layer, :, step, :],
        self_rows=trace.attention_stack("decoder_self")[layer, :, step, : step + 1],
    )
