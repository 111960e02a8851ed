"""Inside one head: the stages of scaled dot-product attention (section 3.2.1), as plain data.

Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_k)) V, with masked keys set to -inf before the
softmax. One teacher-forced pass under ``capture_attention(model, internals=True)`` records
each head's queries, keys and values; every stage is recomputed here from them, in the
model's own order of operations, so the softmax stage equals the captured attention of
that head and the weighted sum equals the captured head output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from model.capture import capture_attention
from model.heads import module_kind
from model.layers import MultiHeadAttention
from model.trace import Trace
from model.transformer import Transformer

if TYPE_CHECKING:
    from model.translator import Translator


@dataclass
class AttentionStages:
    """Every stage of one head's attention for the query row(s) shown (Tq = 1 for one step).

    Queries are source positions for encoder self-attention and decoding steps (decoder
    inputs) otherwise; keys/values are source positions (encoder self-attention and
    cross-attention) or decoder inputs (decoder self-attention).
    """

    module_name: str
    kind: str  # "encoder_self", "decoder_self" (causal) or "cross" (model.heads.ATTENTION_KINDS)
    head: int
    step: int | None  # the query row shown; None: every row
    query_pieces: list[str]  # (Tq,) tokens of the rows shown; empty when no pieces were given
    key_pieces: list[str]  # (Tk,)
    q: np.ndarray  # (Tq, d_k) the rows' queries
    k: np.ndarray  # (Tk, d_k) keys
    v: np.ndarray  # (Tk, d_k) values
    scores: np.ndarray  # (Tq, Tk) Q·Kᵀ
    scale: float  # 1 / sqrt(d_k)
    scaled: np.ndarray  # (Tq, Tk) Q·Kᵀ / sqrt(d_k)
    padding_allowed: np.ndarray  # (Tk,) bool: False on padded keys
    causal_allowed: np.ndarray | None  # (Tq, Tk) bool: key position <= query position; decoder self-attention only
    allowed: np.ndarray  # (Tq, Tk) bool: both masks together, what the softmax may use
    masked: np.ndarray  # (Tq, Tk) scaled scores with -inf where not allowed
    probs: np.ndarray  # (Tq, Tk) softmax over keys: the attention weights
    contribution_norms: np.ndarray  # (Tq, Tk) ||p_j v_j||: how much each key adds to the output
    output: np.ndarray  # (Tq, d_k) sum_j p_j v_j, the head's output before the heads are merged
    captured_probs: np.ndarray  # (Tq, Tk) the attention the model recorded, to compare with ``probs``
    captured_output: np.ndarray  # (Tq, d_k) the head output the model recorded

    @property
    def d_k(self) -> int:
        return int(self.q.shape[-1])

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every array stage, e.g. {"q": (1, 8), "k": (12, 8), "scores": (1, 12), ...}."""
        return {name: tuple(value.shape) for name, value in vars(self).items() if isinstance(value, np.ndarray)}


def _check_index(value: int | None, count: int, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count):
        raise ValueError(f"{name} must be an integer in 0..{count - 1}, not {value!r}")


def attention_stages(
    translator: Translator, trace: Trace, module_name: str, head: int, step: int | None = None
) -> AttentionStages:
    """Inside one head of ``trace``: every stage of its scaled dot-product attention at ``step`` (a query row), on the
    translator's shared model (``Translator.run``). Draw it with viz.internals.attention_stage_figures."""
    stages, _ = translator.run(
        lambda model, device: stages_from_ids(
            model,
            trace.source_ids,
            trace.target_ids,
            module_name,
            head,
            step,
            source_pieces=trace.source_pieces,
            target_pieces=trace.target_pieces,
        )
    )
    return stages


@torch.inference_mode()
def stages_from_ids(
    model: Transformer,
    source_ids: Sequence[int],
    target_ids: Sequence[int],
    module_name: str,
    head: int,
    step: int | None = None,
    *,
    source_pieces: Sequence[str] | None = None,
    target_pieces: Sequence[str] | None = None,
) -> AttentionStages:
    """Recompute every stage of one head's attention from one teacher-forced captured pass.

    ``source_ids`` are the encoder's input (padding allowed: it is masked), ``target_ids``
    start with BOS and the decoder reads ``target_ids[:-1]``, as in a Trace. ``step`` is the
    query row: a decoding step for decoder modules, a source position for encoder
    self-attention; None keeps every row. Pieces, when given, label the rows and keys.
    """
    kind = module_kind(module_name)
    modules = dict(model.named_modules())
    if not isinstance(modules.get(module_name), MultiHeadAttention):
        raise ValueError(f"this model has no attention module {module_name!r}")
    _check_index(head, model.config.n_heads, "head")
    decoder_input = list(target_ids[:-1])
    if not decoder_input:
        raise ValueError("target_ids needs BOS and at least one more token")
    n_queries = len(source_ids) if kind == "encoder_self" else len(decoder_input)
    _check_index(step, n_queries, "step")
    device = next(model.parameters()).device
    src = torch.tensor([list(source_ids)], dtype=torch.long, device=device)
    tgt = torch.tensor([decoder_input], dtype=torch.long, device=device)
    with capture_attention(model, internals=True) as capture:
        model(src, tgt)
    probes = capture.internals[module_name]
    rows = slice(None) if step is None else slice(step, step + 1)
    q = probes["query"][0, head, rows]  # (Tq, dk)
    k = probes["key"][0, head]  # (Tk, dk)
    v = probes["value"][0, head]  # (Tk, dk)

    mask = model.attention_masks(src, tgt)[kind]  # the masks forward applied
    padding_allowed = mask.keys[0].cpu()  # (Tk,)
    allowed = padding_allowed.expand(q.size(0), -1)  # (Tq, Tk)
    causal = mask.causal.cpu()[rows] if mask.causal is not None else None  # (Tq, Tk)
    if causal is not None:
        allowed = allowed & causal

    # The model's order of operations: (q @ kᵀ) / sqrt(dk), masked_fill(-inf), softmax, @ v.
    scores = q @ k.transpose(-2, -1)  # (Tq, Tk)
    scaled = scores / math.sqrt(q.size(-1))
    masked = scaled.masked_fill(~allowed, float("-inf"))
    probs = masked.softmax(dim=-1)  # (Tq, Tk)
    output = probs @ v  # (Tq, dk)
    contributions = probs[:, :, None] * v[None, :, :]  # (Tq, Tk, dk), summing over keys gives output

    decoder_pieces = list(target_pieces[:-1]) if target_pieces else []
    query_pieces = list(source_pieces or []) if kind == "encoder_self" else decoder_pieces
    key_pieces = decoder_pieces if kind == "decoder_self" else list(source_pieces or [])
    return AttentionStages(
        module_name=module_name,
        kind=kind,
        head=head,
        step=step,
        query_pieces=query_pieces[rows],
        key_pieces=key_pieces,
        q=_numpy(q),
        k=_numpy(k),
        v=_numpy(v),
        scores=_numpy(scores),
        scale=1.0 / math.sqrt(q.size(-1)),
        scaled=_numpy(scaled),
        padding_allowed=padding_allowed.numpy(),
        causal_allowed=causal.numpy() if causal is not None else None,
        allowed=allowed.numpy(),
        masked=_numpy(masked),
        probs=_numpy(probs),
        contribution_norms=_numpy(contributions.norm(dim=-1)),
        output=_numpy(output),
        captured_probs=_numpy(capture.attention[module_name][0, head, rows]),
        captured_output=_numpy(probes["head_output"][0, head, rows]),
    )


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.float().numpy()
