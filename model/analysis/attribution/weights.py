"""Attributions read from the attention weights: the last layer's cross-attention with its rollout through the
encoder (Abnar & Zuidema 2020), and value norms (Kobayashi et al. 2020). Theory: docs/attribution.md"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from model.analysis.attribution.record import Attribution
from model.capture import capture_attention
from model.heads import module_name
from model.trace import Trace
from model.transformer import Transformer

ROLLOUT_RESIDUAL = 0.5  # Abnar & Zuidema's weight of the identity in each rolled-out layer


def attention_rollout(stack: np.ndarray, residual: float = ROLLOUT_RESIDUAL) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020) after each layer: (layers, heads, N, N) -> (layers, N, N).

    Each layer's head-averaged attention is mixed with the identity for the residual
    connection, A' = (1 - residual) * A + residual * I, rows renormalised, and the layers are
    multiplied in order: R_0 = A'_0, R_l = A'_l @ R_(l-1). Row i of R_l estimates how much of
    position i's representation after layer l comes from each input token. It needs square
    self-attention: for decoder self-attention it only follows the flow among target tokens
    and ignores what enters from the source through cross-attention. (The aggregate view,
    viz.aggregate_figure, draws it too.)
    """
    stack = np.asarray(stack, dtype=np.float64)
    if stack.shape[-1] != stack.shape[-2]:
        raise ValueError(f"rollout needs self-attention (queries == keys), got shape {stack.shape}")
    identity = np.eye(stack.shape[-1])
    rollout = identity
    results = []
    for layer_attention in stack.mean(axis=1):
        mixed = (1.0 - residual) * layer_attention + residual * identity
        rollout = (mixed / mixed.sum(axis=-1, keepdims=True)) @ rollout
        results.append(rollout)
    return np.stack(results) if results else np.empty((0, *identity.shape))


def attention_baseline(trace: Trace) -> Attribution:
    """The baseline, read from the trace: the last decoder layer's cross-attention, mean over heads, and for
    comparison its rollout through the encoder (attention_rollout). The per-head weights are the trace's own."""
    cross = trace.attention_stack("cross").astype(np.float64)  # (layers, heads, steps, source pieces)
    encoder_rollout = np.eye(cross.shape[-1])  # a model without encoder layers passes the source on unmixed
    if trace.attention_names("encoder_self"):
        encoder_rollout = attention_rollout(trace.attention_stack("encoder_self"))[-1]
    per_layer = cross.mean(axis=1)  # (layers, steps, source pieces)
    return Attribution(
        "attention",
        per_layer[-1],
        params={"layer": len(cross) - 1, "rollout_residual": ROLLOUT_RESIDUAL},
        layers={"per_layer": per_layer, "encoder_rollout": encoder_rollout, "rollout": per_layer[-1] @ encoder_rollout},
    )


@torch.inference_mode()
def value_norm(model: Transformer, source_ids: Sequence[int], target_ids: Sequence[int]) -> Attribution:
    """Kobayashi et al.'s norm-based attribution of the last decoder layer's cross-attention (docs/attribution.md):
    with f_h(x_j) head h's value vector of source piece j pushed through its slice of the output projection (its bias
    left out), output step i gets ||Σ_h α_ij^h f_h(x_j)|| from piece j, each row divided by its sum.

    ``target_ids`` start with BOS; the decoder reads ``target_ids[:-1]``, one output step per row. ``layers`` holds
    the same norms for every decoder layer's cross-attention: "per_head" (layers, heads, steps, source pieces),
    ||α_ij^h f_h(x_j)||, and "per_layer" (layers, steps, source pieces), ||Σ_h α_ij^h f_h(x_j)||, not normalised.
    """
    decoder_input = list(target_ids[:-1])
    if not decoder_input:
        raise ValueError("target_ids needs BOS and at least one more token")
    names = [module_name("cross", layer) for layer in range(model.config.n_decoder_layers)]
    modules = dict(model.named_modules())
    device = next(model.parameters()).device
    src = torch.tensor([list(source_ids)], dtype=torch.long, device=device)
    tgt = torch.tensor([decoder_input], dtype=torch.long, device=device)
    with capture_attention(model, internals=True) as capture:
        model(src, tgt)
    per_head, per_layer = [], []
    for name in names:
        weights = capture.attention[name][0].double()  # (heads, steps, source pieces)
        values = capture.internals[name]["value"][0].double()  # (heads, source pieces, head_dim)
        n_heads, head_dim = values.shape[0], values.shape[-1]
        out_weight = modules[name].out_proj.weight.detach().to("cpu", torch.float64)  # (d_model, heads * head_dim)
        per_head_out = out_weight.reshape(-1, n_heads, head_dim).permute(1, 2, 0)  # (heads, head_dim, d_model)
        sent = values @ per_head_out  # f_h(x_j): (heads, source pieces, d_model)
        weighted = weights[..., None] * sent[:, None, :, :]  # alpha_ij^h f_h(x_j): (heads, steps, source, d_model)
        per_head.append(weighted.norm(dim=-1))  # (heads, steps, source pieces)
        per_layer.append(weighted.sum(dim=0).norm(dim=-1))  # (steps, source pieces)
    last = per_layer[-1]
    totals = last.sum(dim=-1, keepdim=True)
    source = torch.where(totals > 0, last / totals.clamp_min(torch.finfo(torch.float64).tiny), 0.0)
    return Attribution(
        "value_norm",
        source.numpy(),
        params={"layer": len(names) - 1, "module": names[-1]},
        layers={"per_head": torch.stack(per_head).numpy(), "per_layer": torch.stack(per_layer).numpy()},
    )
