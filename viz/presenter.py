"""Presenter mode for figures: every font and the height scaled up, so a projected chart reads from the back row."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from viz.style import FONT_SIZE

PRESENTER_SCALE = 1.6
DEFAULT_HEIGHT = 450  # plotly's height when a figure sets none
SUBPLOT_TITLE_SIZE = 16  # what make_subplots gives its panel titles
TITLE_TO_FONT = 1.4  # plotly's title font is this times the base font when it sets none


def enlarge(figure: go.Figure, scale: float = PRESENTER_SCALE) -> go.Figure:
    """A copy of ``figure`` with its base font, explicit tick and text fonts, and height times ``scale``.

    Fonts that inherit the base font (titles, axis titles, colour bars, hovers) grow with it; the
    top margin grows only by as much as the title's line, panel titles by the square root of ``scale``. The
    figure itself is left unchanged, so
    the page can still export the normal-size one.
    """
    enlarged = go.Figure(figure)
    layout = enlarged.layout
    enlarged.update_layout(
        font_size=(layout.font.size or FONT_SIZE) * scale,
        height=(layout.height or DEFAULT_HEIGHT) * scale,
    )
    if layout.margin.t is not None:
        # the room above the plot grows by what the title's line grows, not by ``scale``: on a 1280x800
        # projector every pixel above the first row of cells counts
        base = figure.layout.font.size or FONT_SIZE
        enlarged.update_layout(margin_t=layout.margin.t + TITLE_TO_FONT * base * (scale - 1))
    for axis in [*enlarged.select_xaxes(), *enlarged.select_yaxes()]:
        if axis.tickfont.size:
            axis.tickfont.size *= scale
    for annotation in layout.annotations:
        # panel titles share a row with their neighbours: they grow by the square root of the scale
        annotation.font.size = (annotation.font.size or SUBPLOT_TITLE_SIZE) * math.sqrt(scale)
    for trace in enlarged.data:
        textfont = getattr(trace, "textfont", None)
        if textfont is not None and textfont.size:
            textfont.size *= scale
    return enlarged
