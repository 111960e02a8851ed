"""The Train view's figures while a small Transformer learns a toy task: the training curves, and where its
cross-attention looks against where the task says it should.

The toy tasks (copy, reverse, sort) say which source position each output step must read, so
the caller passes those positions (``expected``) with a teacher-forced Trace of one held-out
example, and each head's attention is drawn with those cells outlined: a class sees the heads
find the alignment as training goes on. docs/train.md explains the view and its exercises.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from model.heads import head_title, parse_module_name, short_head_label
from model.trace import Trace
from viz.attention import head_heatmap
from viz.grid import CHAR_EM, GRID_PLOT_WIDTH_PX, GRID_TICK_FONT, attention_grid
from viz.style import base_layout, head_colour
from viz.trace_views import attention_axes

MAX_LOSS_POINTS = 300  # the loss curve's points at most, however long the run: a 20,000-step figure stays small
CURVES_HEIGHT = 300
EXPECTED_COLOUR = "#ff7f0e"  # orange, far from the blue attention scale
EXPECTED_LINE = {"color": EXPECTED_COLOUR, "width": 2}
LOOK_HINT = "orange: where the task says to look"
WAITING = "waiting for the first step"


def loss_bins(steps: Sequence[int], losses: Sequence[float], span: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The losses averaged over bins of ceil((span + 1) / MAX_LOSS_POINTS) consecutive steps: (mean step, mean
    loss, (first, last step)) per bin that holds a step.

    The bins are fixed by ``span`` (the budget), not by how many steps there are so far, so a bin
    already drawn keeps its value while the run goes on: the curve grows at its end and never
    redraws its past. Steps 0..span fit MAX_LOSS_POINTS bins.
    """
    step_array = np.asarray(steps, dtype=np.int64)
    loss_array = np.asarray(losses, dtype=np.float64)
    width = math.ceil((span + 1) / MAX_LOSS_POINTS)
    bins, index = np.unique(step_array // width, return_inverse=True)
    counts = np.bincount(index, minlength=len(bins))
    mean_step = np.bincount(index, weights=step_array, minlength=len(bins)) / counts
    mean_loss = np.bincount(index, weights=loss_array, minlength=len(bins)) / counts
    first = np.full(len(bins), np.iinfo(np.int64).max)
    last = np.full(len(bins), np.iinfo(np.int64).min)
    np.minimum.at(first, index, step_array)
    np.maximum.at(last, index, step_array)
    return mean_step, mean_loss, np.stack([first, last], axis=-1)


def training_curves(
    steps: Sequence[int],
    losses: Sequence[float],
    measured_steps: Sequence[int],
    exact_match: Sequence[float],
    budget: int,
    title: str = "Training",
) -> go.Figure:
    """The training loss (left, log scale) and the held-out exact match (right, 0-100 %) against the step.

    ``exact_match`` holds shares (0..1, as training measures them) at ``measured_steps``; a value
    outside is refused, as a caller passing percentages would otherwise draw a flat line at the top.
    Per-step loss is noisy and a run has up to 20,000 steps, so it is drawn as loss_bins' means.
    The x axis runs from 0 to ``budget`` (further only if a step lies beyond it) whatever has been
    trained, so a class watching the chart fill sees it grow rather than rescale; with no step yet
    the figure has the same axes and says it is waiting. ``title`` is plain text (escaped here).
    """
    if len(steps) != len(losses):
        raise ValueError(f"steps and losses must have the same length, not {len(steps)} and {len(losses)}")
    if len(measured_steps) != len(exact_match):
        raise ValueError(
            f"measured_steps and exact_match must have the same length, not {len(measured_steps)} and "
            f"{len(exact_match)}"
        )
    if budget < 1:
        raise ValueError(f"budget must be at least one step, not {budget}")
    shares = np.asarray(exact_match, dtype=np.float64)
    if np.any((shares < 0.0) | (shares > 1.0)):
        raise ValueError(f"exact_match must hold shares between 0 and 1, not {shares.min()}..{shares.max()}")
    span = max([budget, *steps, *measured_steps])
    mean_step, mean_loss, step_ranges = loss_bins(steps, losses, span)
    loss = {
        "type": "scatter",
        "x": mean_step,
        "y": mean_loss,
        "customdata": step_ranges,
        "mode": "lines",
        "name": "training loss",
        "line": {"color": head_colour(0)},
        "hovertemplate": "steps %{customdata[0]}–%{customdata[1]}<br>mean loss %{y:.4f}<extra></extra>",
    }
    match = {
        "type": "scatter",
        "x": list(measured_steps),
        "y": shares * 100.0,
        "yaxis": "y2",
        "mode": "markers+lines",
        "cliponaxis": False,  # markers at 0 % and 100 % drawn whole on the axis's fixed ends
        "name": "held-out exact match",
        "line": {"color": head_colour(1)},
        "hovertemplate": "step %{x}<br>exact match %{y:.1f} %<extra></extra>",
    }
    layout: dict[str, Any] = {
        "xaxis": {"title": {"text": "step"}, "range": [0, span], "autorange": False},
        "yaxis": {"title": {"text": "training loss"}, "type": "log", "dtick": 1},  # powers of ten only: readable
        "yaxis2": {
            "title": {"text": "exact match (%)"},
            "overlaying": "y",
            "side": "right",
            "range": [0, 100],
            "autorange": False,
            "tickmode": "linear",  # 0, 20, ..., 100 of its own, not ticks lined up with the loss axis's grid
            "tick0": 0,
            "dtick": 20,
            "showgrid": False,
        },
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
    }
    if not len(steps):
        layout["annotations"] = [
            {"text": WAITING, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False}
        ]
    figure = go.Figure([loss, match], layout=layout)
    return base_layout(figure, html.escape(title), CURVES_HEIGHT)


def _checked_expected(expected: Sequence[int], n_steps: int, n_sources: int) -> list[int]:
    """``expected`` as ints, each a source position and at most one per step; a ValueError naming the first that
    is not (a caller's bug: an outline in the wrong place would teach the wrong alignment)."""
    if len(expected) > n_steps:
        raise ValueError(f"expected has {len(expected)} positions for a trace of {n_steps} output steps")
    checked = []
    for step, position in enumerate(expected):
        if not 0 <= position < n_sources:
            raise ValueError(
                f"expected[{step}] = {position} is not a source position of this trace (0..{n_sources - 1})"
            )
        checked.append(int(position))
    return checked


def _outlines(expected: Sequence[int], xref: str = "x", yref: str = "y") -> list[dict[str, Any]]:
    """One rectangle around cell (step, expected[step]) of the heatmap on axes ``xref``/``yref`` per step (cells
    are one unit wide, centred on their integer position, as viz.attention.weights_heatmap places them)."""
    return [
        {
            "type": "rect",
            "xref": xref,
            "yref": yref,
            "x0": position - 0.5,
            "x1": position + 0.5,
            "y0": step - 0.5,
            "y1": step + 0.5,
            "line": EXPECTED_LINE,
        }
        for step, position in enumerate(expected)
    ]


def alignment_heatmap(
    trace: Trace, module: str, head: int, expected: Sequence[int], title: str | None = None
) -> go.Figure:
    """One cross-attention head of a teacher-forced trace, with the cell each output step should read outlined.

    ``module`` is a cross-attention module name ("decoder.layers.1.cross_attn"); ``expected[i]``
    is the source position output step i should read, and steps past its end (the </s> step)
    are left without an outline. Rows and columns are those of viz.head_heatmap (no merging: the
    toy tasks' positions are pieces), so the figure reads like the other views. ``title``
    (plain text) defaults to the head's name and what the outline means.
    """
    kind, layer = parse_module_name(module)
    if kind != "cross":
        raise ValueError(f"{module!r} is not a cross-attention module: only there do columns read the source")
    axes = attention_axes(trace, kind)
    n_heads, n_steps, n_sources = axes.stack.shape[1:]
    if not 0 <= head < n_heads:
        raise ValueError(f"head must be in 0..{n_heads - 1}, not {head}")
    checked = _checked_expected(expected, n_steps, n_sources)
    if title is None:
        title = f"{head_title(kind, layer, head)} ({LOOK_HINT})"
    figure = head_heatmap(axes, layer, head, title=title)
    figure.update_layout(shapes=_outlines(checked))
    return figure


def _panel_label(layer: int, head: int, score: float, panel_px: float) -> str:
    """A panel's score label: "L1 H2 · 85%" if it fits a panel ``panel_px`` wide at the grid's tick font, else "85%"."""
    share = f"{score:.0%}"
    label = f"{short_head_label(layer, head)} · {share}"
    return label if len(label) * CHAR_EM * GRID_TICK_FONT <= panel_px else share


def alignment_grid(
    trace: Trace,
    expected: Sequence[int],
    scores: dict[str, list[float]] | None = None,
    *,
    font_scale: float = 1.0,
    title: str | None = None,
) -> go.Figure:
    """Every cross-attention head of every decoder layer (viz.attention_grid), each with alignment_heatmap's
    outlines: which heads have found the task's alignment, at a glance.

    ``scores`` (per module name, per head: the share of steps whose strongest weight is on the
    expected position, as model.training.toy_tasks.alignment_scores measures it) is written at the
    foot of each panel, "L1 H2 · 85%": there it covers the </s> step, which has no expected
    position, rather than a step the task is about. ``font_scale`` is attention_grid's
    (presenter mode); ``title`` (plain text) defaults to what the outlines mean.
    """
    axes = attention_axes(trace, "cross")
    n_layers, n_heads, n_steps, n_sources = axes.stack.shape
    checked = _checked_expected(expected, n_steps, n_sources)
    if title is None:
        title = f"Every cross-attention head ({LOOK_HINT})"
    figure = attention_grid(axes.stack, axes.query_pieces, axes.key_pieces, font_scale=font_scale, title=title)
    # attention_grid adds one panel per head, layer by layer; each panel's heatmap names the axes it is drawn on
    panels = list(zip(figure.data, [divmod(index, n_heads) for index in range(n_layers * n_heads)], strict=True))
    figure.update_layout(
        shapes=[shape for panel, _ in panels for shape in _outlines(checked, panel.xaxis, panel.yaxis)]
    )
    if scores is not None:
        names = trace.attention_names("cross")
        panel_px = GRID_PLOT_WIDTH_PX / n_heads / math.sqrt(font_scale)  # viz.enlarge grows annotations by the root
        labels = [
            {
                "text": _panel_label(layer, head, scores[names[layer]][head], panel_px),
                "xref": f"{panel.xaxis} domain",
                "yref": f"{panel.yaxis} domain",
                "x": 0.5,
                "y": 0.0,
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": GRID_TICK_FONT},
                "bgcolor": "rgba(255,255,255,0.75)",
            }
            for panel, (layer, head) in panels
        ]
        figure.update_layout(annotations=[*figure.layout.annotations, *labels])
    return figure
