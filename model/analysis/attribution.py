"""Which source pieces made each output token: attributions beyond the raw attention weights.

Attention weights say where a head reads, not how much of what it reads reaches the output
(Jain & Wallace 2019; Serrano & Smith 2019). Each method here gives, for every output step of
a trace, a row over the source pieces that sums to 1, computed from one teacher-forced pass of
the trace's own tokens (no gradient, no sampling):

- ``"attention"``, the baseline: the last decoder layer's cross-attention, mean over heads.
- ``"value_norm"`` (Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing
  Transformers with Vector Norms", EMNLP): the last decoder layer's cross-attention weighted by
  what each source piece sends. With f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h, head h's value vector
  of source piece j pushed through its slice of the output projection, output step i gets
  ||sum_h alpha_ij^h f_h(x_j)|| from piece j (the output projection's bias is the same for
  every j and left out, as in the paper), each row divided by its sum. ``layers`` keeps the
  per-head norms ||alpha_ij^h f_h(x_j)|| and the layer's unnormalised row.

ALTI+ (Ferrando et al. 2022) and gradient-weighted attention (Chefer et al. 2021) are not
implemented yet; ``ATTRIBUTION_METHODS`` lists what is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from model.capture import capture_attention
from model.heads import module_name
from model.trace import Trace
from model.transformer import Transformer

ATTRIBUTION_METHODS = ("attention", "value_norm")


@dataclass
class Attribution:
    """One method's attribution of a trace's output steps.

    ``source`` is (output steps, source pieces), each row summing to 1 (0 where nothing reaches the
    output); ``target`` (output steps, decoder inputs) where the method defines it, else None;
    ``layers`` the method's detail by name (e.g. "per_head": (heads, steps, source pieces)).
    """

    method: str
    source: np.ndarray
    target: np.ndarray | None = None
    params: dict[str, Any] = field(default_factory=dict)
    layers: dict[str, np.ndarray] = field(default_factory=dict)


def attribute(model: Transformer, trace: Trace, method: str) -> Attribution:
    """The ``method`` attribution (one of ATTRIBUTION_METHODS) of every output step of ``trace``."""
    if method == "attention":
        last = trace.attention_stack("cross")[-1]  # (heads, steps, source pieces)
        return Attribution(method, last.mean(axis=0), params={"layer": len(trace.attention_stack("cross")) - 1})
    if method == "value_norm":
        return value_norm(model, trace.source_ids, trace.target_ids)
    raise ValueError(f"method must be one of {ATTRIBUTION_METHODS}, not {method!r}")


@torch.inference_mode()
def value_norm(model: Transformer, source_ids: Sequence[int], target_ids: Sequence[int]) -> Attribution:
    """Kobayashi et al.'s norm-based attribution of the last decoder layer's cross-attention (module docstring).

    ``target_ids`` start with BOS; the decoder reads ``target_ids[:-1]``, one output step per row.
    """
    decoder_input = list(target_ids[:-1])
    if not decoder_input:
        raise ValueError("target_ids needs BOS and at least one more token")
    layer = model.config.n_decoder_layers - 1
    name = module_name("cross", layer)
    attention_module = dict(model.named_modules())[name]
    device = next(model.parameters()).device
    src = torch.tensor([list(source_ids)], dtype=torch.long, device=device)
    tgt = torch.tensor([decoder_input], dtype=torch.long, device=device)
    with capture_attention(model, internals=True) as capture:
        model(src, tgt)
    weights = capture.attention[name][0].double()  # (heads, steps, source pieces)
    values = capture.internals[name]["value"][0].double()  # (heads, source pieces, head_dim)
    n_heads, head_dim = values.shape[0], values.shape[-1]
    out_weight = attention_module.out_proj.weight.detach().to("cpu", torch.float64)  # (d_model, heads * head_dim)
    per_head_out = out_weight.reshape(-1, n_heads, head_dim).permute(1, 2, 0)  # (heads, head_dim, d_model)
    sent = values @ per_head_out  # f_h(x_j): (heads, source pieces, d_model)
    weighted = weights[..., None] * sent[:, None, :, :]  # alpha_ij^h f_h(x_j): (heads, steps, source, d_model)
    per_head = weighted.norm(dim=-1)  # (heads, steps, source pieces)
    layer_norms = weighted.sum(dim=0).norm(dim=-1)  # (steps, source pieces)
    totals = layer_norms.sum(dim=-1, keepdim=True)
    source = torch.where(totals > 0, layer_norms / totals.clamp_min(torch.finfo(torch.float64).tiny), 0.0)
    return Attribution(
        "value_norm",
        source.numpy(),
        params={"layer": layer, "module": name},
        layers={"per_head": per_head.numpy(), "layer": layer_norms.numpy()},
    )
