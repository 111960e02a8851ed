"""Which source pieces made each output token: attributions beyond the raw attention weights.

Attention weights say where a head reads, not how much of what it reads reaches the output
(Jain & Wallace 2019; Serrano & Smith 2019). Each method here gives, for every output step of
a trace, a row over the source pieces (with ALTI+, and over the decoder's input pieces: the two
rows together sum to 1; otherwise the source row does), computed from the trace's own tokens
read by the model teacher-forced, on the shared model without changing it:

- ``"attention"``, the baseline: the last decoder layer's cross-attention, mean over heads.
- ``"value_norm"`` (Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing
  Transformers with Vector Norms", EMNLP): the last decoder layer's cross-attention weighted by
  what each source piece sends. With f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h, head h's value vector
  of source piece j pushed through its slice of the output projection, output step i gets
  ||sum_h alpha_ij^h f_h(x_j)|| from piece j (the output projection's bias is the same for
  every j and left out, as in the paper), each row divided by its sum. ``layers`` keeps the
  per-head norms ||alpha_ij^h f_h(x_j)|| and the layer's unnormalised row.

- ``"grad_attention"`` (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability for
  Interpreting Bi-Modal and Encoder-Decoder Transformers", ICCV): relevancy propagated through
  every attention layer with the gradient-weighted attention Ā = mean_h (∇A ⊙ A)^+, ∇A the
  gradient of the output token's logit with respect to that layer's attention. Starting from
  R^ss = I, R^tt = I, R^ts = 0: each encoder self-attention layer R^ss += Ā R^ss; each decoder
  self-attention layer R^tt += Ā R^tt and R^ts += Ā R^ts; each cross-attention layer
  R^ts += (R̄^tt)ᵀ Ā R̄^ss, with R̄ = (R − I) / rowsum(R − I) + I (eqs. 6–11 of the paper; a row of
  R − I that sums to 0, e.g. before any update, is divided by an epsilon instead, so it stays 0
  rather than NaN). Output step i's row of R^ts, from the gradient of its own logit, divided by
  its sum, is ``source``. One backward pass per output step.

- ``"alti_plus"`` (Ferrando, Gállego, Alastruey, Escolano & Costa-jussà 2022, "Towards Opening the
  Black Box of Neural Machine Translation: Source and Target Contributions in the Transformer",
  EMNLP; ALTI: Ferrando, Gállego & Costa-jussà 2022): each attention block's output y_i is split
  exactly into one term per input position, T_ij = Σ_h α_ij^h f_h(x_j), the residual term x_i of
  position i itself, and the biases; in a post-norm block the layer norm is applied to each term
  linearly, with the standard deviation of the whole sum (γ ⊙ (T − mean T) / σ; with β the terms
  add up to the block's output, and ``layers["reconstruction_error"]`` records how exactly for
  every block). Term j contributes c_ij = max(0, ||y_i||₁ − ||y_i − T_ij||₁) (the biases contribute
  nothing; y_i includes them, as in the reference code), each row divided by its sum. The
  contributions are rolled out through the layers: encoder self-attention mixes source positions
  (R^ss), decoder self-attention target positions (R^tt, R^ts), and each cross-attention block keeps
  its residual's share of the target side and adds the encoder output's shares, each a mixture of
  source pieces by R^ss (the reference code's rollout). ``source`` is R^ts and ``target`` R^tt: each row
  of the two together sums to 1. Approximated, as in the paper: the feed-forward layers (applied to
  each position alone) and the layer norms after them mix no positions and are not decomposed.

``ATTRIBUTION_METHODS`` lists the methods.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from model.capture import capture_attention, intervene
from model.heads import module_name
from model.layers import MultiHeadAttention, causal_mask
from model.trace import Trace
from model.transformer import Transformer

ATTRIBUTION_METHODS = ("attention", "value_norm", "grad_attention", "alti_plus")
NORMALISING_EPSILON = 1e-9  # the rowsum floor in R̄ (see grad_attention)


@dataclass
class Attribution:
    """One method's attribution of a trace's output steps.

    ``source`` is (output steps, source pieces), each row summing to 1; a method that also gives
    ``target`` (output steps, decoder input pieces; else None) makes each row of the two together sum
    to 1. ``layers`` holds the method's detail by name (e.g. "per_head": (heads, steps, source pieces)).
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


def attribute(model: Transformer, trace: Trace, method: str) -> Attribution:
    """The ``method`` attribution (one of ATTRIBUTION_METHODS) of every output step of ``trace``."""
    if method == "attention":
        cross = trace.attention_stack("cross")  # (layers, heads, steps, source pieces)
        return Attribution(method, cross[-1].mean(axis=0), params={"layer": len(cross) - 1})
    if method == "value_norm":
        return value_norm(model, trace.source_ids, trace.target_ids)
    if method == "grad_attention":
        return grad_attention(model, trace.source_ids, trace.target_ids)
    if method == "alti_plus":
        return alti_plus(model, trace.source_ids, trace.target_ids)
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


def normalised(relevancy: np.ndarray) -> np.ndarray:
    """R̄ = (R − I) / rowsum(R − I) + I, the self-relevancy a cross-attention layer mixes in (Chefer et al.)."""
    identity = np.eye(len(relevancy))
    without_self = relevancy - identity
    sums = without_self.sum(axis=-1, keepdims=True)
    return without_self / np.where(np.abs(sums) < NORMALISING_EPSILON, NORMALISING_EPSILON, sums) + identity


def weighted_attention(attention: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """Ā = mean over heads of the positive part of gradient ⊙ attention: (heads, queries, keys) -> (queries, keys)."""
    return np.clip(gradient * attention, 0.0, None).mean(axis=0)


def relevancy(
    encoder: Sequence[tuple[np.ndarray, np.ndarray]],
    decoder: Sequence[tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chefer et al.'s relevancies R^ss (source, source), R^tt (target, target) and R^ts (target, source) from each
    layer's (attention, gradient): ``encoder`` per encoder layer, ``decoder`` per decoder layer as (self-attention,
    cross-attention), each array (heads, queries, keys). The update rules are in the module docstring."""
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
    """Chefer et al.'s gradient-weighted relevancy (module docstring): for each output step, the relevancy of every
    source piece for the logit of the token written there.

    The attention tensors are read in the graph through an edit (model.capture.intervene) that returns them
    unchanged, so the shared model is never modified and other threads see nothing; the positional encoding
    is made to require a gradient, so the graph is recorded whether or not the weights require one.
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
        rows = []
        for step in range(len(decoder_input)):
            gradients = torch.autograd.grad(chosen[step], [attention[name] for name in names], retain_graph=True)
            found = {
                name: (attention[name][0].detach().double().cpu().numpy(), gradient[0].double().cpu().numpy())
                for name, gradient in zip(names, gradients, strict=True)
            }
            _, _, target_source = relevancy(
                [found[name] for name in encoder_names],
                [(found[self_name], found[cross_name]) for self_name, cross_name in decoder_names],
            )
            rows.append(target_source[step])
    raw = np.array(rows)  # (steps, source pieces), non-negative
    totals = raw.sum(axis=-1, keepdims=True)
    source = np.divide(raw, totals, out=np.zeros_like(raw), where=totals > 0)
    return Attribution("grad_attention", source, params={"epsilon": NORMALISING_EPSILON}, layers={"relevancy": raw})


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


def block_contributions(
    residual: torch.Tensor, terms: torch.Tensor, bias: torch.Tensor, norm: torch.nn.LayerNorm | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """ALTI's contributions of one attention block: rows over [the query's own residual, each key] summing to 1,
    and the block's output rebuilt from its parts.

    As in the reference code (Ferrando et al.'s transformer-contributions-nmt): the contributors are the
    residual and the terms without the biases (the output projection's ``bias`` and, after a layer norm, β),
    all of them layer-normed linearly with the whole sum's standard deviation; the distances are measured to
    the block's whole output, biases included.
    """
    parts = torch.cat([residual[:, None, :], terms, bias.expand_as(residual)[:, None, :]], dim=1)
    if norm is not None:
        total = parts.sum(dim=1)
        scale = norm.weight / torch.sqrt(total.var(dim=-1, unbiased=False, keepdim=True) + norm.eps)
        parts = (parts - parts.mean(dim=-1, keepdim=True)) * scale[:, None, :]
    output = parts.sum(dim=1) + (norm.bias if norm is not None else 0.0)
    contributors = parts[:, :-1]  # the bias is nobody's contribution
    distances = (output[:, None, :] - contributors).abs().sum(dim=-1)
    raw = (output.abs().sum(dim=-1, keepdim=True) - distances).clamp_min(0.0)
    raw[:, 0] += raw.sum(dim=-1) == 0  # nothing close to the output at all: the position keeps itself
    return raw / raw.sum(dim=-1, keepdim=True), output


@torch.inference_mode()
def alti_plus(model: Transformer, source_ids: Sequence[int], target_ids: Sequence[int]) -> Attribution:
    """Ferrando et al.'s ALTI+ (module docstring): for each output step, the contribution of every source piece
    (``source``) and every decoder input piece (``target``) to the decoder's last layer there."""
    decoder_input = list(target_ids[:-1])
    if not decoder_input:
        raise ValueError("target_ids needs BOS and at least one more token")
    device = next(model.parameters()).device
    post_norm = not model.config.norm_first
    errors: list[float] = []

    def block(module, norm, x, key_value, causal) -> tuple[torch.Tensor, torch.Tensor]:
        """Contributions of one attention block on input x (and the block's real output, for the check)."""
        attended = x if post_norm else norm(x)
        source = key_value if key_value is not None else attended
        terms = attention_terms(module, attended, source, causal)
        contributions, rebuilt = block_contributions(x, terms, module.out_proj.bias, norm if post_norm else None)
        output = module(attended[None], source[None], None, is_causal=causal)[0]
        real = norm(x + output) if post_norm else x + output
        errors.append(float((rebuilt - real).abs().max()))
        return contributions.double(), real

    src = torch.tensor([list(source_ids)], dtype=torch.long, device=device)
    tgt = torch.tensor([decoder_input], dtype=torch.long, device=device)
    encoder, decoder = model.encoder, model.decoder
    x = encoder.positional(encoder.embed(src))[0]
    source_self = torch.eye(len(source_ids), dtype=torch.float64, device=device)
    for layer in encoder.layers:
        contributions, _ = block(layer.self_attn, layer.norm1, x, None, causal=False)
        source_self = (torch.diag(contributions[:, 0]) + contributions[:, 1:]) @ source_self
        x = layer(x[None], None)[0]
    memory = encoder.norm(x) if encoder.norm is not None else x
    y = decoder.positional(decoder.embed(tgt))[0]
    target_self = torch.eye(len(decoder_input), dtype=torch.float64, device=device)
    target_source = torch.zeros(len(decoder_input), len(source_ids), dtype=torch.float64, device=device)
    for layer in decoder.layers:
        contributions, after_self = block(layer.self_attn, layer.norm1, y, None, causal=True)
        mixing = torch.diag(contributions[:, 0]) + contributions[:, 1:]
        target_self, target_source = mixing @ target_self, mixing @ target_source
        contributions, _ = block(layer.cross_attn, layer.norm2, after_self, memory, causal=False)
        kept = contributions[:, :1]  # the residual's share stays with the target side
        target_self = kept * target_self
        target_source = kept * target_source + contributions[:, 1:] @ source_self
        y = layer(y[None], memory[None], None, None)[0]
    return Attribution(
        "alti_plus",
        target_source.cpu().numpy(),
        target_self.cpu().numpy(),
        params={"post_norm": post_norm},
        layers={"source_self": source_self.cpu().numpy(), "reconstruction_error": np.array(errors)},
    )
