"""Rebuild the page after a lost connection (st.components.v2; reconnect.js beside this file).

A page whose server restarted, or whose replica died behind nginx (docs/deploy.md), reconnects to a new session
that Streamlit leaves unrun when the page's last run held fragments; the component asks for one whole-page run on
every reconnection, so the page comes back from its URL without a reload and its fragments answer again.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

RECONNECT = st.components.v2.component(
    "attention_explorer.reconnect",
    js=(Path(__file__).parent / "reconnect.js").read_text(encoding="utf-8"),
    isolate_styles=False,
)


def mount() -> None:
    """Draw nothing, watch the connection; call it on every whole-page run, outside any fragment. The page's root
    element gets the drawing session's id (``data-explorer-session``)."""
    context = get_script_run_ctx()
    with st.sidebar:
        RECONNECT(data={"session": context.session_id if context else ""}, key="reconnect")
