"""The head view: lines from each query token to each key token, one colour per head, opacity following the weight.

head_view draws it as a plotly figure (the handout export); head_view_data is what the page's own
component draws in the browser (explorer/components/head_view.js).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from model.heads import head_label
from viz.style import ROW_HEIGHT, base_layout, head_colour
from viz.tokens import MARKED_PIECES, display_text, select_tokens

OPACITY_LEVELS = 10  # the head view draws lines in this many opacity steps (one plotly trace each)


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
        group = head_label(head)
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
                    f"{group}<br>%{{customdata[0]}} (%{{customdata[3]}}) → %{{customdata[1]}} "
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
