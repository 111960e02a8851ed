"""Every chart's toolbar downloads SVG too: svg_download.js (beside this file) adds the button in the browser.

plotly's config gives its camera button one image format (PNG here, viz.chart_config), and a
config cannot carry the JavaScript a second button needs; this component, mounted once per page,
adds it to every chart on the page, including charts drawn after it.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

SVG_DOWNLOAD = st.components.v2.component(
    "attention_explorer.svg_download",
    js=(Path(__file__).parent / "svg_download.js").read_text(encoding="utf-8"),
    isolate_styles=False,
)


def mount() -> None:
    """Once per page run, anywhere: the component draws nothing of its own."""
    SVG_DOWNLOAD(key="svg_download")
