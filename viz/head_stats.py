"""Head statistics drawn: one statistic as a layers × heads heatmap per attention kind, and the sortable table.

Both take the table of model.analysis.head_stats (trace_head_statistics for one sentence,
batch_head_statistics for many): a list of rows with kind, layer, head and every statistic.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from model.analysis.head_stats import SHARE_STATISTICS, STATISTIC_DESCRIPTIONS, STATISTICS
from model.heads import KIND_LABELS, KIND_TITLES
from viz.style import ATTENTION_COLORSCALE, LAYER_ROW_HEIGHT, add_layer_head_panel, base_layout, power_colorscale

STATISTIC_LABELS = {
    "entropy": "entropy (bits)",
    "distance": "mean distance (tokens)",
    "same": "same position",
    "previous": "previous token",
    "next": "next token",
    "bos": "on <s>",
    "eos": "on </s>",
    "punctuation": "on punctuation",
    "diagonality": "diagonality",
}
UNBOUNDED_COLORSCALE = power_colorscale("Blues", 1.0)  # entropy and distance: linear, 0 to the largest value
TABLE_KINDS = tuple(KIND_LABELS.values())  # the table's kinds: "encoder self", "decoder self", "cross"
PANEL_TITLES = {KIND_LABELS[kind]: KIND_TITLES[kind] for kind in KIND_LABELS}  # table kind -> plain words


def _check_kind(kind: str) -> None:
    if kind not in TABLE_KINDS:
        raise ValueError(f"kind must be one of {TABLE_KINDS}, not {kind!r}")


def statistic_grid(table: Sequence[dict[str, Any]], statistic: str, kind: str) -> np.ndarray:
    """(layers, heads) values of one statistic for one attention kind."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, not {statistic!r}")
    _check_kind(kind)
    rows = [row for row in table if row["kind"] == kind]
    if not rows:
        raise ValueError(f"the table has no {kind!r} rows")
    grid = np.full((max(r["layer"] for r in rows) + 1, max(r["head"] for r in rows) + 1), np.nan)
    for row in rows:
        grid[row["layer"], row["head"]] = row[statistic]
    return grid


def head_stats_heatmap(
    table: Sequence[dict[str, Any]],
    statistic: str,
    kinds: Sequence[str] = TABLE_KINDS,
    *,
    stacked: bool = False,
    title: str = "",
) -> go.Figure:
    """One panel per attention kind in ``kinds`` (the table's kinds: "encoder self", ...), each layers down and
    heads across, one cell per head coloured by ``statistic`` on one colour scale shared by the panels.

    Panels stand side by side, or one under another when ``stacked`` (presenter mode's large
    fonts leave a third of the page too narrow for a panel's title). Shares use the attention
    colour scale on [0, 1]; entropy and distance a linear scale from 0 to the largest value of any
    panel. Panels are titled with the kind in plain words; ``title`` is plain text (escaped here),
    by default the statistic and what its values average ("Entropy (bits) – this sentence", "… – mean
    over 3 sentences"), short enough to stay clear of the chart's toolbar in presenter mode.
    """
    grids = [statistic_grid(table, statistic, kind) for kind in kinds]
    label = STATISTIC_LABELS[statistic]
    if statistic in SHARE_STATISTICS:
        colours = {"colorscale": ATTENTION_COLORSCALE, "cmin": 0.0, "cmax": 1.0}
    else:
        largest = max(float(np.nanmax(grid)) for grid in grids)
        colours = {"colorscale": UNBOUNDED_COLORSCALE, "cmin": 0.0, "cmax": largest or 1.0}
    panels = len(kinds)
    figure = make_subplots(
        rows=panels if stacked else 1,
        cols=1 if stacked else panels,
        subplot_titles=[PANEL_TITLES[kind] for kind in kinds],
        horizontal_spacing=0.05,
        vertical_spacing=0.3 / panels,
    )
    for index, (kind, grid) in enumerate(zip(kinds, grids, strict=True)):
        place = {"row": index + 1, "col": 1} if stacked else {"row": 1, "col": index + 1}
        value = f"{html.escape(label)} %{{z:.4f}}<br>{html.escape(STATISTIC_DESCRIPTIONS[statistic])}"
        add_layer_head_panel(figure, grid, place, PANEL_TITLES[kind], value, show_layers=stacked or index == 0)
    figure.update_layout(coloraxis={**colours, "colorbar": {"title": {"text": html.escape(label)}}})
    if not title:
        sentences = max(row["sentences"] for row in table if row["kind"] in kinds)
        over = "this sentence" if sentences == 1 else f"mean over {sentences} sentences"
        title = f"{label[0].upper()}{label[1:]} – {over}"
    panel_height = 40 + LAYER_ROW_HEIGHT * max(grid.shape[0] for grid in grids)
    return base_layout(figure, html.escape(title), height=120 + panel_height * (panels if stacked else 1))


def head_stats_frame(table: Sequence[dict[str, Any]], kinds: Sequence[str] | None = None) -> pd.DataFrame:
    """The table as a DataFrame for a sortable view (st.dataframe): one row per head, statistics as labelled columns.

    ``kinds`` keeps only those attention kinds. Values are exact (format them when showing);
    column names are plain text, not HTML.
    """
    kinds = list(TABLE_KINDS) if kinds is None else list(kinds)
    for kind in kinds:
        _check_kind(kind)
    columns = {"kind": "kind", "layer": "layer", "head": "head", **STATISTIC_LABELS}
    columns.update({"queries": "query rows", "sentences": "sentences"})
    # layers and heads counted from 1, as the page writes them (model.heads.layer_label)
    rows = [
        {label: row[key] + 1 if key in ("layer", "head") else row[key] for key, label in columns.items()}
        for row in table
        if row["kind"] in kinds
    ]
    return pd.DataFrame(rows, columns=list(columns.values()))
