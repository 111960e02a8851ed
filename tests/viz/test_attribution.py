"""The attribution figures (viz.attribution): words merged by adding their shares, labels escaped, shares written
only where they fit. The attributions themselves are tested in tests/model/test_attribution.py."""

from __future__ import annotations

import numpy as np

import viz


def test_figures_merge_words_by_adding_shares_and_escape_labels():
    rows = {"<b>raw</b>": np.array([0.1, 0.2, 0.3, 0.4]), "norm": np.array([0.4, 0.3, 0.2, 0.1])}
    pieces = ["▁rid", "ing", "▁bike", "</s>"]
    figure = viz.attribution_rows(rows, pieces, merge_words=True, title="<i>x</i>")
    np.testing.assert_allclose(figure.data[0].z, [[0.3, 0.3, 0.4], [0.7, 0.2, 0.1]])  # "riding" = 0.1 + 0.2
    assert list(figure.layout.yaxis.ticktext) == ["&lt;b&gt;raw&lt;/b&gt;", "norm"]
    assert figure.layout.title.text == "&lt;i&gt;x&lt;/i&gt;"
    maps = {"a": np.eye(4)[:3], "b": np.full((3, 4), 0.25)}
    both = viz.attribution_maps(maps, ["▁ein", "▁rad", "</s>"], pieces, show_special=False)
    assert [panel.coloraxis for panel in both.data] == ["coloraxis", "coloraxis"]  # one colour scale
    assert np.asarray(both.data[1].z).shape == (2, 3)  # </s> hidden on both axes
    assert [note.text for note in both.layout.annotations] == ["a", "b"]


def test_figures_write_the_shares_only_in_cells_wide_enough_for_them():
    short = ["▁a", "▁man", "▁rides", "</s>"]
    rows = {"attention": np.full(len(short), 0.25), "ALTI+": np.linspace(0.1, 0.4, len(short))}
    written = viz.attribution_rows(rows, short).data[0]
    assert written.texttemplate == "%{z:.2f}" and "share %{z:.3f}" in written.hovertemplate
    # a long sentence (34 pieces, as OPUS-MT cuts one): its numbers would run together, the hover keeps them
    long = [f"▁w{index}" for index in range(33)] + ["</s>"]
    rows = {"attention": np.full(len(long), 1 / len(long)), "ALTI+": np.linspace(0.0, 0.05, len(long))}
    hovered = viz.attribution_rows(rows, long).data[0]
    assert np.asarray(hovered.z).shape == (2, 34)
    assert hovered.texttemplate is None and "share %{z:.3f}" in hovered.hovertemplate
