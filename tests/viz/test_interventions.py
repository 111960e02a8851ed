"""The intervention figures (viz.interventions): the translation diff, ablation, head importance and positional
experiments, labels escaped. The interventions themselves are tested in tests/model/test_interventions.py."""

from __future__ import annotations

import copy
import html

import numpy as np
import pytest

from model.analysis.ablation import compare_ablation
from model.analysis.alignment import token_diff
from model.analysis.importance import HeadImportance, head_importance
from model.analysis.word_order import compare_word_order
from model.heads import HeadRef
from tests.helpers import SENTENCE
from tests.helpers import SHORT_MAX_LEN as MAX_LEN
from viz.interventions import (
    ablation_tokens_figure,
    importance_frame,
    importance_heatmap,
    probability_change_figure,
    translation_diff_figure,
)
from viz.word_order import word_order_attention_figure, word_order_tokens_figure

EVIL = ["\u2581<b>bold</b>", "<script>x</script>", "&amp;", "</s>"]


@pytest.fixture(scope="module")
def comparison(translator):
    return compare_ablation(
        translator, SENTENCE, [HeadRef("cross", 1, 0), HeadRef("cross", 1, 1)], max_new_tokens=MAX_LEN
    )


def test_translation_diff_figure_highlights_exactly_the_changed_tokens():
    diff = token_diff(["\u2581a", "\u2581b", "</s>"], ["\u2581a", "\u2581c", "\u2581d", "</s>"])
    figure = translation_diff_figure(diff, np.array([0.9, 0.5, 0.8]), np.array([0.9, 0.4, 0.3, 0.7]))
    z = np.asarray(figure.data[0].z, dtype=float)
    np.testing.assert_array_equal(z[0], [0.0, 1.0, np.nan, 0.0])
    np.testing.assert_array_equal(z[1], [0.0, 1.0, 1.0, 0.0])
    assert list(figure.data[0].text[1]) == ["a", "c", "d", display_eos()]
    assert "probability 0.3000" in figure.data[0].customdata[1][2]


def display_eos() -> str:
    return "<i style='color:#6b6b6b'>&lt;/s&gt;</i>"


def test_ablation_figures_show_the_comparison_with_escaped_labels(comparison):
    tokens = ablation_tokens_figure(comparison)
    assert (
        len(comparison.heads) == 2
        and tokens.layout.title.text == f"Translation without 2 heads ({comparison.mode} ablation)"
    )
    bars = probability_change_figure(comparison)
    assert bars.layout.title.text == f"Token probabilities (log-probability drop {comparison.log_prob_drop:.2f})"
    np.testing.assert_allclose(bars.data[0].y, comparison.original.step_probs)
    np.testing.assert_allclose(bars.data[1].y, comparison.forced.step_probs)

    evil = copy.deepcopy(comparison)
    evil.original.target_pieces = ["<s>"] + [EVIL[i % len(EVIL)] for i in range(comparison.original.n_steps)]
    evil.diff = token_diff(evil.original.predicted_pieces, comparison.ablated.predicted_pieces)
    for figure in (
        ablation_tokens_figure(evil, title="<img src=x onerror=alert(1)>"),
        probability_change_figure(evil, title="<img src=x onerror=alert(1)>"),
    ):
        shown = figure.to_json()
        assert "<img" not in figure.layout.title.text
        assert "<b>" not in shown and "<script>" not in shown and "&lt;b&gt;bold" in shown


def test_importance_heatmap_and_ranking_table(translator):
    importance = head_importance(translator, SENTENCE, beam_size=1, max_new_tokens=MAX_LEN)
    figure = importance_heatmap(importance, title="<b>heads</b>")
    assert [np.asarray(trace.z).tolist() for trace in figure.data] == [
        importance.drops[kind].tolist() for kind in ("encoder_self", "decoder_self", "cross")
    ]
    assert figure.layout.title.text == html.escape("<b>heads</b>")
    assert [a.text for a in figure.layout.annotations] == [
        "Encoder self-attention",
        "Decoder self-attention",
        "Cross-attention",
    ]
    assert importance_heatmap(importance).layout.title.text == "Head importance (zero ablation)"
    # across the top of the bar in short lines: along it, a one-layer model's short bar cut it to "log-pro"
    scale_title = figure.layout.coloraxis.colorbar.title
    assert scale_title.side == "top" and scale_title.text.replace("<br>", " ") == "log-prob. drop"
    assert max(len(line) for line in scale_title.text.split("<br>")) <= 10
    frame = importance_frame(importance)
    assert len(frame) == 24 and list(frame["rank"]) == list(range(1, 25))
    assert frame["drop"].is_monotonic_decreasing
    top = importance.ranking()[0][0]
    assert (frame.loc[0, "layer"], frame.loc[0, "head"]) == (top.layer + 1, top.head + 1)  # counted from 1


def hand_made_importance(layers: dict[str, int], n_heads: int) -> HeadImportance:
    """Made-up drops for ``layers`` (kind -> layer count) of ``n_heads`` heads each; only the figure reads them."""
    drops = {kind: np.linspace(-0.5, 1.0, n * n_heads).reshape(n, n_heads) for kind, n in layers.items()}
    return HeadImportance("a b", ["\u2581a", "\u2581b"], [1, 5], ["<s>", "\u2581x"], "zero", -1.0, drops)


def test_importance_heatmap_names_the_layers_on_the_first_panel_only():
    # OPUS-MT's shape, 6 + 6 layers of 8 heads: the right panels' "layer N" labels ran into their left neighbours
    figure = importance_heatmap(hand_made_importance({"encoder_self": 6, "decoder_self": 6, "cross": 6}, 8))
    y_axes = [figure.layout.yaxis, figure.layout.yaxis2, figure.layout.yaxis3]
    assert [axis.showticklabels for axis in y_axes] == [True, False, False]
    assert list(y_axes[0].ticktext) == [f"layer {layer}" for layer in range(1, 7)]  # counted from 1
    x_axes = [figure.layout.xaxis, figure.layout.xaxis2, figure.layout.xaxis3]
    assert all(list(axis.ticktext) == [f"head {head}" for head in range(1, 9)] for axis in x_axes)
    # a deeper decoder: its panel's rows are not the encoder's, so it names its own; cross-attention's match it
    deeper = importance_heatmap(hand_made_importance({"encoder_self": 3, "decoder_self": 6, "cross": 6}, 8))
    shown = [
        deeper.layout.yaxis.showticklabels,
        deeper.layout.yaxis2.showticklabels,
        deeper.layout.yaxis3.showticklabels,
    ]
    assert shown == [True, True, False]


def test_word_order_figures(translator):
    experiment = compare_word_order(translator, SENTENCE, "shuffle", seed=1, beam_size=1, max_new_tokens=MAX_LEN)
    tokens = word_order_tokens_figure(experiment)
    assert "source words shuffled" in tokens.layout.title.text
    figure = word_order_attention_figure(experiment, "encoder.layers.1.self_attn", 2)
    np.testing.assert_allclose(figure.data[0].z, experiment.original.attention["encoder.layers.1.self_attn"][2])
    np.testing.assert_allclose(figure.data[1].z, experiment.modified.attention["encoder.layers.1.self_attn"][2])
    assert figure.layout.title.text == "Encoder layer 2 – self-attention – head 3"
    assert [a.text for a in figure.layout.annotations] == ["Original", "Source words shuffled"]
