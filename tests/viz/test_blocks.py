"""The figures of Figure 1's other boxes (viz/blocks.py): what they draw, escaped pieces, and their tables."""

from __future__ import annotations

import json

import numpy as np
import plotly.io

import viz
from tests.helpers import HOSTILE

PIECES = ["▁a", HOSTILE, "</s>"]


def test_the_lens_marks_the_token_written_with_the_last_layer_on_top():
    top_pieces = [["▁Ein", "▁Der"], ["▁Der", "▁Ein"]]
    figure = viz.lens_step_figure(top_pieces, np.array([[0.6, 0.3], [0.8, 0.1]]), "▁Der", title="Step 1")
    heatmap = figure.data[0]
    assert [list(row) for row in heatmap.text] == [["Ein", "Der ✓"], ["Der ✓", "Ein"]]
    assert figure.layout.yaxis.autorange is True  # row 0 (layer 1) at the bottom, as Figure 1 stacks the layers
    assert list(figure.layout.yaxis.ticktext) == ["after layer 1", "after layer 2"]


def test_pieces_are_escaped_wherever_they_are_drawn():
    hidden = np.random.default_rng(0).random((3, 8))
    figures = [
        viz.embedding_norms_figure(np.ones((3, 4)), np.zeros((3, 4)), PIECES),
        viz.dimensions_heatmap(np.ones((3, 4)), PIECES),
        viz.residual_figure(["input", "layer 1 self-attention"], np.ones((2, 3)), PIECES),
        viz.sublayer_ratio_figure(np.ones((1, 2, 3)), ("self-attention", "feed forward"), PIECES),
        viz.lens_chosen_figure(np.ones((2, 3)), PIECES),
        viz.units_heatmap(hidden, [1, 2], PIECES),
        viz.unit_examples_figure([f"{HOSTILE} · a sentence"], [1.0]),
        viz.lens_step_figure([[HOSTILE]], np.array([[0.5]]), HOSTILE),
    ]
    for figure in figures:
        sent = json.dumps(json.loads(plotly.io.to_json(figure)))
        assert "<script>" not in sent and "&lt;script&gt;" in sent
        assert viz.figure_tables(figure), figure.layout.title.text  # a table behind every chart


def test_the_most_active_units_come_first_and_the_heatmap_shows_them():
    hidden = np.zeros((2, 5))
    hidden[0, 3], hidden[1, 1], hidden[1, 4] = 5.0, 2.0, 3.0
    units = viz.most_active_units(hidden, 2)
    assert list(units) == [3, 4]
    figure = viz.units_heatmap(hidden, units, ["▁a", "▁b"])
    assert list(figure.layout.xaxis.ticktext) == ["unit 3", "unit 4"]
    np.testing.assert_array_equal(figure.data[0].z, [[5.0, 0.0], [0.0, 3.0]])
    assert viz.figure_tables(figure)[0].values == [[5.0, 0.0], [0.0, 3.0]]
