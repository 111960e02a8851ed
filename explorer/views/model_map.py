"""Presenter mode's map: Figure 1 of the paper for the open model, alone and large, for the projector. A box opens
its view, as the map beside the views does on the page (explorer/components/figure_map.py)."""

from __future__ import annotations

import streamlit as st

from explorer.components import figure_map
from explorer.context import PageContext
from explorer.widgets import how_to_read

MAP_COLUMNS = (2, 1)  # the map's column and the help's: the map fills a slide's height, not its width


def render(ctx: PageContext) -> None:
    map_column, help_column = st.columns(MAP_COLUMNS)
    with map_column:
        figure_map.draw(ctx, "map")
    with help_column:
        how_to_read("figure_map", caveat=False)
