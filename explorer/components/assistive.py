"""Three small aids for keyboard and screen-reader users and for anyone who asks for less motion (st.components.v2,
their .js and .css beside this file).

- ``skip_link``: "Skip to sentence", the page's first link (after Streamlit's own "Skip to main content"): Enter
  puts the cursor in the sentence box, past the sidebar's controls. Shown only while it has the focus.
- ``announce``: what a screen reader should say after a run (the new translation, a notice, the quiz's verdict),
  written into a polite live region (one per ``name``) that stays in the document across reruns, so that only a
  change is spoken. Its element is drawn where it is called and hidden (``HIDDEN_CSS``): a fragment may call it on
  its own reruns, and a fragment can only write inside itself (Streamlit refuses a write to the sidebar from a
  fragment that did not write there on the last whole-page run).
- ``reduce_motion``: when the system asks for less motion (``prefers-reduced-motion: reduce``), sections open and
  fold, switches flip and menus open without moving (WCAG 2.3.3); with no such setting the page is unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent
SENTENCE_BOX = "input[aria-label='Source sentence']"  # the text box explorer.page.source_section draws

SKIP_LINK = st.components.v2.component(
    "attention_explorer.skip_link",
    html='<a class="skip-to-sentence" href="#">Skip to sentence</a>',
    css=(HERE / "skip_link.css").read_text(encoding="utf-8"),
    js=(HERE / "skip_link.js").read_text(encoding="utf-8"),
    isolate_styles=False,
)
ANNOUNCER_KEY = "announcer-"
# The announcer's element draws nothing but would take a row's gap wherever it is: its container is hidden (the live
# region it writes lives outside Streamlit's elements). A constant: no user text ever reaches st.html.
HIDDEN_CSS = f"""[class*="st-key-{ANNOUNCER_KEY}"] {{ display: none; }}"""
ANNOUNCER = st.components.v2.component(
    "attention_explorer.announcer",
    js=(HERE / "announcer.js").read_text(encoding="utf-8"),
    isolate_styles=False,
)


REDUCED_MOTION = st.components.v2.component(
    "attention_explorer.reduced_motion",
    css=(HERE / "reduced_motion.css").read_text(encoding="utf-8"),
    js=(HERE / "reduced_motion.js").read_text(encoding="utf-8"),
    isolate_styles=False,
)


def skip_link() -> None:
    """Draw the link; call it before anything else in the sidebar so that it comes first in the tab order."""
    with st.sidebar:
        SKIP_LINK(data={"target": SENTENCE_BOX}, key="skip_link")


def reduce_motion() -> None:
    """Draw nothing; call it on every whole-page run, so that every view honours the system's setting."""
    REDUCED_MOTION(key="reduced_motion")


def announce(name: str, *messages: str) -> None:
    """Have screen readers say ``messages`` (empty ones left out) in the live region ``name``; call it once per run
    and name, after the messages are known. The same text on the next run is not said again."""
    text = " ".join(message for message in messages if message)
    ANNOUNCER(data={"name": name, "text": text}, key=f"{ANNOUNCER_KEY}{name}")


def plain(markdown: str) -> str:
    """What a screen reader should say for a line of our Markdown: bold marks dropped, escaped characters as typed."""
    return re.sub(r"\\(.)", r"\1", re.sub(r"(?<!\\)\*\*", "", markdown))
