"""Building blocks of the Transformer, each named after its section of the paper.

Vaswani et al. 2017, "Attention Is All You Need":
3.2.1 scaled dot-product attention and 3.2.2 multi-head attention -> MultiHeadAttention;
3.3 position-wise feed-forward networks -> FeedForward;
3.4 embeddings (scaled by sqrt(d_model)) -> TokenEmbedding;
3.5 positional encoding -> PositionalEncoding.

Mask convention: a boolean ``allowed`` tensor broadcastable to (B, H, Tq, Tk), True where a
query may attend to a key. Padded keys and future positions are False; their probability
is exactly zero.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from model.capture import ACTIVATION, Probe, is_observed, observes_activations, observes_internals

# Per-layer incremental-decoding cache: {"k": (B, H, T, dk), "v": (B, H, T, dk)}.
KVCache = dict[str, torch.Tensor]


class Dropout(nn.Dropout):
    """nn.Dropout (section 5.4) with a faster mask on the CPU (``dropout_mask``); CUDA keeps PyTorch's fused kernel.

    PyTorch's CPU dropout draws a Bernoulli per element and ``rand >= p`` a float per element, and drawing them is
    a visible share of a small model's training step. ``dropout_mask`` reads 16 random bits an element, four
    elements to one 64-bit draw, a quarter of the random numbers."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or self.p >= 1.0 or x.is_cuda:
            return super().forward(x)
        return x * dropout_mask(x, self.p)


def dropout_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    """A tensor like ``x``: 0 with probability p (rounded to a multiple of 2^-16), else 1 / (1 - that probability).

    Each element reads 16 uniformly random bits as a signed integer and is dropped when it falls in the lowest
    ``round(p * 2^16)`` of the 2^16 values; the kept ones are scaled by the exact inverse of the kept fraction, so
    the expectation of ``x * mask`` is exactly ``x``.
    """
    levels = 1 << 16
    dropped = min(round(p * levels), levels - 1)  # p just below 1 still keeps one value in 2^16
    count = x.numel()
    draws = torch.empty((count + 3) // 4, dtype=torch.int64, device=x.device).random_(-(1 << 63), None)
    bits = draws.view(torch.int16)[:count].view(x.shape)
    return (bits >= dropped - levels // 2).to(x.dtype).mul_(levels / (levels - dropped))


def building_on_meta() -> bool:
    """True while modules are being built under ``torch.device("meta")``: shapes without data, to know a model's
    size before loading it. Nothing is initialised there, and drawing from a normal distribution for a meta tensor
    would import torch._dynamo, which nothing else the explorer does needs, at every server start."""
    return torch.empty(0).is_meta


class TokenEmbedding(nn.Module):
    """3.4: learned embeddings multiplied by sqrt(d_model) (``scale=False`` leaves them as they are)."""

    def __init__(self, vocab_size: int, d_model: int, scale: bool = True) -> None:
        super().__init__()
        # an empty table on the "meta" device (a size known before loading) is left undrawn: see building_on_meta
        table = torch.empty(vocab_size, d_model) if building_on_meta() else None
        self.embedding = nn.Embedding(vocab_size, d_model, _weight=table)
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids) * self.scale  # (B, T, d)


def sinusoidal_encoding(max_len: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """3.5: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)).

    ``layout="marian"``: the same sines and cosines, all sines in dims [0, ceil(d/2)) and all
    cosines after them (MarianMT's table, which its checkpoints do not store).
    ``layout="fairseq"``: sines then cosines with frequencies exp(-i ln 10000 / (d/2 - 1)), computed in float32 as
    M2M100 and NLLB compute them (an odd d ends with a zero dimension).
    """
    if layout == "fairseq":
        return fairseq_sinusoids(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    inverse_wavelength = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = position * inverse_wavelength  # (L, ceil(d/2))
    sines, cosines = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    if layout == "marian":
        return torch.cat([sines, cosines], dim=1).float()  # (L, d)
    if layout != "interleaved":
        raise ValueError(f"unknown positional layout {layout!r}")
    encoding = torch.zeros(max_len, d_model, dtype=torch.float64)
    encoding[:, 0::2] = sines
    encoding[:, 1::2] = cosines
    return encoding.float()


def fairseq_sinusoids(max_len: int, d_model: int) -> torch.Tensor:
    """fairseq's sinusoidal table (M2M100, NLLB): (max_len, d), sines then cosines, in float32 step by step as they
    compute it, so that the same positions give the same bits."""
    half = d_model // 2
    frequencies = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
    angles = torch.arange(max_len, dtype=torch.int64).float().unsqueeze(1) * frequencies.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    return torch.cat([table, torch.zeros(max_len, d_model % 2)], dim=1)


class PositionalEncoding(nn.Module):
    """3.5: adds the position's encoding, then dropout. The added encoding is probed.

    ``kind`` "sinusoidal" is the paper's fixed encoding; "learned" starts from it and trains it (a parameter, so it
    is saved with the weights); "none" adds zeros, so the stacks see their tokens without their order. ``offset``:
    the table's row of position 0 (the rows below it are never read: fairseq keeps them for padding), so the table
    has ``max_len + offset`` rows.
    """

    encoding: torch.Tensor  # (offset + max_len, d): a parameter when learned, else a buffer

    def __init__(
        self,
        d_model: int,
        max_len: int,
        dropout: float,
        layout: str = "interleaved",
        kind: str = "sinusoidal",
        offset: int = 0,
    ) -> None:
        super().__init__()
        # shapes alone on the "meta" device (building_on_meta): computing the table there imports torch._dynamo
        length = offset + max_len
        fixed = torch.empty(length, d_model) if building_on_meta() else sinusoidal_encoding(length, d_model, layout)
        if kind == "learned":
            self.encoding = nn.Parameter(fixed)
        else:
            self.register_buffer(
                "encoding", fixed if kind == "sinusoidal" else torch.zeros_like(fixed), persistent=False
            )
        self.offset = offset
        self.dropout = Dropout(dropout)
        self.probe = Probe("positional")

    def forward(
        self,
        x: torch.Tensor,
        start: int = 0,
        padding: torch.Tensor | None = None,
        norm: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """x (B, T, d) at positions start.. plus their encoding; ``padding`` (B, T), True where a token gets none
        (``positions_skip_padding``); ``norm`` normalises the sum before dropout (``embedding_norm``)."""
        length = x.size(1)
        if start + length > self.encoding.size(0) - self.offset:
            raise ValueError(
                f"sequence of {start + length} positions exceeds max_len={self.encoding.size(0) - self.offset}; "
                "truncate the input"
            )
        first = self.offset + start
        added = self.probe(self.encoding[first : first + length].to(x.dtype))  # (T, d)
        summed = x + added if padding is None else x + added * ~padding[..., None]
        return self.dropout(summed if norm is None else norm(summed))


class MultiHeadAttention(nn.Module):
    """3.2.2: h parallel scaled dot-product attentions (3.2.1) over learned projections.

    Under ``capture_attention`` or ``intervene`` the softmax is computed explicitly and the
    probabilities (B, H, Tq, Tk) pass through ``self.probe`` before dropout; the per-head
    queries, keys, values and outputs pass through theirs under ``intervene`` or
    ``capture_attention(internals=True)`` (model.capture.observes_internals). Otherwise the
    fused ``scaled_dot_product_attention`` kernel computes the same result faster.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = Dropout(dropout)
        self.probe = Probe("attention")
        self.query_probe = Probe("query")
        self.key_probe = Probe("key")
        self.value_probe = Probe("value")
        self.head_probe = Probe("head_output")
        self.hook_out = Probe(ACTIVATION)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, dk)

    def forward(
        self,
        query: torch.Tensor,
        key_value: torch.Tensor,
        allowed: torch.Tensor | None = None,
        cache: KVCache | None = None,
        static_kv: bool = False,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """query (B, Tq, d), key_value (B, Tk, d) -> (B, Tq, d).

        With ``cache``: self-attention appends the new keys/values to it (static_kv=False);
        cross-attention computes them on the first call and reuses them (static_kv=True).
        ``is_causal`` asks for the causal mask when ``allowed`` is None (full-length decoding).
        """
        q = self.split_heads(self.q_proj(query))  # (B, H, Tq, dk)
        if cache is not None and static_kv and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k = self.split_heads(self.k_proj(key_value))  # (B, H, Tk, dk)
            v = self.split_heads(self.v_proj(key_value))
            if cache is not None:
                if not static_kv and "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        if is_causal and allowed is None and q.size(2) > 1:  # one new query may see every cached key
            allowed = causal_mask(q.size(2), k.size(2), q.device)
        if is_observed():  # a capture or an edit is active: explicit softmax, the probabilities probed
            internals = observes_internals()  # per-head q, k, v and outputs too, when an edit or capture wants them
            if internals:
                q, k, v = self.query_probe(q), self.key_probe(k), self.value_probe(v)
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, Tq, Tk)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            probs = self.probe(scores.softmax(dim=-1))  # (B, H, Tq, Tk)
            context = self.dropout(probs) @ v  # (B, H, Tq, dk)
            if internals:
                context = self.head_probe(context)
        else:
            # under CPU autocast (--cpu-bf16 training) attention itself runs in fp32: PyTorch's CPU flash-attention
            # backward is much slower in bf16 than in fp32, more than bf16 saves elsewhere. A model converted to bf16
            # outside autocast keeps bf16 throughout.
            fp32_on_cpu = q.device.type == "cpu" and q.dtype == torch.bfloat16 and torch.is_autocast_enabled("cpu")
            with torch.autocast("cpu", enabled=False) if fp32_on_cpu else contextlib.nullcontext():
                query, key, value = (t.float() for t in (q, k, v)) if fp32_on_cpu else (q, k, v)
                context = F.scaled_dot_product_attention(
                    query, key, value, attn_mask=allowed, dropout_p=self.dropout.p if self.training else 0.0
                )
        batch, _, length, _ = context.shape
        output = self.out_proj(context.transpose(1, 2).reshape(batch, length, -1))  # (B, Tq, d)
        return self.hook_out(output) if observes_activations() else output


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
    """(Tq, Tk) True on and below the diagonal; queries are the last Tq of Tk positions."""
    offset = n_keys - n_queries
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(diagonal=offset)


class FeedForward(nn.Module):
    """3.3: FFN(x) = max(0, x W1 + b1) W2 + b2 (GELU or swish/SiLU as options)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = {"relu": nn.ReLU, "gelu": nn.GELU, "swish": nn.SiLU}[activation]()
        self.dropout = Dropout(dropout)
        self.hook_hidden = Probe(ACTIVATION)  # (B, T, d_ff) after the activation function
        self.hook_out = Probe(ACTIVATION)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not observes_activations():
            return self.linear2(self.dropout(self.activation(self.linear1(x))))
        hidden = self.hook_hidden(self.activation(self.linear1(x)))
        return self.hook_out(self.linear2(self.dropout(hidden)))


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm whose output is a hook point (``hook_out``): the Norm of each Add & Norm box."""

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__(d_model, eps=eps)
        self.hook_out = Probe(ACTIVATION)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = super().forward(x)
        return self.hook_out(output) if observes_activations() else output
