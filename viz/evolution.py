"""Training evolution: one head's attention for one sentence at each training stage, side by side.

The stages come from the snapshots a training run saves (model.checkpoint.find_snapshots:
untrained, early, final). To compare like with like, every stage must read the same tokens:
the app teacher-forces each stage with the same target (the final model's translation), so
rows and columns mean the same thing in every panel and only the weights differ.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz.style import ATTENTION_COLORSCALE, ROW_HEIGHT, base_layout
from viz.tokens import select_tokens

HOVER = "%{customdata}<br>query %{y}, key %{x}<br>weight %{z:.4f}<extra></extra>"


def evolution_figure(
    stages: Sequence[tuple[str, np.ndarray]],
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    merge_words: bool = False,
    show_special: bool = True,
    annotate: bool = False,
    title: str = "",
) -> go.Figure:
    """One heatmap per stage, in the given (training) order, on one colour scale.

    ``stages`` is [(stage label, (queries, keys) weights of one head)]; every stage must have
    the same shape, i.e. the same tokens (plain-text labels, escaped here).
    """
    if not stages:
        raise ValueError("give at least one stage")
    shapes = {np.shape(weights) for _, weights in stages}
    if len(shapes) != 1:
        raise ValueError(f"every stage must read the same tokens, got shapes {sorted(shapes)}")
    labels = [label for label, _ in stages]
    selections = [
        select_tokens(weights, query_pieces, key_pieces, merge_words=merge_words, show_special=show_special)
        for _, weights in stages
    ]
    tokens = selections[0]  # the same tokens in every panel
    figure = make_subplots(
        rows=1,
        cols=len(stages),
        shared_yaxes=True,
        subplot_titles=[html.escape(label) for label in labels],
        horizontal_spacing=0.03,
    )
    cells = np.empty(tokens.weights.shape, dtype=object)  # hover: "query → key" in words
    for q, query in enumerate(tokens.query_labels):
        for k, key in enumerate(tokens.key_labels):
            cells[q, k] = f"{query} → {key}"
    for column, (label, attention) in enumerate(zip(labels, selections, strict=True), start=1):
        figure.add_trace(
            go.Heatmap(
                z=attention.weights,
                x=list(range(len(tokens.key_labels))),
                y=list(range(len(tokens.query_labels))),
                customdata=cells,
                hovertemplate=f"{html.escape(label)}<br>" + HOVER,
                texttemplate="%{z:.2f}" if annotate else None,
                textfont={"size": 9},
                coloraxis="coloraxis",
                name=html.escape(label),
            ),
            row=1,
            col=column,
        )
    figure.update_xaxes(
        tickmode="array",
        tickvals=list(range(len(tokens.key_labels))),
        ticktext=tokens.key_labels,
        tickangle=-60,
        showgrid=False,
    )
    figure.update_yaxes(
        tickmode="array",
        tickvals=list(range(len(tokens.query_labels))),
        ticktext=tokens.query_labels,
        autorange="reversed",  # first query at the top, as in a matrix
        showgrid=False,
    )
    figure.update_layout(coloraxis={"colorscale": ATTENTION_COLORSCALE, "cmin": 0.0, "cmax": 1.0})
    return base_layout(figure, html.escape(title), height=200 + ROW_HEIGHT * len(tokens.query_labels))
