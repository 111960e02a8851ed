"""The minimal-pair figures (viz.pairs): side-by-side maps on one colour scale, the difference centred at zero,
labels escaped. The pair itself is tested in tests/model/test_pairs.py; hand_pair is a fixture of tests/conftest.py."""

from __future__ import annotations

import numpy as np
import pytest

from model.analysis.pairs import attention_pair
from tests.helpers import WORD_START as W
from tests.helpers import hand_trace
from viz.pairs import pair_difference_heatmap, pair_heatmaps


def test_side_by_side_maps_share_one_colour_scale_and_name_the_sentences(hand_pair):
    first, second = hand_pair
    pair = attention_pair(first, second, "decoder.layers.0.cross_attn", head=0)
    figure = pair_heatmaps(pair)
    assert len(figure.data) == 2
    np.testing.assert_array_equal(figure.data[0].z, pair.first)
    np.testing.assert_array_equal(figure.data[1].z, pair.second)
    assert figure.data[0].coloraxis == figure.data[1].coloraxis == "coloraxis"
    assert (figure.layout.coloraxis.cmin, figure.layout.coloraxis.cmax) == (0.0, 1.0)
    assert [a.text for a in figure.layout.annotations] == ["First sentence", "Second sentence"]  # short, not the
    # translations: a translation is as long as the model makes it, a panel half the page
    assert list(figure.layout.xaxis.ticktext)[:6] == ["the", "dog", "bit", "·es", "the", "man"]
    assert list(figure.layout.xaxis2.ticktext)[1] == "man"
    assert figure.layout.title.text == "Decoder layer 1 – cross-attention – head 1"


def test_difference_map_is_centred_at_zero_on_aligned_tokens(hand_pair):
    pair = attention_pair(*hand_pair, "encoder.layers.0.self_attn", head=1)
    figure = pair_difference_heatmap(pair)
    heatmap = figure.data[0]
    np.testing.assert_array_equal(heatmap.z, pair.difference)
    largest = np.abs(pair.difference).max()
    assert heatmap.zmid == 0.0 and heatmap.zmax == pytest.approx(largest) and heatmap.zmin == -heatmap.zmax
    assert list(figure.layout.xaxis.ticktext)[:4] == ["the", "bit", "·es", "the"]
    hidden = pair_difference_heatmap(pair, show_special=False)
    assert np.asarray(hidden.data[0].z).shape == (4, 4)  # </s> row and column hidden


def test_pair_labels_and_titles_are_escaped():
    pieces = [f"{W}<b>x</b>", f"{W}y", "</s>"]
    first = hand_trace(pieces, ["<s>", f"{W}<i>", "</s>"], "<script>alert(1)</script>", 3)
    second = hand_trace(pieces, ["<s>", f"{W}z", "</s>"], "<b>bold</b>", 4)
    pair = attention_pair(first, second, "decoder.layers.0.cross_attn", head=0)
    maps = pair_heatmaps(pair, panel_titles=("<script>alert(1)</script>", "<b>bold</b>"), title="<b>t</b>")
    assert [a.text for a in maps.layout.annotations] == [
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "&lt;b&gt;bold&lt;/b&gt;",
    ]
    assert maps.layout.title.text == "&lt;b&gt;t&lt;/b&gt;"
    assert list(maps.layout.xaxis.ticktext)[0] == "&lt;b&gt;x&lt;/b&gt;"
    assert "&lt;i&gt;" in list(maps.layout.yaxis.ticktext)[1]
    difference = pair_difference_heatmap(pair)
    assert difference.layout.title.text == "Difference: first − second sentence"
    assert pair_difference_heatmap(pair, title="<i>d</i>").layout.title.text == "&lt;i&gt;d&lt;/i&gt;"
    assert list(difference.layout.xaxis.ticktext)[0] == "&lt;b&gt;x&lt;/b&gt;"
    assert "<b>" not in "".join(str(label) for label in np.asarray(difference.data[0].customdata).ravel())
