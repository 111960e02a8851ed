"""Figure 1 of the paper drawn for one model: its boxes in the order the figure stacks them, and one live number per
box for a translation, so the map of the page says something about the sentence on it.

A box inside a layer stands for that box in every layer (the figure's "N×"); its number is given per layer. A
post-norm layer (the paper's) adds and normalises after each sublayer ("Add & Norm"); a pre-norm layer normalises
the sublayer's input ("Norm", below it) and adds its output ("Add", above it), and its stack ends with a final
"Norm" where the model has one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.analysis.activations import ATTENTION_SUBLAYERS, Activations
from model.config import TransformerConfig
from model.heads import STACKS, module_name
from model.trace import Trace

# What each kind of box is, as Figure 1 names it
BOX_KINDS = ("embedding", "positional", "attention", "add_norm", "norm", "add", "feed_forward", "linear", "softmax")
SUBLAYER_KINDS = {
    "self_attn": {"encoder": "encoder_self", "decoder": "decoder_self"},
    "cross_attn": {"decoder": "cross"},
}
SUBLAYER_LABELS = {
    ("encoder", "self_attn"): "Multi-Head Attention",
    ("decoder", "self_attn"): "Masked Multi-Head Attention",
    ("decoder", "cross_attn"): "Multi-Head Attention over the encoder",
    ("encoder", "feed_forward"): "Feed Forward",
    ("decoder", "feed_forward"): "Feed Forward",
}
# What each box's number is called (a box's accessible name says it), and what it says (its tooltip)
NUMBER_NAMES = {
    "embedding": "share of position",
    "attention": "mean entropy",
    "add_norm": "change to the residual",
    "add": "change to the residual",
    "feed_forward": "units active",
    "softmax": "mean probability",
}
NUMBER_MEANINGS = {
    "embedding": "share of position in the sum: ||position|| / (||token|| + ||position||), mean over tokens",
    "attention": "mean entropy of its heads' attention rows, in bits (low: each head looks at few tokens)",
    "add_norm": "how much the sublayer changed the residual: ||sublayer output|| / ||residual||, mean over tokens",
    "add": "how much the sublayer changed the residual: ||sublayer output|| / ||residual||, mean over tokens",
    "feed_forward": "share of its hidden units active (above zero), mean over tokens",
    "softmax": "mean probability of the token written at each step",
}


@dataclass(frozen=True)
class Box:
    """One box of Figure 1. ``key`` names it on the page (and in ``box_numbers``); ``layer_box``: it stands for the
    same box in each of its stack's layers."""

    key: str  # e.g. "encoder.embed", "decoder.cross_attn", "decoder.add.cross_attn", "linear"
    kind: str  # one of BOX_KINDS
    label: str  # as Figure 1 writes it
    stack: str | None  # "encoder", "decoder", or None for the output's Linear and Softmax
    sublayer: str | None = None  # "self_attn", "cross_attn" or "feed_forward" for the boxes of a sublayer
    layer_box: bool = False

    def __post_init__(self) -> None:
        if self.kind not in BOX_KINDS:
            raise ValueError(f"a box's kind is one of {BOX_KINDS}, not {self.kind!r}")

    @property
    def attention_kind(self) -> str | None:
        """The attention kind of an attention box ("encoder_self", "decoder_self", "cross"), else None."""
        return (
            SUBLAYER_KINDS[self.sublayer][self.stack]
            if self.kind == "attention" and self.sublayer and self.stack
            else None
        )


def figure_boxes(config: TransformerConfig) -> list[Box]:
    """Every box of Figure 1 for ``config``, bottom to top: the encoder's, then the decoder's, then Linear and
    Softmax."""
    boxes = []
    for stack in STACKS:
        shared = config.share_embeddings
        name = "Input Embedding" if stack == "encoder" else "Output Embedding"
        boxes.append(Box(f"{stack}.embed", "embedding", f"{name} (shared)" if shared else name, stack))
        boxes.append(Box(f"{stack}.positional", "positional", "Positional Encoding", stack))
        if config.embedding_norm:  # mBART's LayerNorm on the embedding sum, before the first layer
            boxes.append(Box(f"{stack}.embedding_norm", "norm", "Norm", stack))
        for sublayer in (*ATTENTION_SUBLAYERS[stack], "feed_forward"):
            kind = "attention" if sublayer != "feed_forward" else "feed_forward"
            label = SUBLAYER_LABELS[(stack, sublayer)]
            if config.norm_first:
                boxes.append(Box(f"{stack}.norm.{sublayer}", "norm", "Norm", stack, sublayer, True))
            boxes.append(Box(f"{stack}.{sublayer}", kind, label, stack, sublayer, True))
            after = ("add", "Add") if config.norm_first else ("add_norm", "Add & Norm")
            boxes.append(Box(f"{stack}.{after[0]}.{sublayer}", after[0], after[1], stack, sublayer, True))
        if config.final_norm:
            boxes.append(Box(f"{stack}.norm", "norm", "Norm", stack))
    boxes.append(Box("linear", "linear", "Linear", None))
    boxes.append(Box("softmax", "softmax", "Softmax", None))
    return boxes


def attention_entropy_bits(weights: np.ndarray) -> float:
    """Mean entropy, in bits, of the rows of (heads, queries, keys) attention weights."""
    p = np.clip(np.asarray(weights, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return float(terms.sum(axis=-1).mean())


def position_share(activations: Activations, stack: str) -> np.ndarray:
    """(positions,): ||position|| / (||token|| + ||position||), the share of the first layer's input that is the
    positional encoding (read as the sum minus the scaled token embedding)."""
    token = activations.point(stack, None, "hook_embed")
    position = activations.point(stack, None, "hook_embed_pos") - token
    token_norm, position_norm = np.linalg.norm(token, axis=-1), np.linalg.norm(position, axis=-1)
    return position_norm / np.maximum(token_norm + position_norm, np.finfo(np.float32).tiny)


def box_numbers(config: TransformerConfig, trace: Trace, activations: Activations) -> dict[str, list[float]]:
    """The live number of every box that has one (NUMBER_MEANINGS), by box key: one per layer for a layer's box,
    else one. The boxes without a number (positional encoding, norms, Linear) are left out."""
    numbers: dict[str, list[float]] = {}
    for stack in STACKS:
        numbers[f"{stack}.embed"] = [float(position_share(activations, stack).mean())]
        layers = range(activations.n_layers[stack])
        ratios = activations.sublayer_ratios(stack)  # (layers, sublayers, positions)
        sublayers = (*ATTENTION_SUBLAYERS[stack], "feed_forward")
        for index, sublayer in enumerate(sublayers):
            add = "add" if config.norm_first else "add_norm"
            numbers[f"{stack}.{add}.{sublayer}"] = [float(ratios[layer, index].mean()) for layer in layers]
            if sublayer == "feed_forward":
                numbers[f"{stack}.feed_forward"] = [
                    float(activations.active_share(stack, layer).mean()) for layer in layers
                ]
            else:
                kind = SUBLAYER_KINDS[sublayer][stack]
                numbers[f"{stack}.{sublayer}"] = [
                    attention_entropy_bits(trace.attention[module_name(kind, layer)]) for layer in layers
                ]
    numbers["softmax"] = [float(np.mean(trace.step_probs))] if len(trace.step_probs) else [0.0]
    return numbers
