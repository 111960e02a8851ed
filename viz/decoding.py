"""Decoding figures: the probability of each output token, the top-k at one step, one step's attention row."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz.style import ATTENTION_COLORSCALE, ROW_HEIGHT, base_layout, head_colour
from viz.tokens import display_labels, select_tokens


def token_probabilities(pieces: Sequence[str], probabilities: np.ndarray, *, title: str = "") -> go.Figure:
    """How sure the model was of each output token: one bar per step, labelled with the token."""
    labels = display_labels(pieces)
    positions = list(range(len(labels)))
    figure = go.Figure(
        go.Bar(
            x=positions,
            y=np.asarray(probabilities),
            customdata=labels,
            marker_color=head_colour(0),
            hovertemplate="step %{x}: %{customdata}<br>probability %{y:.4f}<extra></extra>",
        )
    )
    figure.update_xaxes(tickmode="array", tickvals=positions, ticktext=labels, tickangle=-60, title_text="output token")
    figure.update_yaxes(range=[0, 1], title_text="probability")
    return base_layout(figure, html.escape(title), height=300)


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
    figure = go.Figure(
        go.Bar(
            x=np.asarray(probabilities),
            y=positions,
            orientation="h",
            customdata=labels,
            marker_color=colours,
            texttemplate="%{x:.3f}",
            textposition="auto",
            hovertemplate="%{customdata}<br>probability %{x:.4f}<extra></extra>",
        )
    )
    figure.update_yaxes(tickmode="array", tickvals=positions, ticktext=labels, autorange="reversed")
    figure.update_xaxes(range=[0, 1], title_text="probability")
    return base_layout(figure, html.escape(title), height=140 + 30 * len(labels))


def step_attention(
    rows: np.ndarray,
    key_pieces: Sequence[str],
    *,
    merge_words: bool = False,
    show_special: bool = True,
    annotate: bool = False,
    title: str = "",
) -> go.Figure:
    """One decoding step's attention over the keys: one row per head and their mean on the last row.

    ``rows`` is (heads, keys): e.g. Trace.attention_stack("cross")[layer, :, t, :] for what the
    step looks at in the source, or attention_stack("decoder")[layer, :, t, : t + 1] for the
    target so far.
    """
    rows = np.asarray(rows)
    table = np.concatenate([rows, rows.mean(axis=0, keepdims=True)], axis=0)  # (heads + 1, keys)
    attention = select_tokens(table, None, key_pieces, merge_words=merge_words, show_special=show_special)
    row_names = [f"head {head}" for head in range(rows.shape[0])] + ["mean"]
    customdata = np.empty(attention.weights.shape + (2,), dtype=object)
    customdata[:, :, 0] = np.asarray(row_names, dtype=object)[:, None]
    customdata[:, :, 1] = np.asarray(attention.key_labels, dtype=object)[None, :]
    figure = go.Figure(
        go.Heatmap(
            z=attention.weights,
            x=list(range(len(attention.key_labels))),
            y=list(range(len(row_names))),
            customdata=customdata,
            colorscale=ATTENTION_COLORSCALE,
            zmin=0.0,
            zmax=1.0,
            texttemplate="%{z:.2f}" if annotate else None,
            textfont={"size": 9},
            hovertemplate="%{customdata[0]}<br>key %{customdata[1]} (%{x})<br>weight %{z:.4f}<extra></extra>",
            colorbar={"title": {"text": "weight"}},
        )
    )
    figure.update_xaxes(
        tickmode="array", tickvals=list(range(len(attention.key_labels))), ticktext=attention.key_labels, tickangle=-60
    )
    figure.update_yaxes(
        tickmode="array", tickvals=list(range(len(row_names))), ticktext=row_names, autorange="reversed"
    )
    return base_layout(figure, html.escape(title), height=200 + ROW_HEIGHT * len(row_names))
