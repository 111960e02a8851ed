"""Decoding figures: the probability of each output token, the top-k at one step, one step's attention row."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz.style import ATTENTION_COLORSCALE, ROW_HEIGHT, head_colour, shared_layout, white_figure
from viz.tokens import display_labels, select_tokens


def token_probabilities(pieces: Sequence[str], probabilities: np.ndarray, *, title: str = "") -> go.Figure:
    """How sure the model was of each output token: one bar per step, labelled with the token."""
    labels = display_labels(pieces)
    positions = list(range(len(labels)))
    bars = {
        "type": "bar",
        "x": positions,
        "y": np.asarray(probabilities),
        "customdata": labels,
        "marker": {"color": head_colour(0)},
        "hovertemplate": "step %{x}: %{customdata}<br>probability %{y:.4f}<extra></extra>",
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
    step looks at in the source, or attention_stack("decoder")[layer, :, t, : t + 1] for the
    target so far. ``row_height``: pixels a row adds to the figure's height.
    """
    rows = np.asarray(rows)
    table = np.concatenate([rows, rows.mean(axis=0, keepdims=True)], axis=0)  # (heads + 1, keys)
    attention = select_tokens(table, None, key_pieces, merge_words=merge_words, show_special=show_special)
    row_names = [f"head {head}" for head in range(rows.shape[0])] + ["mean"]
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
