"""Attention heatmaps: one head, and several (queries, keys) maps side by side (aggregates over heads).

The all-heads grid is viz.grid, the head view (lines) viz.head_lines.

Every builder takes attention as captured, (..., queries, keys) numpy arrays, and the pieces
of both axes; ``merge_words`` and ``show_special`` are applied by viz.tokens.select_tokens
(see there for what merging and hiding do to the weights). Axes are integer positions with
tick labels, so a token that occurs twice keeps two rows; hovers show the exact weight.

Hovers name the tokens without any per-cell text: plotly.js writes an axis value that is
one of ``tickvals`` as its ``ticktext``, so ``%{y}`` is the query's label and ``%{y:d}`` (a
number format reads the raw value) its position. A heatmap therefore sends its weights and
two label lists, never a (queries, keys) array of strings, which would be most of a long
sentence's figure.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz.style import ATTENTION_COLORSCALE, ROW_HEIGHT, base_layout, shared_layout, white_figure
from viz.tokens import TokenAttention, display_piece, select_tokens
from viz.trace_views import AttentionAxes

HEATMAP_HOVER = "query %{y} (%{y:d})<br>key %{x} (%{x:d})<br>weight %{z:.4f}<extra></extra>"
# A decoding step's row: the token it wrote (the row's label) and the decoder input it read (per-cell customdata).
STEP_HOVER = (
    "wrote %{y} (row %{y:d})<br>after reading %{customdata}<br>key %{x} (%{x:d})<br>weight %{z:.4f}<extra></extra>"
)


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
    rollout: np.ndarray | None = None,
    **options: Any,
) -> go.Figure:
    """Side by side: mean over heads and max over heads of ``layer``, and the attention rollout through it if given.

    ``stack`` is (layers, heads, queries, keys). ``rollout`` is the caller's (queries, keys) rollout
    through ``layer`` on pieces with every token present
    (``model.analysis.attribution.attention_rollout(stack[: layer + 1])[-1]``), merged/hidden here like
    the other panels. ``options`` are side_by_side's (merge_words, show_special, annotate, title).
    """
    # short panel titles: three panels share the view's column beside the map and the controls at 1280 px; the
    # figure's title names the layer and the help says what they are taken over
    panels = [("mean", mean_over_heads(stack[layer])), ("max", max_over_heads(stack[layer]))]
    if rollout is not None:
        panels.append((f"rollout 0–{layer}", rollout))
    return side_by_side(panels, query_pieces, key_pieces, **options)


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
