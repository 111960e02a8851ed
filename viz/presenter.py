"""Presenter mode for figures: every font and the height scaled up, so a projected chart reads from the back row."""

from __future__ import annotations

import plotly.graph_objects as go

from viz.style import FONT_SIZE

PRESENTER_SCALE = 1.6
DEFAULT_HEIGHT = 450  # plotly's height when a figure sets none
SUBPLOT_TITLE_SIZE = 16  # what make_subplots gives its panel titles


def enlarge(figure: go.Figure, scale: float = PRESENTER_SCALE) -> go.Figure:
    """A copy of ``figure`` with its base font, explicit tick, text and panel-title fonts, and height times ``scale``.

    Fonts that inherit the base font (titles, axis titles, colour bars, hovers) grow with it;
    the figure itself is left unchanged, so the page can still export the normal-size one.
    """
    enlarged = go.Figure(figure)
    layout = enlarged.layout
    enlarged.update_layout(
        font_size=(layout.font.size or FONT_SIZE) * scale,
        height=(layout.height or DEFAULT_HEIGHT) * scale,
    )
    if layout.margin.t is not None:
        enlarged.update_layout(margin_t=layout.margin.t * scale)
    for axis in [*enlarged.select_xaxes(), *enlarged.select_yaxes()]:
        if axis.tickfont.size:
            axis.tickfont.size *= scale
    for annotation in layout.annotations:
        annotation.font.size = (annotation.font.size or SUBPLOT_TITLE_SIZE) * scale
    for trace in enlarged.data:
        textfont = getattr(trace, "textfont", None)
        if textfont is not None and textfont.size:
            textfont.size *= scale
    return enlarged
