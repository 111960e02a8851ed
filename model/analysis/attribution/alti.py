"""ALTI+ (Ferrando et al. 2022): each block's token-to-token contributions, measured by how far a contributor's
share of the output lies from the output, rolled through the layers. Theory: docs/attribution.md"""

from __future__ import annotations

import copy
import math
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from model.analysis.attribution.record import Attribution
from model.heads import ATTENTION_KINDS
from model.layers import MultiHeadAttention, causal_mask
from model.transformer import Transformer

# ALTI+: a contributor's score max(0, ||y||_1 - ||y - T||_1) below this share of ||y||_1 counts as zero. In float64 the
# rounding of the two norms is about 1e-16 of ||y||_1, so anything above this share is a real contribution, and a row
# with nothing above it falls back to keeping its position (docs/attribution.md).
ZERO_CONTRIBUTION = 1e-9


def attention_terms(module: MultiHeadAttention, query: torch.Tensor, key_value: torch.Tensor, causal: bool):
    """(queries, keys, d_model): what each key position adds to each query position's attention output,
    Σ_h α_ij^h f_h(x_j), recomputed from the module's weights (the output projection's bias left out)."""
    q = module.split_heads(module.q_proj(query[None]))[0]  # (heads, queries, head_dim)
    k = module.split_heads(module.k_proj(key_value[None]))[0]
    v = module.split_heads(module.v_proj(key_value[None]))[0]
    scores = q @ k.transpose(-2, -1) / math.sqrt(module.head_dim)
    if causal:
        scores = scores.masked_fill(~causal_mask(len(query), len(key_value), query.device), float("-inf"))
    weights = scores.softmax(dim=-1)  # (heads, queries, keys)
    per_head_out = module.out_proj.weight.reshape(-1, module.n_heads, module.head_dim).permute(1, 2, 0)
    return torch.einsum("hqk,hkd->qkd", weights, v @ per_head_out)


@dataclass
class BlockContributions:
    """One attention block's ALTI contributions (rows summing to 1), its output rebuilt from its parts, and per row
    the sum of the scores above ZERO_CONTRIBUTION as a share of ||y_i||_1 (0: nothing scored, the row fell back)."""

    contributions: torch.Tensor
    output: torch.Tensor
    strength: torch.Tensor


def block_contributions(
    residual: torch.Tensor,
    terms: torch.Tensor,
    bias: torch.Tensor,
    norm: torch.nn.LayerNorm | None,
    self_attention: bool,
) -> BlockContributions:
    """ALTI's contributions of one attention block and the block's output rebuilt from its parts.

    The contributors follow the reference code (Ferrando et al.'s transformer-contributions-nmt,
    ``wrappers/transformer_wrapper.py``, ``out_qv_pre_ln``): in self-attention the query's residual joins its own
    key's term, so a row is over the keys (queries, keys); in cross-attention the residual comes from the other
    sequence's side and is one more contributor, last (queries, keys + 1). The terms exclude the biases (the
    output projection's ``bias`` and, after a layer norm, β); all of them are layer-normed linearly with the whole
    sum's standard deviation; the distances are measured to the block's whole output, biases included.
    """
    if self_attention:
        own = torch.eye(len(residual), dtype=terms.dtype, device=terms.device)  # (queries, keys): key i is query i
        contributors = terms + own[:, :, None] * residual[:, None, :]
    else:
        contributors = torch.cat([terms, residual[:, None, :]], dim=1)
        own = torch.zeros(contributors.shape[:2], dtype=terms.dtype, device=terms.device)
        own[:, -1] = 1.0
    parts = torch.cat([contributors, bias.expand_as(residual)[:, None, :]], dim=1)
    if norm is not None:
        total = parts.sum(dim=1)
        scale = norm.weight / torch.sqrt(total.var(dim=-1, unbiased=False, keepdim=True) + norm.eps)
        parts = (parts - parts.mean(dim=-1, keepdim=True)) * scale[:, None, :]
    output = parts.sum(dim=1) + (norm.bias if norm is not None else 0.0)
    contributors = parts[:, :-1]  # the bias is nobody's contribution
    distances = (output[:, None, :] - contributors).abs().sum(dim=-1)
    size = output.abs().sum(dim=-1, keepdim=True)  # ||y_i||_1
    raw = size - distances
    raw = torch.where(raw > ZERO_CONTRIBUTION * size, raw, torch.zeros_like(raw))
    strength = (raw.sum(dim=-1) / size.squeeze(-1)).nan_to_num(0.0)
    nothing_close = raw.sum(dim=-1, keepdim=True) == 0
    raw = raw + own * nothing_close  # nothing clearly close to the output: the position keeps itself
    return BlockContributions(raw / raw.sum(dim=-1, keepdim=True), output, strength)


_float64_copies: weakref.WeakKeyDictionary[Transformer, Transformer] = weakref.WeakKeyDictionary()
_float64_lock = threading.Lock()


def float64_model(model: Transformer) -> Transformer:
    """A float64 copy of ``model``, made once and kept while the model lives (the model itself when it is float64).

    ALTI+'s scores are differences of two nearly equal L1 norms; in float32 they cancel to noise when a
    contribution is near zero. The copy leaves the shared model as it is.
    """
    if next(model.parameters()).dtype == torch.float64:
        return model
    with _float64_lock:
        found = _float64_copies.get(model)
        if found is None:
            found = _float64_copies[model] = copy.deepcopy(model).double().eval()
        return found


@torch.inference_mode()
def alti_plus(
    model: Transformer, source_ids: Sequence[int], target_ids: Sequence[int], dtype: torch.dtype = torch.float64
) -> Attribution:
    """Ferrando et al.'s ALTI+ (docs/attribution.md): for each output step, the contribution of every source piece
    (``source``) and every decoder input piece (``target``) to the decoder's last layer there, each block's
    contributions (block_contributions) rolled out through the layers. The feed-forward layers and the layer norms
    after them mix no positions and are not decomposed, as in the paper. Computed in ``dtype``: float64 by default,
    on a float64 copy of the model (float64_model); float32 runs the model as it is.

    ``layers`` holds each block's contributions before the rollout, by kind of attention: "encoder_self" (encoder
    layers, source, source), "decoder_self" (decoder layers, steps, steps) and "cross" (decoder layers, steps,
    source pieces + 1, the last column the residual's share), every row summing to 1; "source_self" the encoder's
    rollout (source, source); "reconstruction_error" how far each block's rebuilt output is from the real one
    (encoder blocks, then each decoder layer's self- and cross-attention); "encoder_self_strength",
    "decoder_self_strength", "cross_strength" per block and row the scores' sum as a share of ||y_i||_1, 0 where
    the row fell back to keeping its position (``params["fallback_rows"]`` counts them per kind)."""
    decoder_input = list(target_ids[:-1])
    if not decoder_input:
        raise ValueError("target_ids needs BOS and at least one more token")
    if dtype == torch.float64:
        model = float64_model(model)
    elif next(model.parameters()).dtype != dtype:
        raise ValueError(f"alti_plus runs in float64, or in the model's own dtype, not {dtype}")
    device = next(model.parameters()).device
    post_norm = not model.config.norm_first
    errors: list[float] = []
    strengths: dict[str, list[torch.Tensor]] = {kind: [] for kind in ATTENTION_KINDS}

    def block(kind, module, norm, x, key_value, causal) -> tuple[torch.Tensor, torch.Tensor]:
        """Contributions of one attention block on input x (and the block's real output, for the check)."""
        attended = x if post_norm else norm(x)
        source = key_value if key_value is not None else attended
        terms = attention_terms(module, attended, source, causal)
        found = block_contributions(
            x, terms, module.out_proj.bias, norm if post_norm else None, self_attention=key_value is None
        )
        output = module(attended[None], source[None], None, is_causal=causal)[0]
        real = norm(x + output) if post_norm else x + output
        errors.append(float((found.output - real).abs().max()))
        strengths[kind].append(found.strength.double())
        return found.contributions.double(), real

    src = torch.tensor([list(source_ids)], dtype=torch.long, device=device)
    tgt = torch.tensor([decoder_input], dtype=torch.long, device=device)
    encoder, decoder = model.encoder, model.decoder
    per_block: dict[str, list[torch.Tensor]] = {kind: [] for kind in ATTENTION_KINDS}
    x = encoder.embed_positions(src)[0]
    source_self = torch.eye(len(source_ids), dtype=torch.float64, device=device)
    for layer in encoder.layers:
        contributions, _ = block("encoder_self", layer.self_attn, layer.norm1, x, None, causal=False)
        per_block["encoder_self"].append(contributions)
        source_self = contributions @ source_self
        x = layer(x[None], None)[0]
    memory = encoder.norm(x) if encoder.norm is not None else x
    y = decoder.embed_positions(tgt)[0]
    target_self = torch.eye(len(decoder_input), dtype=torch.float64, device=device)
    target_source = torch.zeros(len(decoder_input), len(source_ids), dtype=torch.float64, device=device)
    for layer in decoder.layers:
        mixing, after_self = block("decoder_self", layer.self_attn, layer.norm1, y, None, causal=True)
        target_self, target_source = mixing @ target_self, mixing @ target_source
        contributions, _ = block("cross", layer.cross_attn, layer.norm2, after_self, memory, causal=False)
        per_block["decoder_self"].append(mixing)
        per_block["cross"].append(contributions)
        kept = contributions[:, -1:]  # the residual's share stays with the target side
        target_self = kept * target_self
        target_source = kept * target_source + contributions[:, :-1] @ source_self
        y = layer(y[None], memory[None], None, None)[0]
    details = {name: torch.stack(blocks).cpu().numpy() for name, blocks in per_block.items() if blocks}
    strength = {f"{kind}_strength": torch.stack(rows).cpu().numpy() for kind, rows in strengths.items() if rows}
    return Attribution(
        "alti_plus",
        target_source.cpu().numpy(),
        target_self.cpu().numpy(),
        params={
            "post_norm": post_norm,
            "distance": "l1",
            "dtype": str(dtype).removeprefix("torch."),
            "zero_contribution": ZERO_CONTRIBUTION,
            "fallback_rows": {
                kind.removesuffix("_strength"): int((rows == 0).sum()) for kind, rows in strength.items()
            },
        },
        layers={
            **details,
            **strength,
            "source_self": source_self.cpu().numpy(),
            "reconstruction_error": np.array(errors),
        },
    )
