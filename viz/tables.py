"""Every figure as words and numbers: a one-line description and the same values as accessible HTML tables.

A screen reader says nothing useful about a plotly chart, so the page puts ``describe(figure)`` under each chart
and, on request, ``figure_tables(figure)`` drawn by ``table_html``: one table per heatmap panel (rows and columns
named by the axes' tick labels) and one per group of bar or line traces sharing their x values. The numbers are the
figure's own data, formatted by ``cell_text``; nothing is recomputed.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from viz.tokens import plain_text

MISSING = "–"  # a cell the figure leaves empty (a masked position, a gap in a line)


@dataclass(frozen=True)
class FigureTable:
    """One table: ``values[i][j]`` is row ``rows[i]``, column ``columns[j]`` (None where the figure has no value; a
    string, such as a piece, is shown as it is)."""

    caption: str
    row_header: str
    rows: list[str]
    columns: list[str]
    values: list[list[float | str | None]]


def cell_text(value: float | str | None) -> str:
    """A value as the table shows it: three decimals (four significant digits when large), MISSING, or the string
    itself."""
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return format(value, ".3f" if abs(value) < 1e4 else ".4g")


def _title(figure: go.Figure) -> str:
    return plain_text(figure.layout.title.text or "")


def _axis(figure: go.Figure, reference: str | None, letter: str):
    """The layout axis a trace is drawn on (``x2`` -> ``xaxis2``)."""
    return figure.layout[f"{letter}axis{(reference or letter)[1:]}"]


def _labels(axis, coordinates: Sequence[Any]) -> list[str]:
    """Each coordinate's tick label where the axis names it (heatmaps place tokens at positions with tick texts),
    else the coordinate itself."""
    named = {}
    if axis.tickvals is not None and axis.ticktext is not None:
        named = {value: plain_text(text) for value, text in zip(axis.tickvals, axis.ticktext, strict=False)}
    return [named.get(coordinate) or plain_text(coordinate) for coordinate in coordinates]


def _axis_title(axis, default: str) -> str:
    return plain_text(axis.title.text) if axis.title and axis.title.text else default


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _heatmap_axes(figure: go.Figure, trace: go.Heatmap) -> tuple[str, list[str], str, list[str]]:
    """A heatmap's row axis title and labels, then its column axis title and labels."""
    n_rows, n_columns = np.shape(trace.z)
    x_axis, y_axis = _axis(figure, trace.xaxis, "x"), _axis(figure, trace.yaxis, "y")
    rows = _labels(y_axis, trace.y if trace.y is not None else range(n_rows))
    columns = _labels(x_axis, trace.x if trace.x is not None else range(n_columns))
    return _axis_title(y_axis, "row"), rows, _axis_title(x_axis, "column"), columns


def _heatmap_table(figure: go.Figure, trace: go.Heatmap, caption: str) -> FigureTable:
    row_title, rows, column_title, columns = _heatmap_axes(figure, trace)
    values: list[list[float | str | None]] = [[_number(v) for v in row] for row in np.asarray(trace.z, dtype=object)]
    return FigureTable(caption, f"{row_title} \\ {column_title}", rows, columns, values)


def _category_letters(trace) -> tuple[str, str]:
    """The axis letter of a bar or line trace's categories, then of its values ("y", "x" for horizontal bars)."""
    return ("y", "x") if getattr(trace, "orientation", None) == "h" else ("x", "y")


def _categories(trace) -> list | None:
    category, _ = _category_letters(trace)
    points = trace[category]
    return None if points is None else list(points)


def _series_table(figure: go.Figure, traces: list, caption: str) -> FigureTable:
    """Bar or line traces over the same categories (x values; y for horizontal bars): one row per category, one
    column per trace."""
    category, value = _category_letters(traces[0])
    category_axis = _axis(figure, traces[0][f"{category}axis"], category)
    points = _categories(traces[0]) or list(range(len(traces[0][value])))
    columns = [
        plain_text(trace.name) if trace.name else _axis_title(_axis(figure, trace[f"{value}axis"], value), "value")
        for trace in traces
    ]
    values: list[list[float | str | None]] = [
        [_number(trace[value][i]) for trace in traces] for i in range(len(points))
    ]
    return FigureTable(caption, _axis_title(category_axis, category), _labels(category_axis, points), columns, values)


def _panel_names(heatmaps: list) -> list[str]:
    """What each heatmap panel is called in its table's caption: its trace name (the all-heads grid names each
    "layer L, head H"), else its position; nothing for a figure of one heatmap."""
    if len(heatmaps) <= 1:
        return [""] * len(heatmaps)
    return [plain_text(trace.name) if trace.name else f"panel {index + 1}" for index, trace in enumerate(heatmaps)]


def figure_tables(figure: go.Figure) -> list[FigureTable]:
    """The figure's numbers as tables: each heatmap on its own, bar and line traces grouped by shared x values."""
    title = _title(figure) or "Chart"
    heatmaps = list(figure.select_traces(selector={"type": "heatmap"}))
    names = _panel_names(heatmaps)
    tables = [
        _heatmap_table(figure, trace, f"{title}: {name}" if name else title)
        for trace, name in zip(heatmaps, names, strict=True)
    ]
    groups: list[list] = []
    for trace in figure.data:
        if trace.type not in ("bar", "scatter") or trace[_category_letters(trace)[1]] is None:
            continue
        last = groups[-1][0] if groups else None
        if last and _category_letters(last) == _category_letters(trace) and _categories(last) == _categories(trace):
            groups[-1].append(trace)
        else:
            groups.append([trace])
    tables += [_series_table(figure, group, title) for group in groups]
    return tables


def describe(figure: go.Figure) -> str:
    """One line for a screen reader (and anyone): what kind of chart, its title, and what its axes hold."""
    title = _title(figure) or "Chart"
    heatmaps = list(figure.select_traces(selector={"type": "heatmap"}))
    series = [trace for trace in figure.data if trace.type in ("bar", "scatter")]
    if heatmaps:
        row_title, rows, column_title, columns = _heatmap_axes(figure, heatmaps[0])
        shape = f"{len(rows)} rows ({row_title}: {', '.join(rows)}) by {len(columns)} columns"
        shape += f" ({column_title}: {', '.join(columns)})"
        if len(heatmaps) == 1 and not series:
            return f"{title}: heatmap of {shape}."
        bars = f"a bar chart of {', '.join(plain_text(trace.name) for trace in series)} and " if series else ""
        what = "a heatmap" if len(heatmaps) == 1 else f"{len(heatmaps)} heatmaps"
        return f"{title}: {bars}{what}; the first heatmap has {shape}."
    kinds = sorted({"bar chart" if trace.type == "bar" else "line chart" for trace in series}) or ["chart"]
    names = [plain_text(trace.name) for trace in series if trace.name]
    x_title = _axis_title(figure.layout.xaxis, "")
    parts = [f"{title}: {' and '.join(kinds)}"]
    if x_title:
        parts.append(f"over {x_title}")
    if names:
        parts.append(f"of {', '.join(names)}")
    return " ".join(parts) + "."


# Compact and scrolled sideways inside its column: a sentence's table is wider than the figure beside the pickers.
TABLE_CSS = """<style>
.figure-table-scroll { overflow-x: auto; max-width: 100%; }
.figure-table { border-collapse: collapse; font-size: 0.8rem; margin-bottom: 1rem; }
.figure-table caption { text-align: left; font-weight: 600; padding-bottom: 0.25rem; }
.figure-table th, .figure-table td { padding: 0.1rem 0.4rem; border-bottom: 1px solid #dddddd; white-space: nowrap; }
.figure-table td { text-align: right; font-variant-numeric: tabular-nums; }
.figure-table thead th:first-child { white-space: normal; max-width: 10rem; font-weight: 400; font-style: italic; }
</style>"""


def tokenization_table(pieces: Sequence[str], ids: Sequence[int]) -> FigureTable:
    """A sentence's pieces, exactly as the tokenizer wrote them, with their ids: a column per position."""
    return FigureTable(
        "Tokenization (pieces with their ids; ▁ starts a word)",
        "position",
        ["piece", "id"],
        [str(position) for position in range(len(pieces))],
        [list(pieces), [str(piece_id) for piece_id in ids]],
    )


def table_html(table: FigureTable) -> str:
    """An HTML table with a caption, column headers and row headers (scope set), every text escaped; in a box that
    scrolls sideways (TABLE_CSS)."""
    head = "".join(f'<th scope="col">{html.escape(column)}</th>' for column in table.columns)
    body = "".join(
        f'<tr><th scope="row">{html.escape(row)}</th>'
        + "".join(f"<td>{html.escape(cell_text(v))}</td>" for v in values)
        + "</tr>"
        for row, values in zip(table.rows, table.values, strict=True)
    )
    return (
        f'<div class="figure-table-scroll" tabindex="0" role="region" aria-label="{html.escape(table.caption)}">'
        f'<table class="figure-table"><caption>{html.escape(table.caption)}</caption>'
        f'<thead><tr><th scope="col">{html.escape(table.row_header)}</th>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )
