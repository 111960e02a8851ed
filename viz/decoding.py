"""Decoding figures: the probability of each output token, the top-k at one step, one step's attention row."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from model.heads import head_label
from viz.margins import TICK_GAP_PX, label_reach
from viz.style import ATTENTION_COLORSCALE, FONT_SIZE, ROW_HEIGHT, head_colour, shared_layout, white_figure
from viz.tokens import TokenAttention, display_labels, plain_text, select_tokens
from viz.trace_views import DecodingStep


def token_probabilities(pieces: Sequence[str], probabilities: np.ndarray, *, title: str = "") -> go.Figure:
    """How sure the model was of each output token: one bar per step, labelled with the token."""
    labels = display_labels(pieces)
    positions = list(range(len(labels)))
    bars = {
        "type": "bar",
        "x": positions,
        "y": np.asarray(probabilities),
        "customdata": [[position + 1, label] for position, label in enumerate(labels)],  # steps counted from 1
        "marker": {"color": head_colour(0)},
        "hovertemplate": "step %{customdata[0]}: %{customdata[1]}<br>probability %{y:.4f}<extra></extra>",
    }
    layout = {  # given at construction: updating a built figure costs several times more (plotly's relayout)
        "xaxis": {
            "tickmode": "array",
            "tickvals": positions,
            "ticktext": labels,
            "tickangle": -60,
            "title": {"text": "output token"},
        },
        "yaxis": {"range": [0, 1], "title": {"text": "probability"}},
        **shared_layout(html.escape(title), 300),
    }
    return white_figure(bars, layout)


def top_k_figure(
    pieces: Sequence[str], probabilities: np.ndarray, chosen: int | None = None, *, title: str = ""
) -> go.Figure:
    """The k most likely next tokens at one step as horizontal bars, most likely on top.

    ``chosen`` is the position (in ``pieces``) of the token the decoder actually took, drawn
    in a stronger colour; it may be missing from the top k (beam search or teacher forcing).
    """
    labels = display_labels(pieces)
    positions = list(range(len(labels)))
    colours = [head_colour(1) if i == chosen else head_colour(0, 0.5) for i in positions]
    bars = {
        "type": "bar",
        "x": np.asarray(probabilities),
        "y": positions,
        "orientation": "h",
        "customdata": labels,
        "marker": {"color": colours},
        "texttemplate": "%{x:.3f}",
        "textposition": "auto",
        "hovertemplate": "%{customdata}<br>probability %{x:.4f}<extra></extra>",
    }
    layout = {
        "yaxis": {"tickmode": "array", "tickvals": positions, "ticktext": labels, "autorange": "reversed"},
        "xaxis": {"range": [0, 1], "title": {"text": "probability"}},
        **shared_layout(html.escape(title), 140 + 30 * len(labels)),
    }
    return white_figure(bars, layout)


def _heads_and_mean(
    rows: np.ndarray, key_pieces: Sequence[str], merge_words: bool, show_special: bool
) -> tuple[TokenAttention, list[str]]:
    """A step's (heads, keys) attention with their mean as a last row, its keys selected as the display asks, and
    the rows' names."""
    rows = np.asarray(rows)
    table = np.concatenate([rows, rows.mean(axis=0, keepdims=True)], axis=0)  # (heads + 1, keys)
    attention = select_tokens(table, None, key_pieces, merge_words=merge_words, show_special=show_special)
    return attention, [head_label(head) for head in range(rows.shape[0])] + ["mean"]


def step_attention(
    rows: np.ndarray,
    key_pieces: Sequence[str],
    *,
    merge_words: bool = False,
    show_special: bool = True,
    annotate: bool = False,
    title: str = "",
    row_height: int = ROW_HEIGHT,
) -> go.Figure:
    """One decoding step's attention over the keys: one row per head and their mean on the last row.

    ``rows`` is (heads, keys): e.g. Trace.attention_stack("cross")[layer, :, t, :] for what the
    step looks at in the source, or attention_stack("decoder_self")[layer, :, t, : t + 1] for the
    target so far. ``row_height``: pixels a row adds to the figure's height.
    """
    attention, row_names = _heads_and_mean(rows, key_pieces, merge_words, show_special)
    # cells at x = 0..keys-1 and y = 0..rows-1 (plotly's defaults), the tick values: the hover shows their
    # tick labels, so no per-cell labels need to be sent
    heatmap = {
        "type": "heatmap",
        "z": attention.weights,
        "colorscale": ATTENTION_COLORSCALE,
        "zmin": 0.0,
        "zmax": 1.0,
        **({"texttemplate": "%{z:.2f}", "textfont": {"size": 9}} if annotate else {}),
        "hovertemplate": "%{y}<br>key %{x} (%{x:d})<br>weight %{z:.4f}<extra></extra>",
        "colorbar": {"title": {"text": "weight"}},
    }
    layout = {
        "xaxis": {
            "tickmode": "array",
            "tickvals": list(range(len(attention.key_labels))),
            "ticktext": attention.key_labels,
            "tickangle": -60,
        },
        "yaxis": {
            "tickmode": "array",
            "tickvals": list(range(len(row_names))),
            "ticktext": row_names,
            "autorange": "reversed",
        },
        **shared_layout(html.escape(title), 200 + row_height * len(row_names)),
    }
    return white_figure(heatmap, layout)


LABEL_SLANT = -60  # degrees: the panels' column labels slant, so long pieces fit
LABEL_ROOM_PX = (40, 170)  # the least and the most room given to them under their panel
PANEL_TITLE_PX = 28  # a panel title's line above its panel
BAR_PX = 30  # one of the top k bars


def _label_room(labels: Sequence[str]) -> int:
    """Pixels slanted tick labels need below their axis (viz.margins' estimate, as the figure's margins get), within
    bounds."""
    reach = TICK_GAP_PX + label_reach([plain_text(label) for label in labels], FONT_SIZE, LABEL_SLANT, x_axis=True)
    return int(min(max(reach, LABEL_ROOM_PX[0]), LABEL_ROOM_PX[1]))


def _panel_axis(labels: Sequence[str], domain: list[float], anchor: str, **look: Any) -> dict[str, Any]:
    """An axis of one panel (its ``domain`` of the figure, ``anchor`` the axis it meets) that names the positions
    0..n-1 by ``labels``."""
    return {
        "domain": domain,
        "anchor": anchor,
        "tickmode": "array",
        "tickvals": list(range(len(labels))),
        "ticktext": list(labels),
        **look,
    }


def decoding_step_figure(
    step: DecodingStep,
    source_pieces: Sequence[str],
    *,
    merge_words: bool = False,
    show_special: bool = True,
    annotate: bool = False,
    title: str = "",
    panel_titles: tuple[str, str, str] = ("Next token", "Cross-attention", "Self-attention"),
    attention_first: bool = False,
    cross_row_height: int = ROW_HEIGHT,
) -> go.Figure:
    """One decoding step (viz.decoding_step) in one figure: the top k next tokens (top_k_figure's bars) beside the
    step's cross-attention over the source, and its self-attention over the decoder input below (step_attention's rows:
    one per head, then their mean), on one colour scale. ``attention_first`` puts the cross-attention first and
    wider (presenter mode); ``cross_row_height`` is the pixels a cross-attention row adds.

    One figure rather than three: each chart a browser draws costs it a fixed share of a step's redraw. Texts are
    plain (escaped here); ``panel_titles`` name the bars, the cross-attention and the self-attention panels.
    """
    bar_labels = display_labels(step.top_pieces)
    positions = list(range(len(bar_labels)))
    cross, row_names = _heads_and_mean(step.cross_rows, source_pieces, merge_words, show_special)
    own, _ = _heads_and_mean(step.self_rows, step.decoder_input, merge_words, show_special)

    bars_px = 20 + BAR_PX * len(bar_labels)
    cross_px = cross_row_height * len(row_names)
    self_px = ROW_HEIGHT * len(row_names)
    top_px = max(bars_px, cross_px)
    gap_px = _label_room(cross.key_labels) + PANEL_TITLE_PX
    plot_px = top_px + gap_px + self_px
    bottom_px = _label_room(own.key_labels)
    shared = shared_layout(html.escape(title), 0)
    top_margin_px = shared["margin"]["t"] + PANEL_TITLE_PX  # the panel titles' line under the figure's title
    shared["height"] = top_margin_px + plot_px + bottom_px
    shared["margin"] = {**shared["margin"], "t": top_margin_px, "b": bottom_px}

    def rows_from_top(height_px: int) -> list[float]:
        return [1 - height_px / plot_px, 1.0]

    # the gap between the panels holds the right panel's row labels: pieces beside the bars, heads beside the cells
    bars_x, cross_x = ([0.76, 1.0], [0.0, 0.58]) if attention_first else ([0.0, 0.26], [0.36, 1.0])
    colours = [head_colour(1) if i == step.chosen_rank else head_colour(0, 0.5) for i in positions]
    heatmap_common = {
        "type": "heatmap",
        "coloraxis": "coloraxis",
        **({"texttemplate": "%{z:.2f}", "textfont": {"size": 9}} if annotate else {}),
        "hovertemplate": "%{y}<br>key %{x} (%{x:d})<br>weight %{z:.4f}<extra></extra>",
    }
    traces = [
        {
            "type": "bar",
            "name": "probability",
            "x": np.asarray(step.top_probabilities),
            "y": positions,
            "orientation": "h",
            "customdata": bar_labels,
            "marker": {"color": colours},
            "texttemplate": "%{x:.3f}",
            "textposition": "auto",
            "hovertemplate": "%{customdata}<br>probability %{x:.4f}<extra></extra>",
            "xaxis": "x",
            "yaxis": "y",
        },
        {**heatmap_common, "name": panel_titles[1], "z": cross.weights, "xaxis": "x2", "yaxis": "y2"},
        {**heatmap_common, "name": panel_titles[2], "z": own.weights, "xaxis": "x3", "yaxis": "y3"},
    ]

    layout = {
        "xaxis": {"domain": bars_x, "anchor": "y", "range": [0, 1], "title": {"text": "probability"}},
        "yaxis": _panel_axis(bar_labels, rows_from_top(bars_px), "x", autorange="reversed"),
        "xaxis2": _panel_axis(cross.key_labels, cross_x, "y2", tickangle=LABEL_SLANT),
        "yaxis2": _panel_axis(row_names, rows_from_top(cross_px), "x2", autorange="reversed"),
        "xaxis3": _panel_axis(own.key_labels, [0.0, 1.0], "y3", tickangle=LABEL_SLANT),
        "yaxis3": _panel_axis(row_names, [0.0, self_px / plot_px], "x3", autorange="reversed"),
        "coloraxis": {
            "colorscale": ATTENTION_COLORSCALE,
            "cmin": 0.0,
            "cmax": 1.0,
            "colorbar": {"title": {"text": "weight"}, "y": 0.0, "yanchor": "bottom", "len": self_px / plot_px},
        },
        "showlegend": False,
        **shared,
    }
    titles = [
        (panel_titles[0], bars_x[0], 1.0),
        (panel_titles[1], cross_x[0], 1.0),
        (panel_titles[2], 0.0, self_px / plot_px),
    ]
    annotations = [
        {
            "text": html.escape(text),
            "x": x,
            "y": y,
            "xref": "paper",
            "yref": "paper",
            "xanchor": "left",
            "yanchor": "bottom",
            "showarrow": False,
            "font": {"size": FONT_SIZE + 2},
        }
        for text, x, y in titles
    ]
    return white_figure(traces, layout, annotations=annotations)
