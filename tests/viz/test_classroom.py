"""Classroom figures: the training evolution figure (viz.evolution) and presenter mode's enlarge
(viz.presenter). The classroom page is tested in tests/explorer/test_classroom.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import viz


def test_evolution_figure_keeps_stage_order_and_refuses_different_tokens():
    pieces = ["▁a", "▁b", "</s>"]
    stages = [(name, np.full((3, 3), value)) for name, value in (("b<i>", 0.1), ("a", 0.2), ("c", 0.3))]
    figure = viz.evolution_figure(stages, pieces, pieces, title="t")
    assert [note.text for note in figure.layout.annotations] == ["b&lt;i&gt;", "a", "c"]
    assert [float(np.asarray(trace.z)[0, 0]) for trace in figure.data] == [0.1, 0.2, 0.3]
    with pytest.raises(ValueError, match="same tokens"):
        viz.evolution_figure([("a", np.ones((3, 3))), ("b", np.ones((2, 3)))], pieces, pieces)


def test_enlarge_scales_fonts_and_height_and_leaves_the_original():
    stack = np.random.default_rng(0).dirichlet(np.ones(3), size=(2, 2, 3))
    grid = viz.attention_grid(stack, ["▁a", "▁b", "</s>"], ["▁a", "▁b", "</s>"], title="grid")
    big = viz.enlarge(grid, 2.0)
    assert big.layout.font.size == 2 * grid.layout.font.size and big.layout.height == 2 * grid.layout.height
    assert big.layout.xaxis.tickfont.size == 2 * grid.layout.xaxis.tickfont.size
    panel_titles = [math.sqrt(2) * (a.font.size or 16) for a in grid.layout.annotations]  # they share a row
    assert [a.font.size for a in big.layout.annotations] == pytest.approx(panel_titles)
    assert big.layout.margin.t == grid.layout.margin.t + 1.4 * 12  # room for the title's bigger line, no more
    assert grid.layout.font.size == 12  # unchanged
