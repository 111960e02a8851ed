"""Attention figures: one head as a heatmap, all heads as a grid, the head view (lines), aggregates.

Every builder takes attention as captured, (..., queries, keys) numpy arrays, and the pieces
of both axes; ``merge_words`` and ``show_special`` are applied by viz.tokens.select_tokens
(see there for what merging and hiding do to the weights). Axes are integer positions with
tick labels, so a token that occurs twice keeps two rows; hovers show the exact weight.

Hovers name the tokens without any per-cell text: plotly.js writes an axis value that is
one of ``tickvals`` as its ``ticktext``, so ``%{y}`` is the query's label and ``%{y:d}`` (a
number format reads the raw value) its position. A heatmap therefore sends its weights and
two label lists, never a (queries, keys) array of strings, which would be most of a long
sentence's figure. The all-heads grid's panels are too small to label every token, so
its axes label every few positions and name each one through labelalias instead (_thinned_axis),
which gives its hovers the same %{x} and %{x:d}.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from model.analysis.attribution import attention_rollout
from viz.presenter import SUBPLOT_TITLE_SIZE
from viz.style import ATTENTION_COLORSCALE, ROW_HEIGHT, base_layout, head_colour, shared_layout, white_figure
from viz.tokens import MARKED_PIECES, TokenAttention, display_piece, display_text, select_tokens
from viz.trace_views import AttentionAxes

HEATMAP_HOVER = "query %{y} (%{y:d})<br>key %{x} (%{x:d})<br>weight %{z:.4f}<extra></extra>"
# A decoding step's row: the token it wrote (the row's label) and the decoder input it read (per-cell customdata).
STEP_HOVER = (
    "wrote %{y} (row %{y:d})<br>after reading %{customdata}<br>key %{x} (%{x:d})<br>weight %{z:.4f}<extra></extra>"
)
OPACITY_LEVELS = 10  # the head view draws lines in this many opacity steps (one plotly trace each)
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


def weights_heatmap(weights: np.ndarray, annotate: bool, hover: str, **kwargs: Any) -> dict[str, Any]:
    """A heatmap trace of (queries, keys) ``weights`` in plotly's dict form, for token_axes.

    Cells sit at x = 0..keys-1 and y = 0..queries-1 (plotly's default x0 = y0 = 0, dx = dy = 1),
    token_axes's tick values, so ``hover`` can name the tokens with %{x} and %{y} (see the
    module docstring). ``annotate`` writes each weight in its cell; ``kwargs`` are more
    heatmap properties (colour scale or axis, customdata).
    """
    return {
        "type": "heatmap",
        "z": weights,
        "hovertemplate": hover,
        **({"texttemplate": "%{z:.2f}", "textfont": {"size": 9}} if annotate else {}),
        **kwargs,
    }


def _axis_settings(attention: TokenAttention) -> tuple[dict, dict]:
    """x (keys) and y (queries) axis settings: one tick per token at its position, labelled with it."""
    x_axis = {
        "tickmode": "array",
        "tickvals": list(range(len(attention.key_labels))),
        "ticktext": attention.key_labels,
        "tickangle": -60,
        "showgrid": False,
    }
    y_axis = {
        "tickmode": "array",
        "tickvals": list(range(len(attention.query_labels))),
        "ticktext": attention.query_labels,
        "autorange": "reversed",  # first query at the top, as in a matrix
        "showgrid": False,
    }
    return x_axis, y_axis


def token_axes(figure: go.Figure, attention: TokenAttention, **options: object) -> None:
    """Label ``figure``'s axes with ``attention``'s tokens: keys across, queries down (first on top).

    One tick per token at its position, as weights_heatmap places the cells. ``options`` select
    the subplots (row, col; all by default) and may add other axis properties.
    """
    x_axis, y_axis = _axis_settings(attention)
    figure.update_xaxes(x_axis, **options)
    figure.update_yaxes(y_axis, **options)


def attention_heatmap(
    weights: np.ndarray,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    merge_words: bool = False,
    show_special: bool = True,
    annotate: bool = False,
    title: str = "",
    query_inputs: Sequence[str] | None = None,
    query_title: str = "query (attending)",
    key_title: str = "key (attended to)",
) -> go.Figure:
    """One head's (queries, keys) attention: query tokens down, key tokens across.

    ``title`` is plain text (escaped here). The colour scale is square-root bent so small
    weights show; the hover gives the exact weight. For a decoder's rows (AttentionAxes), the
    rows are labelled with the token each step wrote, ``query_inputs`` are the decoder inputs
    those steps read (a merged word's row: the input before its first piece), shown in the hover,
    and ``query_title``/``key_title`` name the axes.
    """
    attention = select_tokens(weights, query_pieces, key_pieces, merge_words=merge_words, show_special=show_special)
    hover: dict[str, Any] = {}
    if query_inputs is not None:
        read = [display_piece(query_inputs[positions[0]]) for positions in attention.query_positions]
        hover = {"customdata": [[label] * len(attention.key_labels) for label in read]}
    heatmap = weights_heatmap(
        attention.weights,
        annotate,
        HEATMAP_HOVER if query_inputs is None else STEP_HOVER,
        colorscale=ATTENTION_COLORSCALE,
        zmin=0.0,
        zmax=1.0,
        colorbar={"title": {"text": "weight"}},
        **hover,
    )
    x_axis, y_axis = _axis_settings(attention)
    # the whole layout given at construction: updating a built figure costs several times more (plotly's relayout)
    height = 180 + ROW_HEIGHT * len(attention.query_labels)
    layout = {
        "xaxis": {**x_axis, "title": {"text": key_title}},
        "yaxis": {**y_axis, "title": {"text": query_title}},
        **shared_layout(html.escape(title), height),
    }
    return white_figure(heatmap, layout)


def head_heatmap(
    axes: AttentionAxes,
    layer: int,
    head: int,
    *,
    merge_words: bool = False,
    show_special: bool = True,
    annotate: bool = False,
    title: str = "",
) -> go.Figure:
    """attention_heatmap of one head of a trace's attention (viz.attention_axes), rows and axes named as there."""
    return attention_heatmap(
        axes.stack[layer, head],
        axes.query_pieces,
        axes.key_pieces,
        merge_words=merge_words,
        show_special=show_special,
        annotate=annotate,
        title=title,
        query_inputs=axes.query_inputs,
        query_title=axes.query_title,
        key_title=axes.key_title,
    )


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
    tick labels and hovers alike: %{x} is the token and %{x:d} its position, as with token_axes.
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
    at least GRID_TICK_FONT), else the numbers alone. viz.enlarge grows panel titles by the square root of
    ``font_scale``."""
    for titles in ([f"head {head}" for head in range(n_heads)], [str(head) for head in range(n_heads)]):
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
        row_titles=[f"layer {layer}" for layer in layers],
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
            f"layer {layer}, head {head}<br>{HEATMAP_HOVER}",
            coloraxis="coloraxis",
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


def head_view(
    weights: np.ndarray,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    heads: Sequence[int] | None = None,
    query: int | None = None,
    min_weight: float = 0.01,
    merge_words: bool = False,
    show_special: bool = True,
    title: str = "",
) -> go.Figure:
    """Lines from each query token (left) to each key token (right); opacity follows the weight.

    ``weights`` is (heads, queries, keys) for one layer; each head has its own colour and
    legend entry (click to hide it). ``query`` keeps only the lines of one query (a position
    after merging/hiding). Lines under ``min_weight`` are not drawn. Opacity is the square
    root of the weight, in OPACITY_LEVELS steps; the marker halfway along each drawn line
    shows the exact weight on hover.
    """
    attention = select_tokens(weights, query_pieces, key_pieces, merge_words=merge_words, show_special=show_special)
    n_queries, n_keys = attention.weights.shape[1:]
    heads = list(range(attention.weights.shape[0])) if heads is None else list(heads)
    queries = list(range(n_queries)) if query is None else [query]
    figure = go.Figure()
    for head in heads:
        segments: dict[int, tuple[list, list]] = {}
        hover_x, hover_y, hover_data = [], [], []
        for q in queries:
            for k in range(n_keys):
                weight = float(attention.weights[head, q, k])
                if weight < min_weight:
                    continue
                level = max(1, round(np.sqrt(weight) * OPACITY_LEVELS))
                xs, ys = segments.setdefault(level, ([], []))
                xs.extend([0.0, 1.0, None])
                ys.extend([q, k, None])
                hover_x.append(0.5)
                hover_y.append((q + k) / 2)
                hover_data.append([attention.query_labels[q], attention.key_labels[k], weight, q, k])
        group = f"head {head}"
        for level, (xs, ys) in sorted(segments.items()):
            figure.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={"color": head_colour(head, level / OPACITY_LEVELS), "width": 2},
                    hoverinfo="skip",
                    legendgroup=group,
                    showlegend=False,
                )
            )
        figure.add_trace(
            go.Scatter(
                x=hover_x,
                y=hover_y,
                mode="markers",
                marker={"size": 4, "color": head_colour(head, 0.3)},  # faint: only there to carry the hover
                customdata=hover_data,
                hovertemplate=(
                    f"head {head}<br>%{{customdata[0]}} (%{{customdata[3]}}) → %{{customdata[1]}} "
                    "(%{customdata[4]})<br>weight %{customdata[2]:.4f}<extra></extra>"
                ),
                name=group,
                legendgroup=group,
                showlegend=True,
            )
        )
    figure.add_trace(_token_column(0.0, attention.query_labels, "middle left", "query"))
    figure.add_trace(_token_column(1.0, attention.key_labels, "middle right", "key"))
    figure.update_xaxes(visible=False, range=[-0.7, 1.7])
    figure.update_yaxes(visible=False, autorange="reversed")
    figure.update_layout(legend={"orientation": "h", "y": -0.02, "yanchor": "top"}, hovermode="closest")
    rows = max(n_queries, n_keys)
    return base_layout(figure, html.escape(title), height=160 + ROW_HEIGHT * rows)


def head_view_data(
    weights: np.ndarray,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    min_weight: float = 0.01,
    merge_words: bool = False,
    show_special: bool = True,
    decimals: int = 3,
) -> dict[str, Any]:
    """What the page's interactive head view draws (explorer/components/head_view.js), as JSON-ready data.

    ``weights`` is (heads, queries, keys) for one layer, selected as in head_view. ``queries`` and
    ``keys`` are the tokens as plain text (the browser draws them as text, never as HTML), each
    with whether it is a special token; ``weights`` are rounded to ``decimals``, and those under
    ``min_weight`` are 0 (no line); ``colours`` holds each head's colour.
    """
    attention = select_tokens(weights, query_pieces, key_pieces, merge_words=merge_words, show_special=show_special)

    def tokens(texts: Sequence[str]) -> list[dict[str, Any]]:
        return [
            {"text": text if merge_words else display_text(text), "special": text in MARKED_PIECES} for text in texts
        ]

    rounded = np.round(attention.weights.astype(float), decimals)
    return {
        "queries": tokens(attention.query_tokens),
        "keys": tokens(attention.key_tokens),
        "weights": np.where(rounded < min_weight, 0.0, rounded).tolist(),
        "colours": [head_colour(head) for head in range(attention.weights.shape[0])],
    }


def _token_column(x: float, labels: Sequence[str], position: str, role: str) -> go.Scatter:
    return go.Scatter(
        x=[x] * len(labels),
        y=list(range(len(labels))),
        mode="markers+text",
        text=list(labels),
        textposition=position,
        marker={"size": 6, "color": "#555"},
        customdata=list(labels),
        hovertemplate=f"{role} %{{customdata}} (%{{y}})<extra></extra>",
        name=f"{role} tokens",
        showlegend=False,
    )


def mean_over_heads(weights: np.ndarray) -> np.ndarray:
    """(..., heads, queries, keys) -> (..., queries, keys): what the layer attends to on average."""
    return np.asarray(weights).mean(axis=-3)


def max_over_heads(weights: np.ndarray) -> np.ndarray:
    """(..., heads, queries, keys) -> (..., queries, keys): the strongest weight any head gives.

    Rows need not sum to 1.
    """
    return np.asarray(weights).max(axis=-3)


def aggregate_figure(
    stack: np.ndarray,
    layer: int,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    rollout: bool = True,
    merge_words: bool = False,
    show_special: bool = True,
    annotate: bool = False,
    title: str = "",
) -> go.Figure:
    """Side by side: mean over heads and max over heads of ``layer``, and (``rollout``) the rollout through it.

    ``stack`` is (layers, heads, queries, keys). Rollout is computed on pieces with every
    token present, then merged/hidden like the other panels.
    """
    panels = {
        f"mean over heads, layer {layer}": mean_over_heads(stack[layer]),
        f"max over heads, layer {layer}": max_over_heads(stack[layer]),
    }
    if rollout:
        panels[f"rollout, layers 0–{layer}"] = attention_rollout(stack[: layer + 1])[-1]
    return side_by_side(
        list(panels.items()),
        query_pieces,
        key_pieces,
        merge_words=merge_words,
        show_special=show_special,
        annotate=annotate,
        title=title,
    )


def side_by_side(
    panels: Sequence[tuple[str, np.ndarray]],
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    merge_words: bool = False,
    show_special: bool = True,
    annotate: bool = False,
    title: str = "",
) -> go.Figure:
    """One (queries, keys) heatmap per panel, left to right in the given order, on one colour scale.

    ``panels`` is [(plain-text label, escaped here; weights)]; every panel reads the same tokens.
    """
    figure = make_subplots(
        rows=1,
        cols=len(panels),
        shared_yaxes=True,
        subplot_titles=[html.escape(name) for name, _ in panels],
        horizontal_spacing=0.03,
    )
    selections = [
        select_tokens(weights, query_pieces, key_pieces, merge_words=merge_words, show_special=show_special)
        for _, weights in panels
    ]
    for column, ((name, _), attention) in enumerate(zip(panels, selections, strict=True), start=1):
        hover = f"{html.escape(name)}<br>" + HEATMAP_HOVER
        figure.add_trace(weights_heatmap(attention.weights, annotate, hover, coloraxis="coloraxis"), row=1, col=column)
    tokens = selections[0]  # every panel has the same tokens
    token_axes(figure, tokens)
    figure.update_layout(coloraxis={"colorscale": ATTENTION_COLORSCALE, "cmin": 0.0, "cmax": 1.0})
    return base_layout(figure, html.escape(title), height=200 + ROW_HEIGHT * len(tokens.query_labels))
