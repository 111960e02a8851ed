"""Attributions drawn (model.analysis.attribution): one output word's source shares by method, the whole map, and
how much of each output token came from the source.

They take rows of shares over the source pieces (summing to 1, or for ALTI+ to the output token's
source share); merging pieces into words adds a word's shares (keys) and averages its output rows
(queries), as for attention (viz.tokens).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz.attention import HEATMAP_HOVER, token_axes, weights_heatmap
from viz.style import ATTENTION_COLORSCALE, ROW_HEIGHT, base_layout, paired_bars
from viz.tokens import display_labels, select_tokens

SHARE_COLOURS = {"colorscale": ATTENTION_COLORSCALE, "zmin": 0.0, "zmax": 1.0}
# attribution_rows writes the shares in its cells only while a cell is at least SHARE_TEXT_PX wide (room for "0.42" at
# the cells' 9 px font) in ROWS_PLOT_WIDTH_PX, an estimate of the cells' width in a full-width chart on the narrowest
# page the explorer is laid out for (a 1280 px window with the sidebar open, less the method names, colour bar and
# margins); in narrower cells the numbers would run together.
ROWS_PLOT_WIDTH_PX = 520
SHARE_TEXT_PX = 24


def attribution_rows(
    rows: Mapping[str, np.ndarray],
    source_pieces: Sequence[str],
    *,
    merge_words: bool = False,
    show_special: bool = True,
    title: str = "",
) -> go.Figure:
    """One output word's share of each source piece under each method: one row per method (named by the keys of
    ``rows``, each a (source pieces,) array); ``title`` is plain text.

    The shares are written in the cells when the cells are wide enough for them (ROWS_PLOT_WIDTH_PX), and are
    always in the hover.
    """
    names = list(rows)
    table = np.stack([np.asarray(rows[name], dtype=float) for name in names])  # (methods, source pieces)
    shares = select_tokens(table, None, source_pieces, merge_words=merge_words, show_special=show_special)
    cells = weights_heatmap(
        shares.weights,
        len(shares.key_labels) * SHARE_TEXT_PX <= ROWS_PLOT_WIDTH_PX,
        "%{y}<br>source %{x}<br>share %{z:.3f}<extra></extra>",
        colorbar={"title": {"text": "share"}},
        **SHARE_COLOURS,
    )
    figure = go.Figure(cells)
    figure.update_xaxes(
        tickmode="array", tickvals=list(range(len(shares.key_labels))), ticktext=shares.key_labels, tickangle=-60
    )
    methods = {"tickmode": "array", "tickvals": list(range(len(names))), "ticktext": [html.escape(n) for n in names]}
    figure.update_yaxes(methods, autorange="reversed")
    return base_layout(figure, html.escape(title), height=170 + 2 * ROW_HEIGHT * len(names))


def attribution_maps(
    maps: Mapping[str, np.ndarray],
    output_pieces: Sequence[str],
    source_pieces: Sequence[str],
    *,
    merge_words: bool = False,
    show_special: bool = True,
    title: str = "",
) -> go.Figure:
    """Every output token (rows) against every source piece (columns), one panel per method (``maps``: name ->
    (output steps, source pieces)), on one colour scale; rows are labelled with the token each step wrote."""
    names = list(maps)
    figure = make_subplots(rows=1, cols=len(names), subplot_titles=[html.escape(n) for n in names])
    for column, name in enumerate(names, start=1):
        shares = select_tokens(
            np.asarray(maps[name], dtype=float),
            output_pieces,
            source_pieces,
            merge_words=merge_words,
            show_special=show_special,
        )
        cells = weights_heatmap(shares.weights, False, HEATMAP_HOVER, coloraxis="coloraxis")
        figure.add_trace(cells, row=1, col=column)
        token_axes(figure, shares, row=1, col=column)
        if column > 1:
            figure.update_yaxes(showticklabels=False, row=1, col=column)
    figure.update_layout(coloraxis={"colorscale": ATTENTION_COLORSCALE, "cmin": 0.0, "cmax": 1.0})
    return base_layout(figure, html.escape(title), height=200 + ROW_HEIGHT * len(shares.query_labels))


def source_share_figure(output_pieces: Sequence[str], source_share: np.ndarray, *, title: str = "") -> go.Figure:
    """One bar per output token: the share of it that came from the source, stacked on the share that came from the
    tokens already written (``source_share`` per step, e.g. ALTI+'s source rows summed)."""
    share = np.asarray(source_share, dtype=float)
    figure = paired_bars(
        display_labels(output_pieces),
        [
            (share, "from the source", ": %{y:.0%} from the source"),
            (1.0 - share, "from the words already written", ": %{y:.0%} from the words already written"),
        ],
    )
    figure.update_layout(barmode="stack")
    figure.update_xaxes(title_text="output token")
    figure.update_yaxes(range=[0, 1], title_text="share", tickformat=".0%")
    return base_layout(figure, html.escape(title), height=320)
