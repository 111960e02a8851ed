"""The Train view's figures (viz.training): the training curves on a fixed step axis with the loss binned, and the
cross-attention of the shipped toy-reverse model with the cells the task says to read outlined. Training itself is
tested in tests/model/test_live.py; nothing trains here."""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import plotly.io
import pytest

from model import load_checkpoint
from model.heads import head_title
from tests.helpers import REPO, expected_positions
from viz.attention import head_heatmap
from viz.trace_views import attention_axes
from viz.training import EXPECTED_COLOUR, MAX_LOSS_POINTS, WAITING, alignment_grid, alignment_heatmap, training_curves

SOURCE = "a b c d"
EXPECTED = expected_positions("reverse", SOURCE.split())  # [3, 2, 1, 0]
CROSS = "decoder.layers.1.cross_attn"


@pytest.fixture(scope="module")
def reverse_trace():
    """The shipped toy-reverse model, teacher-forced on the right answer: 4 output steps and </s>, 4 heads, 2 layers."""
    translator = load_checkpoint(REPO / "checkpoints" / "toy-reverse", device="cpu")
    return translator.trace(SOURCE, target="d c b a")


def points(trace) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(trace.x, dtype=float), np.asarray(trace.y, dtype=float)


def assert_valid(figure: go.Figure) -> None:
    """plotly accepts every property and the figure serialises (what the page sends)."""
    go.Figure(figure.to_dict())
    json.loads(plotly.io.to_json(figure))


# --- training_curves ---


def test_loss_is_drawn_as_the_mean_of_each_bin_of_steps():
    steps = np.arange(3000)
    losses = (steps.astype(float) + 1.0) ** 2  # unlike its bins' steps, a mean of squares shows any misplaced step
    figure = training_curves(steps, losses, [], [], budget=2999)
    x, y = points(figure.data[0])
    assert len(x) == MAX_LOSS_POINTS  # steps 0..2999 in bins of 10
    np.testing.assert_allclose(x, steps.reshape(300, 10).mean(axis=1))
    np.testing.assert_allclose(y, losses.reshape(300, 10).mean(axis=1))
    ranges = np.asarray(figure.data[0].customdata)
    assert ranges[0].tolist() == [0, 9] and ranges[-1].tolist() == [2990, 2999]  # the hover's "steps 0–9"
    assert_valid(figure)


def test_a_long_run_stays_small_and_a_short_budget_keeps_every_step():
    rng = np.random.default_rng(0)
    steps = np.arange(1, 20_001)
    losses = rng.uniform(0.5, 1.5, len(steps))
    long_run = training_curves(steps, losses, [], [], budget=20_000)
    x, y = points(long_run.data[0])
    assert 250 <= len(x) <= MAX_LOSS_POINTS
    assert np.all(np.diff(x) > 0)
    assert y.min() >= 0.5 and y.max() <= 1.5 and y.std() < losses.std() / 4  # means smooth the noise
    short = training_curves(steps[:200], losses[:200], [], [], budget=299)  # one step a bin
    x, y = points(short.data[0])
    np.testing.assert_array_equal(x, steps[:200])
    np.testing.assert_allclose(y, losses[:200])


def test_bins_already_drawn_keep_their_values_while_the_run_goes_on():
    rng = np.random.default_rng(1)
    steps = np.arange(1, 5001)
    losses = rng.uniform(0.1, 3.0, len(steps))
    early = training_curves(steps[:1234], losses[:1234], [], [], budget=20_000)
    later = training_curves(steps, losses, [], [], budget=20_000)
    x_early, y_early = points(early.data[0])
    x_later, y_later = points(later.data[0])
    done = len(x_early) - 1  # the last bin of the early figure was still filling
    np.testing.assert_allclose(x_later[:done], x_early[:done])
    np.testing.assert_allclose(y_later[:done], y_early[:done])


def test_the_step_axis_is_fixed_to_the_budget_and_exact_match_is_drawn_in_percent():
    figure = training_curves([1, 2, 3], [2.0, 1.5, 1.2], [2, 3], [0.25, 1.0], budget=1000)
    assert figure.layout.xaxis.range == (0, 1000) and figure.layout.xaxis.autorange is False
    assert figure.layout.yaxis.type == "log"
    assert figure.layout.yaxis2.range == (0, 100) and figure.layout.yaxis2.overlaying == "y"
    loss, match = figure.data
    assert loss.yaxis in (None, "y") and match.yaxis == "y2"
    assert "markers" in match.mode and "lines" in match.mode
    np.testing.assert_allclose(points(match)[1], [25.0, 100.0])
    assert points(match)[0].tolist() == [2.0, 3.0]
    assert figure.layout.legend.orientation == "h" and figure.layout.height == 300
    assert "step %{x}" in match.hovertemplate and "%{y" in match.hovertemplate
    assert "steps %{customdata[0]}" in loss.hovertemplate and "%{y" in loss.hovertemplate
    assert not figure.layout.annotations
    beyond = training_curves([1, 1200], [2.0, 1.0], [], [], budget=1000)  # a step past the budget stays in view
    assert beyond.layout.xaxis.range == (0, 1200)


def test_before_the_first_step_the_figure_is_empty_with_the_same_axes_and_says_it_waits():
    figure = training_curves([], [], [], [], budget=500, title="<b>Training</b>")
    assert [len(trace.x) for trace in figure.data] == [0, 0]
    assert [note.text for note in figure.layout.annotations] == [WAITING]
    assert figure.layout.xaxis.range == (0, 500) and figure.layout.yaxis2.range == (0, 100)
    assert figure.layout.yaxis.type == "log"
    assert figure.layout.title.text == "&lt;b&gt;Training&lt;/b&gt;"
    assert_valid(figure)


def test_curves_refuse_mismatched_lengths_percentages_and_no_budget():
    with pytest.raises(ValueError, match="steps and losses"):
        training_curves([1, 2], [1.0], [], [], budget=10)
    with pytest.raises(ValueError, match="measured_steps and exact_match"):
        training_curves([1], [1.0], [1], [], budget=10)
    with pytest.raises(ValueError, match="shares between 0 and 1"):
        training_curves([1], [1.0], [1], [85.0], budget=10)  # a percentage passed for a share
    with pytest.raises(ValueError, match="budget"):
        training_curves([], [], [], [], budget=0)


# --- alignment_heatmap ---


def outlined_cells(figure: go.Figure, xref: str = "x", yref: str = "y") -> list[tuple[float, float]]:
    """(row, column) of the centre of each outline on the given axes, in the order drawn."""
    return [
        ((shape.y0 + shape.y1) / 2, (shape.x0 + shape.x1) / 2)
        for shape in figure.layout.shapes
        if (shape.xref or "x", shape.yref or "y") == (xref, yref)
    ]


def test_the_heatmap_outlines_the_cell_each_output_step_should_read(reverse_trace):
    figure = alignment_heatmap(reverse_trace, CROSS, 2, EXPECTED)
    assert EXPECTED == [3, 2, 1, 0]
    assert outlined_cells(figure) == [(0, 3), (1, 2), (2, 1), (3, 0)]  # the </s> step (row 4) has none
    for shape in figure.layout.shapes:
        assert shape.type == "rect" and shape.line.color == EXPECTED_COLOUR and shape.line.width == 2
        assert (shape.x1 - shape.x0, shape.y1 - shape.y0) == (1.0, 1.0)  # exactly one cell
    np.testing.assert_allclose(np.asarray(figure.data[0].z, dtype=float), reverse_trace.attention[CROSS][2])
    reference = head_heatmap(attention_axes(reverse_trace, "cross"), 1, 2)  # the other views' labels
    assert figure.layout.xaxis.ticktext == reference.layout.xaxis.ticktext
    assert figure.layout.yaxis.ticktext == reference.layout.yaxis.ticktext
    assert len(figure.layout.yaxis.ticktext) == len(EXPECTED) + 1
    assert outlined_cells(alignment_heatmap(reverse_trace, CROSS, 2, [1, 3, 0, 2])) == [(0, 1), (1, 3), (2, 0), (3, 2)]
    assert outlined_cells(alignment_heatmap(reverse_trace, CROSS, 2, [4, 0])) == [(0, 4), (1, 0)]  # </s> may be read
    assert_valid(figure)


def test_the_heatmap_is_titled_with_the_head_and_what_orange_means(reverse_trace):
    figure = alignment_heatmap(reverse_trace, "decoder.layers.0.cross_attn", 3, EXPECTED)
    assert figure.layout.title.text.startswith(head_title("cross", 0, 3))
    assert "orange" in figure.layout.title.text
    assert alignment_heatmap(reverse_trace, CROSS, 0, EXPECTED, title="a<b").layout.title.text == "a&lt;b"


def test_the_heatmap_refuses_a_position_outside_the_source_loudly(reverse_trace):
    with pytest.raises(ValueError, match=r"expected\[2\] = 9"):
        alignment_heatmap(reverse_trace, CROSS, 0, [3, 2, 9, 0])
    with pytest.raises(ValueError, match=r"expected\[0\] = -1"):
        alignment_heatmap(reverse_trace, CROSS, 0, [-1, 2, 1, 0])
    with pytest.raises(ValueError, match="6 positions"):
        alignment_heatmap(reverse_trace, CROSS, 0, [3, 2, 1, 0, 4, 4])  # 5 output steps
    with pytest.raises(ValueError, match="not a cross-attention module"):
        alignment_heatmap(reverse_trace, "decoder.layers.1.self_attn", 0, EXPECTED)
    with pytest.raises(ValueError, match="head must be in 0..3"):
        alignment_heatmap(reverse_trace, CROSS, 4, EXPECTED)


# --- alignment_grid ---


def test_the_grid_has_every_cross_attention_head_each_with_the_outlines(reverse_trace):
    figure = alignment_grid(reverse_trace, EXPECTED)
    stack = reverse_trace.attention_stack("cross")
    n_layers, n_heads = stack.shape[:2]
    assert len(figure.data) == n_layers * n_heads == 8
    assert len(figure.layout.shapes) == n_layers * n_heads * len(EXPECTED)
    for index, panel in enumerate(figure.data):
        layer, head = divmod(index, n_heads)
        np.testing.assert_allclose(np.asarray(panel.z, dtype=float), stack[layer, head])
        assert outlined_cells(figure, panel.xaxis, panel.yaxis) == [(0, 3), (1, 2), (2, 1), (3, 0)]
    assert "orange" in figure.layout.title.text
    texts = [note.text for note in figure.layout.annotations]
    assert not any("%" in text for text in texts)  # no scores, no score labels
    assert_valid(figure)


def test_the_grid_writes_each_heads_score_in_its_panel(reverse_trace):
    names = reverse_trace.attention_names("cross")
    scores = {names[0]: [0.0, 0.25, 0.5, 0.75], names[1]: [1.0, 0.85, 0.6, 0.3]}
    figure = alignment_grid(reverse_trace, EXPECTED, scores)
    labels = {note.text: (note.xref, note.yref) for note in figure.layout.annotations if "%" in note.text}
    assert len(labels) == 8
    for index, panel in enumerate(figure.data):
        layer, head = divmod(index, 4)
        share = round(100 * scores[names[layer]][head])
        assert labels[f"L{layer + 1} H{head + 1} · {share}%"] == (f"{panel.xaxis} domain", f"{panel.yaxis} domain")
    assert "L2 H2 · 85%" in labels  # counted from 1, as the page counts
    crowded = alignment_grid(reverse_trace, EXPECTED, scores, font_scale=16.0)  # too narrow for "L2 H2 · 85%"
    assert "85%" in [note.text for note in crowded.layout.annotations]
    assert_valid(figure)


def test_the_grid_refuses_a_position_outside_the_source(reverse_trace):
    with pytest.raises(ValueError, match=r"expected\[1\] = 5"):
        alignment_grid(reverse_trace, [3, 5, 1, 0])
