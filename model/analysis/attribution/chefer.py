"""Gradient-weighted attention relevancy (Chefer, Gur & Wolf 2021) for an encoder-decoder: grad_attention.
Theory: docs/attribution.md"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from model.analysis.attribution.record import Attribution
from model.capture import intervene
from model.heads import module_name
from model.transformer import Transformer

NORMALISING_EPSILON = 1e-9  # the rowsum floor in R̄ (see normalised)


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
    steps, source pieces) and "decoder_self" (decoder layers, heads, steps, decoder input pieces), each head's
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

    encoder_names = [module_name("encoder_self", layer) for layer in range(config.n_encoder_layers)]
    decoder_names = [
        (module_name("decoder_self", layer), module_name("cross", layer)) for layer in range(config.n_decoder_layers)
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
            "decoder_self": np.transpose(np.array(decoder_rows), by_layer),
            "source_self": np.array(source_selves),
        },
    )
