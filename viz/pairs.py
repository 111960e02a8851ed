"""Minimal pairs drawn: one head on two sentences side by side, and their difference on aligned tokens.

Both take model.analysis.pairs.AttentionPair (attention_pair(first_trace, second_trace, module, head)).
``merge_words`` and ``show_special`` work as in viz.attention (viz.tokens.select_tokens).
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from model.analysis.pairs import AttentionPair
from model.heads import head_title, parse_module_name
from viz.attention import HEATMAP_HOVER, token_axes, weights_heatmap
from viz.style import ATTENTION_COLORSCALE, ROW_HEIGHT, base_layout
from viz.tokens import TokenAttention, select_tokens

DIFFERENCE_COLORSCALE = "RdBu"  # diverging: red where the first sentence attends less, blue where more
DIFFERENCE_HOVER = (
    "query %{customdata[0]} (%{y})<br>key %{customdata[1]} (%{x})<br>first − second %{z:+.4f}<extra></extra>"
)


def _default_title(pair: AttentionPair) -> str:
    return head_title(*parse_module_name(pair.module), pair.head)


def _labelled_heatmap(
    weights: np.ndarray, attention: TokenAttention, hover: str, **kwargs: object
) -> dict[str, object]:
    """viz.attention.weights_heatmap that also sends each cell's [query label, key label] as customdata,
    for hovers written with %{customdata}."""
    queries, keys = len(attention.query_labels), len(attention.key_labels)
    labels = np.empty((queries, keys, 2), dtype=object)
    labels[:, :, 0] = np.asarray(attention.query_labels, dtype=object)[:, None]
    labels[:, :, 1] = np.asarray(attention.key_labels, dtype=object)[None, :]
    return weights_heatmap(weights, False, hover, customdata=labels, **kwargs)


def pair_heatmaps(
    pair: AttentionPair,
    *,
    merge_words: bool = False,
    show_special: bool = True,
    panel_titles: tuple[str, str] = ("First sentence", "Second sentence"),
    title: str = "",
) -> go.Figure:
    """The head's attention on both sentences, side by side on one colour scale (0 to 1).

    ``panel_titles`` name the two panels and ``title`` the figure (by default the module and head),
    plain text both (escaped here). Panels are named, not titled with their translations: a
    translation is as long as the model makes it, a panel half the page; the page shows both
    translations in full above the figure.
    """
    panels = [
        select_tokens(weights, queries, keys, merge_words=merge_words, show_special=show_special)
        for weights, queries, keys in (
            (pair.first, pair.first_query_pieces, pair.first_key_pieces),
            (pair.second, pair.second_query_pieces, pair.second_key_pieces),
        )
    ]
    figure = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=[html.escape(name) for name in panel_titles],
        horizontal_spacing=0.12,
    )
    for column, attention in enumerate(panels, start=1):
        figure.add_trace(
            _labelled_heatmap(attention.weights, attention, HEATMAP_HOVER, coloraxis="coloraxis"), row=1, col=column
        )
        token_axes(figure, attention, row=1, col=column)
    figure.update_layout(
        coloraxis={"colorscale": ATTENTION_COLORSCALE, "cmin": 0.0, "cmax": 1.0, "colorbar": {"title": "weight"}}
    )
    rows = max(len(attention.query_labels) for attention in panels)
    return base_layout(figure, html.escape(title or _default_title(pair)), height=200 + ROW_HEIGHT * rows)


def pair_difference_heatmap(
    pair: AttentionPair, *, merge_words: bool = False, show_special: bool = True, title: str = ""
) -> go.Figure:
    """First minus second on the tokens both sentences share (aligned rows and columns), centred at 0.

    The colour scale is symmetric around 0 (white), up to the largest absolute difference.
    ``title`` is plain text (escaped here); by default "Difference: first − second sentence" (the
    figure beside it, pair_heatmaps, names the head; the page shows both translations).
    """
    attention = select_tokens(
        pair.difference, pair.queries.pieces, pair.keys.pieces, merge_words=merge_words, show_special=show_special
    )
    largest = float(np.abs(attention.weights).max()) if attention.weights.size else 0.0
    heatmap = _labelled_heatmap(
        attention.weights,
        attention,
        DIFFERENCE_HOVER,
        colorscale=DIFFERENCE_COLORSCALE,
        zmid=0.0,
        zmin=-(largest or 1.0),
        zmax=largest or 1.0,
        colorbar={"title": {"text": "first − second"}},
    )
    figure = go.Figure(heatmap)
    token_axes(figure, attention)
    figure.update_xaxes(title_text="key (aligned)")
    figure.update_yaxes(title_text="query (aligned)")
    title = title or "Difference: first − second sentence"
    return base_layout(figure, html.escape(title), height=180 + ROW_HEIGHT * len(attention.query_labels))
