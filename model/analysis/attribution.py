"""Which source pieces made each output token: attributions beyond the raw attention weights.

``attribute(translator, trace, method)`` gives, for every output step of a trace, a row over the source pieces (ALTI+
also one over the decoder's input pieces: the two rows together sum to 1; otherwise the source row does), computed
from the trace's own tokens read by the model teacher-forced, on the shared model without changing it. The methods
(``ATTRIBUTION_METHODS``): ``"attention"`` (the last decoder layer's cross-attention, mean over heads, with its
attention rollout through the encoder; Abnar & Zuidema 2020), ``"value_norm"`` (Kobayashi et al. 2020),
``"grad_attention"`` (Chefer, Gur & Wolf 2021) and ``"alti_plus"`` (Ferrando et al. 2022). ``attributions_json``
and ``attributions_npz`` save a trace with its attributions.

Theory and references: docs/attribution.md
"""

from __future__ import annotations

import copy
import io
import json
import math
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from model.capture import capture_attention, intervene
from model.heads import module_name
from model.layers import MultiHeadAttention, causal_mask
from model.trace import Trace
from model.transformer import Transformer

if TYPE_CHECKING:
    from model.translator import Translator

ATTRIBUTION_METHODS = ("attention", "value_norm", "grad_attention", "alti_plus")
NORMALISING_EPSILON = 1e-9  # the rowsum floor in R̄ (see normalised)
ROLLOUT_RESIDUAL = 0.5  # Abnar & Zuidema's weight of the identity in each rolled-out layer
# ALTI+: a contributor's score max(0, ||y||_1 - ||y - T||_1) below this share of ||y||_1 counts as zero. In float64 the
# rounding of the two norms is about 1e-16 of ||y||_1, so anything above this share is a real contribution, and a row
# with nothing above it falls back to keeping its position (docs/attribution.md).
ZERO_CONTRIBUTION = 1e-9
NPZ_PREFIX = "attribution/"  # attributions_npz: the attributions' arrays, beside the trace's
NPZ_META = "attribution_meta"


@dataclass
class Attribution:
    """One method's attribution of a trace's output steps.

    ``source`` is (output steps, source pieces), each row summing to 1; a method that also gives
    ``target`` (output steps, decoder input pieces; else None) makes each row of the two together sum
    to 1. ``layers`` holds the method's per-layer (and per-head) detail by name, e.g. value_norm's "per_head":
    (decoder layers, heads, steps, source pieces); each method's docstring lists its own.
    """

    method: str
    source: np.ndarray
    target: np.ndarray | None = None
    params: dict[str, Any] = field(default_factory=dict)
    layers: dict[str, np.ndarray] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: arrays as nested lists."""
        return {
            "method": self.method,
            "source": self.source.tolist(),
            "target": None if self.target is None else self.target.tolist(),
            "params": self.params,
            "layers": {name: value.tolist() for name, value in self.layers.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attribution:
        return cls(
            data["method"],
            np.asarray(data["source"], dtype=np.float64),
            None if data["target"] is None else np.asarray(data["target"], dtype=np.float64),
            dict(data["params"]),
            {name: np.asarray(value, dtype=np.float64) for name, value in data["layers"].items()},
        )


def attributions_json(trace: Trace, attributions: Sequence[Attribution]) -> str:
    """The trace and its attributions as one JSON document: {"trace": Trace.to_dict(), "attributions": {method: ...}}
    (read back with Trace.from_dict and Attribution.from_dict)."""
    return json.dumps(
        {"trace": trace.to_dict(), "attributions": {found.method: found.to_dict() for found in attributions}},
        ensure_ascii=False,
    )


def attributions_npz(trace: Trace, attributions: Sequence[Attribution]) -> bytes:
    """The trace and its attributions as one NPZ file: the trace's arrays and "meta" as Trace.to_npz_bytes writes
    them (Trace.from_npz reads the file as it is); each attribution's arrays under "attribution/<method>/source",
    ".../target" and ".../layers/<name>", and what else it holds as JSON under "attribution_meta" (read back with
    attributions_from_npz)."""
    with np.load(io.BytesIO(trace.to_npz_bytes()), allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    meta = {}
    for found in attributions:
        prefix = f"{NPZ_PREFIX}{found.method}/"
        arrays[prefix + "source"] = found.source
        if found.target is not None:
            arrays[prefix + "target"] = found.target
        arrays.update({f"{prefix}layers/{name}": value for name, value in found.layers.items()})
        meta[found.method] = {"params": found.params, "target": found.target is not None, "layers": list(found.layers)}
    arrays[NPZ_META] = np.array(json.dumps(meta, ensure_ascii=False))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def attributions_from_npz(source: bytes | str | Path) -> dict[str, Attribution]:
    """The attributions attributions_npz saved, by method (the trace beside them: Trace.from_npz on the same file)."""
    file = io.BytesIO(source) if isinstance(source, bytes) else source
    with np.load(file, allow_pickle=False) as saved:
        meta = json.loads(str(saved[NPZ_META]))
        found = {}
        for method, entry in meta.items():
            prefix = f"{NPZ_PREFIX}{method}/"
            found[method] = Attribution(
                method,
                saved[prefix + "source"],
                saved[prefix + "target"] if entry["target"] else None,
                entry["params"],
                {name: saved[f"{prefix}layers/{name}"] for name in entry["layers"]},
            )
    return found


def attribute(translator: Translator, trace: Trace, method: str) -> Attribution:
    """Which source pieces made each output token of ``trace``, by ``method`` (one of ATTRIBUTION_METHODS), on the
    translator's shared model (``Translator.run``: a GPU out of memory falls back to the CPU)."""
    attribution, _ = translator.run(lambda model, device: model_attribution(model, trace, method))
    return attribution


def model_attribution(model: Transformer, trace: Trace, method: str) -> Attribution:
    """``attribute`` on a bare model: the ``method`` attribution of every output step of ``trace``."""
    if method == "attention":
        return attention_baseline(trace)
    if method == "value_norm":
        return value_norm(model, trace.source_ids, trace.target_ids)
    if method == "grad_attention":
        return grad_attention(model, trace.source_ids, trace.target_ids)
    if method == "alti_plus":
        return alti_plus(model, trace.source_ids, trace.target_ids)
    raise ValueError(f"method must be one of {ATTRIBUTION_METHODS}, not {method!r}")


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
    if trace.attention_names("encoder"):
        encoder_rollout = attention_rollout(trace.attention_stack("encoder"))[-1]
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


def normalised(relevancy: np.ndarray) -> np.ndarray:
    """R̄ = (R − I) / rowsum(R − I) + I, the self-relevancy a cross-attention layer mixes in (Chefer et al.); a row of
    R − I that sums to 0 (e.g. before any update) is divided by NORMALISING_EPSILON instead, so it stays 0, not NaN."""
    identity = np.eye(len(relevancy))
    without_self = relevancy - identity
    sums = without_self.sum(axis=-1, keepdims=True)
    return without_self / np.where(np.abs(sums) < NORMALISING_EPSILON, NORMALISING_EPSILON, sums) + identity


def weighted_heads(attention: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """The positive part of gradient ⊙ attention, head by head: (heads, queries, keys)."""
    return np.clip(gradient * attention, 0.0, None)


def weighted_attention(attention: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """Ā = mean over heads of the positive part of gradient ⊙ attention: (heads, queries, keys) -> (queries, keys)."""
    return weighted_heads(attention, gradient).mean(axis=0)


def relevancy(
    encoder: Sequence[tuple[np.ndarray, np.ndarray]],
    decoder: Sequence[tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chefer et al.'s relevancies R^ss (source, source), R^tt (target, target) and R^ts (target, source) from each
    layer's (attention, gradient): ``encoder`` per encoder layer, ``decoder`` per decoder layer as (self-attention,
    cross-attention), each array (heads, queries, keys). From R^ss = I, R^tt = I, R^ts = 0: each encoder layer
    R^ss += Ā R^ss; each decoder self-attention layer R^tt += Ā R^tt and R^ts += Ā R^ts; each cross-attention layer
    R^ts += (R̄^tt)ᵀ Ā R̄^ss (eqs. 6–11 of the paper; docs/attribution.md)."""
    n_source = encoder[0][0].shape[-1] if encoder else decoder[0][1][0].shape[-1]
    n_target = decoder[0][0][0].shape[-1]
    source_self, target_self = np.eye(n_source), np.eye(n_target)
    target_source = np.zeros((n_target, n_source))
    for attention, gradient in encoder:
        source_self = source_self + weighted_attention(attention, gradient) @ source_self
    for (self_attention, self_gradient), (cross_attention, cross_gradient) in decoder:
        mixed = weighted_attention(self_attention, self_gradient)
        target_self = target_self + mixed @ target_self
        target_source = target_source + mixed @ target_source
        cross = weighted_attention(cross_attention, cross_gradient)
        target_source = target_source + normalised(target_self).T @ cross @ normalised(source_self)
    return source_self, target_self, target_source


def grad_attention(model: Transformer, source_ids: Sequence[int], target_ids: Sequence[int]) -> Attribution:
    """Chefer et al.'s gradient-weighted relevancy (docs/attribution.md): for each output step, the relevancy of every
    source piece for the logit of the token written there (relevancy), its row divided by its sum; one backward pass
    per output step.

    The attention tensors are read in the graph through an edit (model.capture.intervene) that returns them
    unchanged, so the shared model is never modified and other threads see nothing; the positional encoding
    is made to require a gradient, so the graph is recorded whether or not the weights require one.

    ``layers``: "relevancy" (steps, source pieces), the rows before normalising; "cross" (decoder layers, heads,
    steps, source pieces) and "decoder" (decoder layers, heads, steps, decoder input pieces), each head's
    (∇A ⊙ A)⁺ in the query row of output step i, from the gradient of step i's own logit; "source_self" (steps,
    source, source), the encoder relevancy R^ss that step's gradient builds.
    """
    decoder_input = list(target_ids[:-1])
    if not decoder_input:
        raise ValueError("target_ids needs BOS and at least one more token")
    config = model.config
    device = next(model.parameters()).device
    attention: dict[str, torch.Tensor] = {}

    def record(name: str, kind: str, value: torch.Tensor) -> torch.Tensor:
        if kind == "positional":
            return value.detach().requires_grad_(True)
        if kind == "attention":
            attention[name] = value
        return value

    encoder_names = [module_name("encoder", layer) for layer in range(config.n_encoder_layers)]
    decoder_names = [
        (module_name("decoder", layer), module_name("cross", layer)) for layer in range(config.n_decoder_layers)
    ]
    names = encoder_names + [name for pair in decoder_names for name in pair]
    src = torch.tensor([list(source_ids)], dtype=torch.long, device=device)
    tgt = torch.tensor([decoder_input], dtype=torch.long, device=device)
    with torch.enable_grad(), torch.inference_mode(False), intervene(model, record):
        logits = model(src, tgt)[0]  # (steps, vocabulary)
        chosen = logits[torch.arange(len(decoder_input)), torch.tensor(list(target_ids[1:]), device=device)]
        rows, source_selves, cross_rows, decoder_rows = [], [], [], []
        for step in range(len(decoder_input)):
            gradients = torch.autograd.grad(chosen[step], [attention[name] for name in names], retain_graph=True)
            found = {
                name: (attention[name][0].detach().double().cpu().numpy(), gradient[0].double().cpu().numpy())
                for name, gradient in zip(names, gradients, strict=True)
            }
            source_self, _, target_source = relevancy(
                [found[name] for name in encoder_names],
                [(found[self_name], found[cross_name]) for self_name, cross_name in decoder_names],
            )
            rows.append(target_source[step])
            source_selves.append(source_self)
            cross_rows.append([weighted_heads(*found[cross_name])[:, step] for _, cross_name in decoder_names])
            decoder_rows.append([weighted_heads(*found[self_name])[:, step] for self_name, _ in decoder_names])
    raw = np.array(rows)  # (steps, source pieces), non-negative
    totals = raw.sum(axis=-1, keepdims=True)
    source = raw / np.where(totals > 0, totals, 1.0)  # a row of zeros (nothing to share) stays zeros
    by_layer = (1, 2, 0, 3)  # (steps, layers, heads, keys) -> (layers, heads, steps, keys)
    return Attribution(
        "grad_attention",
        source,
        params={"epsilon": NORMALISING_EPSILON},
        layers={
            "relevancy": raw,
            "cross": np.transpose(np.array(cross_rows), by_layer),
            "decoder": np.transpose(np.array(decoder_rows), by_layer),
            "source_self": np.array(source_selves),
        },
    )


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

    ``layers`` holds each block's contributions before the rollout: "encoder" (encoder layers, source, source),
    "decoder" (decoder layers, steps, steps) and "cross" (decoder layers, steps, source pieces + 1, the last
    column the residual's share), every row summing to 1; "source_self" the encoder's rollout (source, source);
    "reconstruction_error" how far each block's rebuilt output is from the real one (encoder blocks, then each
    decoder layer's self- and cross-attention); "encoder_strength", "decoder_strength", "cross_strength" per block
    and row the scores' sum as a share of ||y_i||_1, 0 where the row fell back to keeping its position
    (``params["fallback_rows"]`` counts them per kind)."""
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
    strengths: dict[str, list[torch.Tensor]] = {"encoder": [], "decoder": [], "cross": []}

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
    per_block: dict[str, list[torch.Tensor]] = {"encoder": [], "decoder": [], "cross": []}
    x = encoder.positional(encoder.embed(src))[0]
    source_self = torch.eye(len(source_ids), dtype=torch.float64, device=device)
    for layer in encoder.layers:
        contributions, _ = block("encoder", layer.self_attn, layer.norm1, x, None, causal=False)
        per_block["encoder"].append(contributions)
        source_self = contributions @ source_self
        x = layer(x[None], None)[0]
    memory = encoder.norm(x) if encoder.norm is not None else x
    y = decoder.positional(decoder.embed(tgt))[0]
    target_self = torch.eye(len(decoder_input), dtype=torch.float64, device=device)
    target_source = torch.zeros(len(decoder_input), len(source_ids), dtype=torch.float64, device=device)
    for layer in decoder.layers:
        mixing, after_self = block("decoder", layer.self_attn, layer.norm1, y, None, causal=True)
        target_self, target_source = mixing @ target_self, mixing @ target_source
        contributions, _ = block("cross", layer.cross_attn, layer.norm2, after_self, memory, causal=False)
        per_block["decoder"].append(mixing)
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
