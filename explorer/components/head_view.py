"""The interactive head view: an st.components.v2 component drawn by head_view.js (beside this file).

The browser draws the lines (viz.head_view_data is what it gets), so pointing at a token costs
the server nothing. Which query token is kept and which heads are on are page settings
(``head_view_query``, ``head_view_heads``: in the URL, see explorer.state): a click or a chip
sends a trigger, its callback copies it into the setting, and the rerun draws from the setting.
The handout export gets the same choice as a plotly figure (viz.head_view).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

import viz
from explorer.state import ALL_QUERIES, bind, presenting
from explorer.wording import HEAD_VIEW_HINT
from viz.presenter import PRESENTER_SCALE

HERE = Path(__file__).parent
EVENTS_KEY = "head_view_events"  # the component's own key: its triggers, read by the callbacks below
HEAD_VIEW = st.components.v2.component(
    "attention_explorer.head_view",
    html='<div class="hv-root"></div>',
    css=(HERE / "head_view.css").read_text(encoding="utf-8"),
    js=(HERE / "head_view.js").read_text(encoding="utf-8"),
    isolate_styles=False,  # plain DOM: the page's font, and browser tests find its parts directly
)


def take_query() -> None:
    st.session_state.head_view_query = st.session_state[EVENTS_KEY].query


def take_heads() -> None:
    st.session_state.head_view_heads = list(st.session_state[EVENTS_KEY].heads)


def follow_the_picker(default_head: int) -> None:
    """Until a chip is clicked, the heads drawn follow the head picked beside the view: a setting still at the
    default of the last run (bind records it) moves to the new one."""
    last_default = st.session_state.url_defaults.get("head_view_heads")
    if last_default is not None and st.session_state.get("head_view_heads") == last_default:
        st.session_state.head_view_heads = [default_head]


def draw(
    weights: np.ndarray,
    query_pieces: list[str],
    key_pieces: list[str],
    *,
    title: str,
    filename: str,
    default_head: int,
    tokens: dict[str, bool],
) -> tuple[int, list[int]]:
    """Draw one layer's (heads, queries, keys) ``weights`` as lines; returns the kept query (or ALL_QUERIES) and the
    heads drawn, for the handout export.

    The view opens on ``default_head`` alone (and follows it until a chip is clicked); ``tokens`` are the display's
    merge/special options.
    """
    data: dict[str, Any] = viz.head_view_data(weights, query_pieces, key_pieces, **tokens)
    follow_the_picker(default_head)
    bind("head_view_query", options=[ALL_QUERIES, *range(len(data["queries"]))])
    heads = bind("head_view_heads", [default_head], list(range(len(data["colours"]))))
    query = st.session_state.head_view_query
    HEAD_VIEW(
        data={
            **data,
            "title": title,
            "hint": HEAD_VIEW_HINT,
            "query": query,
            "heads": heads,
            "scale": PRESENTER_SCALE if presenting() else 1.0,
            "filename": viz.download_name(filename),
        },
        key=EVENTS_KEY,
        on_query_change=take_query,
        on_heads_change=take_heads,
    )
    return query, heads
