"""The all-heads grid: every head of the chosen layers at once, as a (layers, heads) grid of small heatmaps.

Its panels are too small to label every token, so its axes label every few positions and name
each one through labelalias instead (_thinned_axis), which gives its hovers the same %{x} and
%{x:d} as viz.attention's heatmaps (see there).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from model.heads import head_label, layer_label
from viz.attention import HEATMAP_HOVER, weights_heatmap
from viz.presenter import SUBPLOT_TITLE_SIZE
from viz.style import ATTENTION_COLORSCALE, base_layout
from viz.tokens import select_tokens

# The all-heads grid: a page holds this many heatmaps (4 layers of 4 heads on one page, 6 of 8 heads on two)
GRID_CELLS_PER_PAGE = 24
# The grid's plotting width in the "All heads" column of a 1280 px wide window with the sidebar open, the
# narrowest page the explorer is laid out for (as Chromium lays it out); wider windows only give the labels
# more room.
GRID_PLOT_WIDTH_PX = 420
GRID_ROW_PX = 12  # a grid panel's height per query row,
GRID_PANEL_PX = (140, 240)  # within these bounds,
GRID_ASPECT = 2.2  # and at most this many times its width: a page of 8 heads stays on one screen
GRID_TICK_FONT = 9
CHAR_EM = 0.6  # the width of an average character of the page's font, in ems (Source Sans at 12-16 px)
TICK_LABEL_PX = 13  # room a 9 px tick label takes along its axis (x labels slant at -60 degrees)


def grid_page_layers(n_heads: int) -> int:
    """How many layers a page of the all-heads grid shows: GRID_CELLS_PER_PAGE heatmaps' worth, at least one."""
    return max(1, GRID_CELLS_PER_PAGE // n_heads)


def label_step(n_labels: int, room_px: float) -> int:
    """Label every how-many-th token so that ``n_labels`` tick labels along ``room_px`` pixels never overlap."""
    return max(1, math.ceil(n_labels * TICK_LABEL_PX / room_px))


def _thinned_axis(labels: Sequence[str], step: int) -> dict[str, Any]:
    """Axis settings with a tick at every token position, every ``step``-th labelled, each token named in the hover.

    plotly.js labels every tick of an "array" axis (ticklabelstep does not apply there), so these
    ticks are linear (0, 1, 2, ...) and labelalias turns each position's number into its token, in
    tick labels and hovers alike: %{x} is the token and %{x:d} its position, as with viz.attention.token_axes.
    """
    return {
        "tickmode": "linear",
        "tick0": 0,
        "dtick": 1,
        "ticklabelstep": step,
        "tickformat": "d",  # positions written as plain integers, the labelalias keys
        "hoverformat": "d",
        "labelalias": {str(position): label for position, label in enumerate(labels)},
        "showgrid": False,
    }


def _head_titles(n_heads: int, room_px: float, font_scale: float) -> tuple[list[str], float]:
    """The grid's column titles and their font size: "head 3" as large as fits ``room_px`` (at most plotly's 16 px,
    at least GRID_TICK_FONT), else the numbers alone (heads counted from 1). viz.enlarge grows panel titles by the
    square root of ``font_scale``."""
    named, numbered = [head_label(head) for head in range(n_heads)], [str(head + 1) for head in range(n_heads)]
    for titles in (named, numbered):
        size = min(SUBPLOT_TITLE_SIZE, room_px / (CHAR_EM * len(titles[-1])) / math.sqrt(font_scale))
        if size >= GRID_TICK_FONT:
            break
    return titles, size


def attention_grid(
    stack: np.ndarray,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    layers: Sequence[int] | None = None,
    merge_words: bool = False,
    show_special: bool = True,
    font_scale: float = 1.0,
    title: str = "",
) -> go.Figure:
    """Every head of the given layers at once: a (layers, heads) grid of small heatmaps sharing one colour scale.

    ``stack`` is (layers, heads, queries, keys), as Trace.attention_stack returns it; ``layers``
    (all by default) are the rows drawn, named by their number in the stack: a model with many
    heads is shown grid_page_layers at a time. A panel is GRID_ROW_PX high per query, within
    GRID_PANEL_PX and GRID_ASPECT; tick labels are thinned and head titles shrunk to what fits the
    panels at GRID_PLOT_WIDTH_PX (the hover still names every token). ``font_scale`` is how much
    viz.enlarge will scale the fonts (presenter mode), so that the larger labels fit too.
    """
    layers = list(range(len(stack))) if layers is None else list(layers)
    attention = select_tokens(
        np.asarray(stack)[layers], query_pieces, key_pieces, merge_words=merge_words, show_special=show_special
    )
    n_heads = attention.weights.shape[1]
    n_queries, n_keys = len(attention.query_labels), len(attention.key_labels)
    panel_width = GRID_PLOT_WIDTH_PX / n_heads
    tallest = min(GRID_PANEL_PX[1], max(GRID_PANEL_PX[0], GRID_ASPECT * panel_width))
    panel_height = round(min(max(GRID_ROW_PX * n_queries, GRID_PANEL_PX[0]), tallest))
    head_titles, head_title_size = _head_titles(n_heads, panel_width, font_scale)
    figure = make_subplots(
        rows=len(layers),
        cols=n_heads,
        shared_xaxes=True,
        shared_yaxes=True,
        row_titles=[layer_label(layer) for layer in layers],
        column_titles=head_titles,
        horizontal_spacing=0.015,
        vertical_spacing=0.02,
    )
    figure.update_annotations(font_size=head_title_size, selector=lambda note: note.text in head_titles)
    cells = [(row, layer, head) for row, layer in enumerate(layers) for head in range(n_heads)]
    panels = [
        weights_heatmap(
            attention.weights[row, head],
            False,
            f"{layer_label(layer)}, {head_label(head)}<br>{HEATMAP_HOVER}",
            coloraxis="coloraxis",
            name=f"{layer_label(layer)}, {head_label(head)}",  # the panel's name in its table (viz.tables)
        )
        for row, layer, head in cells
    ]
    figure.add_traces(panels, rows=[row + 1 for row, _, _ in cells], cols=[head + 1 for _, _, head in cells])
    # a panel's height grows with viz.enlarge's fonts, its width does not
    x_axis = _thinned_axis(attention.key_labels, label_step(n_keys, panel_width / font_scale))
    y_axis = _thinned_axis(attention.query_labels, label_step(n_queries, panel_height))
    tick_font = {"size": GRID_TICK_FONT}
    figure.update_xaxes(x_axis, tickangle=-60, tickfont=tick_font)
    figure.update_yaxes(y_axis, autorange="reversed", tickfont=tick_font)  # first query on top, as in a matrix
    figure.update_layout(coloraxis={"colorscale": ATTENTION_COLORSCALE, "cmin": 0.0, "cmax": 1.0})
    return base_layout(figure, html.escape(title), height=120 + panel_height * len(layers))
