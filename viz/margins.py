"""Margins that hold a figure's axis labels, so that the browser draws it once.

The white template turns on plotly's ``automargin``: plotly.js draws the figure, measures the tick
labels and axis titles that stick out of the margins, grows the margins and draws the whole figure
again. With the 10 px left and bottom margins every figure had, every chart was drawn twice
(docs/performance.md has the measurements). ``fit_margins`` gives the left and bottom
margins room for the labels, estimated from their text a little generously, so that automargin finds
nothing to grow. It stays on: a label the estimate misjudges still fits, at the cost of the second
drawing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go

from viz.style import FONT_SIZE, PANEL_AXIS
from viz.tokens import plain_text

# A character's width, in font sizes, by how wide a character is: a little over what DejaVu Sans (the sans-serif a
# Debian browser falls back on when plotly's Open Sans is missing) gives most labels, and over Open Sans
NARROW = set("fijlrtI.,:;'!|()[] ")
WIDE = set("mwMW@%<>=+~œæŒÆ")
WIDTHS = {"narrow": 0.4, "wide": 1.0, "upper": 0.78, "other": 0.66}
LINE = 1.3  # a line of text's height, in font sizes
TICK_GAP_PX = 4  # between the axis line and its tick labels
TITLE_STANDOFF_PX = 15  # between the tick labels and the axis title (the white template's standoff)
SLACK_PX = 8  # over the estimate: a label a few pixels wider than estimated still fits
NUMBER_LABEL = "0.00"  # as wide as a tick label plotly writes itself on a numeric axis
EDGE = 0.01  # a domain starting this close to 0 is at the figure's edge


def text_width(text: str, size: float) -> float:
    """About how wide ``text`` (plain) is at font ``size``, in px: a little more than it takes."""

    def width(character: str) -> float:
        if character in NARROW:
            return WIDTHS["narrow"]
        if character in WIDE:
            return WIDTHS["wide"]
        return WIDTHS["upper"] if character.isupper() else WIDTHS["other"]

    return size * sum(width(character) for character in text)


def _tick_labels(figure: go.Figure, name: str, axis: dict[str, Any]) -> list[str]:
    """The labels plotly writes on the axis ``name`` ("xaxis2"): its tick texts, or the texts its ticks' numbers stand
    for (labelalias), else the category names of the traces on it, else numbers."""
    if axis.get("ticktext"):
        return [plain_text(text) for text in axis["ticktext"]]
    if axis.get("labelalias"):
        return [plain_text(text) for text in axis["labelalias"].values()]
    letter, short_name = name[0], name.replace("axis", "")  # "xaxis2" -> "x", "x2"
    on_it = [trace for trace in figure.data if (getattr(trace, f"{letter}axis", None) or letter) == short_name]
    coordinates = [getattr(trace, letter, None) for trace in on_it]
    categories = [
        plain_text(value) for values in coordinates if values is not None for value in values if isinstance(value, str)
    ]
    return categories or [NUMBER_LABEL]


def label_reach(labels: Iterable[str], size: float, angle: float, x_axis: bool) -> float:
    """How far an axis's tick labels (plain text), slanted by ``angle`` degrees, reach away from it, in px: down from
    an x axis, left from a y axis."""
    sine, cosine = abs(math.sin(math.radians(angle))), abs(math.cos(math.radians(angle)))
    height = size * LINE
    widths = [text_width(label, size) for label in labels] or [0.0]
    if x_axis:
        return max(width * sine + height * cosine for width in widths)
    return max(width * cosine + height * sine for width in widths)


def _angle(axis: dict[str, Any]) -> float:
    angle = axis.get("tickangle")
    return float(angle) if isinstance(angle, (int, float)) else 0.0  # unset or "auto": level


def _size(font: dict[str, Any] | None, base_size: float) -> float:
    return (font or {}).get("size") or base_size


def _room(axis: dict[str, Any], labels: list[str], base_size: float, x_axis: bool) -> float:
    """The margin an axis on the figure's edge needs: its tick labels, then its title."""
    room = TICK_GAP_PX + label_reach(labels, _size(axis.get("tickfont"), base_size), _angle(axis), x_axis)
    title = axis.get("title") or {}
    if title.get("text"):
        room += TITLE_STANDOFF_PX + _size(title.get("font"), base_size) * LINE
    return room + SLACK_PX


def _on_the_edge(layout: dict[str, Any], axis: dict[str, Any], other: str, far_side: str) -> bool:
    """Whether an axis's labels are at the figure's left (y) or bottom (x) edge: on its near side, and anchored to an
    axis (``other``: "x" for a y axis) whose domain starts at the edge."""
    if axis.get("showticklabels") is False or axis.get("side") == far_side or axis.get("overlaying"):
        return False
    anchor = axis.get("anchor") or other
    if anchor == "free":
        return (axis.get("position") or 0.0) <= EDGE
    domain = (layout.get(f"{other}axis{anchor[1:]}") or {}).get("domain") or [0.0, 1.0]
    return domain[0] <= EDGE


def fit_margins(figure: go.Figure) -> go.Figure:
    """Widen ``figure``'s left and bottom margins (in place; returned) to hold the tick labels and titles of the axes
    along its left and bottom edges, and make a figure too short for its y axis title taller. Margins already wider
    stay as they are; right and top are left to the figure (colour bars and legends are placed without a second
    drawing)."""
    layout = figure.layout.to_plotly_json()  # plain dicts: plotly's property access would cost more than the rest
    base_size = _size(layout.get("font"), FONT_SIZE)
    margin = layout.get("margin") or {}
    left, bottom = margin.get("l") or 0, margin.get("b") or 0
    named = {name for name in layout if PANEL_AXIS.fullmatch(name)} | {"xaxis", "yaxis"}  # the first two may be unset
    for name in sorted(named):
        axis = layout.get(name) or {}
        if name[0] == "y" and _on_the_edge(layout, axis, "x", "right"):
            left = max(left, _room(axis, _tick_labels(figure, name, axis), base_size, x_axis=False))
        elif name[0] == "x" and _on_the_edge(layout, axis, "y", "top"):
            labels = _tick_labels(figure, name, axis)
            bottom = max(bottom, _room(axis, labels, base_size, x_axis=True))
            if _angle(axis):  # a slanted first label reaches left of its tick, maybe past the figure's edge
                slant = abs(math.cos(math.radians(_angle(axis))))
                left = max(left, text_width(labels[0], _size(axis.get("tickfont"), base_size)) * slant)
    # plotly_relayout stores the numbers as given (update_layout would validate the margin again)
    changes = {"margin.l": math.ceil(left), "margin.b": math.ceil(bottom)}
    taller = _room_for_the_y_title(layout, base_size, bottom)
    if taller:
        changes["height"] = layout["height"] + taller
    figure.plotly_relayout(changes)
    return figure


def _room_for_the_y_title(layout: dict[str, Any], base_size: float, bottom: float) -> int:
    """How many pixels taller the figure must be for its y axis title, written upwards along the plot and centred on
    it, to stay inside the figure (0: it fits). A heatmap of one or two rows is shorter than "output token (written
    at this step)", and the browser cut the title off at the figure's edges."""
    axis = layout.get("yaxis") or {}
    text = ((axis.get("title") or {}).get("text")) or ""
    height = layout.get("height")
    if not text or not height or (axis.get("domain") or [0.0, 1.0]) != [0.0, 1.0]:
        return 0
    top = (layout.get("margin") or {}).get("t") or 0
    needed = text_width(plain_text(text), _size((axis.get("title") or {}).get("font"), base_size)) + 2 * SLACK_PX
    reach = height - top - bottom + 2 * min(top, bottom)  # the plot's height, and as far again into the nearer margin
    return max(0, math.ceil(needed - reach))
