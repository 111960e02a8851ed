"""Every box of Figure 1 for one translation: the residual stream, each sublayer's output, the feed-forward units,
and the logit lens (each decoder layer's residual read as if it were the last).

One teacher-forced pass over a trace's sentence and output under ``capture_attention(model, activations=True)``
records every hook point of ``model.capture.activation_names``; the numbers here are read from it, as plain data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from model.capture import capture_attention
from model.decoding.scoring import Scoring
from model.decoding.search import next_token_log_probs
from model.trace import DEFAULT_TOP_K, Trace
from model.transformer import Transformer

if TYPE_CHECKING:
    from model.translator import Translator

# The attention sublayers of a layer, by stack, in order: each is followed by its own residual point.
ATTENTION_SUBLAYERS = {"encoder": ("self_attn",), "decoder": ("self_attn", "cross_attn")}
# Each sublayer as the page names it
SUBLAYER_NAMES = {"self_attn": "self-attention", "cross_attn": "cross-attention", "feed_forward": "feed forward"}
# The residual point after each sublayer of a layer (the attention sublayers', then the feed-forward's).
RESIDUAL_AFTER = {
    "encoder": ("hook_resid_mid", "hook_resid_post"),
    "decoder": ("hook_resid_mid", "hook_resid_mid_cross", "hook_resid_post"),
}


@dataclass
class Activations:
    """Every hook point of one teacher-forced pass (batch removed): ``values[name]`` is (positions, features).

    Encoder points are over the source pieces, decoder points over the decoder's inputs (BOS and every output token
    but the last: row t is what step t computed). The logits are left out (the trace holds the distribution).
    """

    source_pieces: list[str]
    decoder_pieces: list[str]
    values: dict[str, np.ndarray]
    n_layers: dict[str, int]  # stack -> its number of layers

    def point(self, stack: str, layer: int | None, point: str) -> np.ndarray:
        """One hook point: ``point`` of layer ``layer`` of ``stack`` (a stack's own point with ``layer=None``)."""
        name = f"{stack}.{point}" if layer is None else f"{stack}.layers.{layer}.{point}"
        if name not in self.values:
            raise ValueError(f"no hook point {name!r} was recorded")
        return self.values[name]

    def residual_norms(self, stack: str) -> tuple[list[str], np.ndarray]:
        """The residual stream's norm at each position, from the first layer's input through every sublayer: the
        labels of the stages ("input", "layer 1 self-attention", ..., "layer 1 feed forward", ...) and (stages,
        positions)."""
        labels, rows = ["input"], [self.point(stack, None, "hook_embed_pos")]
        for layer in range(self.n_layers[stack]):
            for sublayer, point in zip(
                (*ATTENTION_SUBLAYERS[stack], "feed_forward"), RESIDUAL_AFTER[stack], strict=True
            ):
                labels.append(f"layer {layer + 1} {SUBLAYER_NAMES[sublayer]}")
                rows.append(self.point(stack, layer, point))
        return labels, np.stack([np.linalg.norm(row, axis=-1) for row in rows])

    def sublayer_ratios(self, stack: str) -> np.ndarray:
        """(layers, sublayers, positions): how much each sublayer changed the residual it was added to,
        ||sublayer output|| / ||residual before it|| (the Add & Norm boxes' number). Sublayers in the order of
        ``ATTENTION_SUBLAYERS`` then the feed-forward network."""
        ratios = []
        for layer in range(self.n_layers[stack]):
            before = [self.point(stack, layer, "hook_resid_pre")] + [
                self.point(stack, layer, point) for point in RESIDUAL_AFTER[stack][:-1]
            ]
            outputs = [self.point(stack, layer, f"{name}.hook_out") for name in ATTENTION_SUBLAYERS[stack]]
            outputs.append(self.point(stack, layer, "feed_forward.hook_out"))
            ratios.append(
                [
                    np.linalg.norm(out, axis=-1) / np.linalg.norm(res, axis=-1)
                    for out, res in zip(outputs, before, strict=True)
                ]
            )
        return np.asarray(ratios)

    def active_share(self, stack: str, layer: int) -> np.ndarray:
        """(positions,): the share of the feed-forward network's hidden units whose activation is above zero."""
        return (self.point(stack, layer, "feed_forward.hook_hidden") > 0).mean(axis=-1)


@dataclass
class LogitLens:
    """Each decoder layer's residual read as the model's output: after layer l, the residual (through the stack's
    final norm, where the model has one) projected to the vocabulary, at every step. The last layer's reading is the
    model's own next-token distribution."""

    predicted_pieces: list[str]  # (steps,) the token the trace wrote at each step
    topk_ids: np.ndarray  # (layers, steps, k)
    topk_probs: np.ndarray  # (layers, steps, k)
    topk_pieces: list[list[list[str]]]  # (layers, steps, k)
    chosen_probs: np.ndarray  # (layers, steps): each layer's probability of the token the trace wrote
    chosen_ranks: np.ndarray  # (layers, steps): its rank there, 1 the most likely


@torch.inference_mode()
def activations_from_ids(
    model: Transformer, source_ids: Sequence[int], target_ids: Sequence[int]
) -> dict[str, torch.Tensor]:
    """Every hook point of one teacher-forced pass: the encoder reads ``source_ids``, the decoder
    ``target_ids[:-1]`` (BOS first, as in a Trace). Each value is (batch 1, positions, features), on the CPU."""
    decoder_input = list(target_ids[:-1])
    if not decoder_input:
        raise ValueError("target_ids needs BOS and at least one more token")
    device = next(model.parameters()).device
    src = torch.tensor([list(source_ids)], dtype=torch.long, device=device)
    tgt = torch.tensor([decoder_input], dtype=torch.long, device=device)
    with capture_attention(model, activations=True) as capture:
        model(src, tgt)
    return capture.activations


def trace_activations(translator: Translator, trace: Trace) -> Activations:
    """Every hook point for ``trace``'s sentence and output, on the translator's shared model (``Translator.run``)."""
    values, _ = translator.run(lambda model, device: activations_from_ids(model, trace.source_ids, trace.target_ids))
    config = translator.model.config
    return Activations(
        source_pieces=list(trace.source_pieces),
        decoder_pieces=list(trace.decoder_input_pieces),
        values={name: value[0].float().numpy() for name, value in values.items() if name != "hook_logits"},
        n_layers={"encoder": config.n_encoder_layers, "decoder": config.n_decoder_layers},
    )


@torch.inference_mode()
def lens_distributions(
    model: Transformer, source_ids: Sequence[int], target_ids: Sequence[int], banned: Sequence[int] = ()
) -> torch.Tensor:
    """(decoder layers, steps, vocabulary): the next-token distribution each decoder layer's residual gives, read
    through the decoder's final norm (where the model has one) and the output projection, with the tokens decoding
    never writes (and ``banned``) at zero, as a Trace's distribution has them."""
    points = activations_from_ids(model, source_ids, target_ids)
    device = next(model.parameters()).device
    norm = model.decoder.norm
    rows = []
    for layer in range(model.config.n_decoder_layers):
        residual = points[f"decoder.layers.{layer}.hook_resid_post"][0].to(device)  # (steps, d)
        hidden = norm(residual) if norm is not None else residual
        rows.append(next_token_log_probs(model, model.logits(hidden), Scoring(banned=tuple(banned))).exp())
    return torch.stack(rows).cpu()


def logit_lens(translator: Translator, trace: Trace, top_k: int = DEFAULT_TOP_K) -> LogitLens:
    """The logit lens over ``trace``'s decoder: each layer's top ``top_k`` next tokens and its probability of the
    token the trace wrote, at every step."""
    banned = trace.settings.scoring.banned if trace.settings.scoring else ()
    probs, _ = translator.run(
        lambda model, device: lens_distributions(model, trace.source_ids, trace.target_ids, banned)
    )
    top = probs.topk(min(top_k, probs.size(-1)), dim=-1)
    chosen = torch.tensor(trace.target_ids[1:])  # (steps,)
    chosen_probs = probs.gather(2, chosen[None, :, None].expand(probs.size(0), -1, 1))[..., 0]
    return LogitLens(
        predicted_pieces=list(trace.predicted_pieces),
        topk_ids=top.indices.numpy(),
        topk_probs=top.values.float().numpy(),
        topk_pieces=[[translator.tokenizer.pieces(row, "target") for row in layer] for layer in top.indices.tolist()],
        chosen_probs=chosen_probs.float().numpy(),
        chosen_ranks=(probs > chosen_probs[..., None]).sum(dim=-1).numpy() + 1,
    )


@dataclass
class UnitExamples:
    """One layer's feed-forward units over several sentences (each greedy-translated, for the decoder's units): the
    hidden activations of every piece, so the pieces that drive any one unit most are read without another run."""

    stack: str
    layer: int
    sentences: list[str]
    pieces: list[list[str]]  # per sentence, the stack's positions: source pieces, or the decoder's inputs
    hidden: list[np.ndarray]  # per sentence, (positions, d_ff)

    def strongest(self, unit: int, count: int = 10) -> list[tuple[str, str, float]]:
        """The ``count`` (piece, sentence, activation) where ``unit`` is most active, strongest first."""
        found = [
            (piece, sentence, float(hidden[position, unit]))
            for sentence, pieces, hidden in zip(self.sentences, self.pieces, self.hidden, strict=True)
            for position, piece in enumerate(pieces)
        ]
        return sorted(found, key=lambda item: -item[2])[:count]


def unit_examples(translator: Translator, sentences: Sequence[str], stack: str, layer: int) -> UnitExamples:
    """The feed-forward units of layer ``layer`` of ``stack`` on each of ``sentences`` (the checkpoint's examples)."""
    config = translator.model.config
    if not 0 <= layer < {"encoder": config.n_encoder_layers, "decoder": config.n_decoder_layers}.get(stack, 0):
        raise ValueError(f"the model has no {stack} layer {layer}")
    pieces, hidden = [], []
    for sentence in sentences:
        trace = translator.trace(sentence)
        read = trace_activations(translator, trace)
        pieces.append(read.source_pieces if stack == "encoder" else read.decoder_pieces)
        hidden.append(read.point(stack, layer, "feed_forward.hook_hidden"))
    return UnitExamples(stack, layer, list(sentences), pieces, hidden)
