"""Attention explorer: a Streamlit page over the scratch Transformer's captured attention.

The entry point only: page config, the sidebar and sentence (explorer.page), a class session's strip
(explorer.classes), then what lies under them (explorer.main_area: the translation, the chosen view, the
details). Everything that draws lives in explorer/, the model in model/, the figures in viz/. Streamlit
runs this file as ``__main__``; importing it draws nothing.

Run with ``streamlit run app.py``; set ATTENTION_EXPLORER_CHECKPOINTS to read checkpoint
folders from somewhere other than checkpoints/ next to this file.
"""

from __future__ import annotations

import os

# Sessions run in parallel threads, so each request runs its tensor operations on one CPU thread:
# several intra-op threads per request oversubscribe a classroom server's cores
# (docs/performance.md). Set before torch is first imported; OMP_NUM_THREADS from the
# environment wins. Calling torch.set_num_threads at run time instead would only change the
# calling thread's OpenMP pool and make results differ in the last bits between threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import streamlit as st  # noqa: E402 - after the thread setting above

from explorer import main_area  # noqa: E402
from explorer.admission import admitted  # noqa: E402
from explorer.classes import panel as class_panel  # noqa: E402
from explorer.page import open_page  # noqa: E402
from explorer.state import read_url, write_url  # noqa: E402


def main() -> None:
    st.set_page_config(page_title="Attention explorer", layout="wide")
    st.session_state.full_run = True  # fragments leave the URL to the full run's end
    with admitted():
        read_url()
        ctx = open_page()
        class_panel.draw(ctx)  # a class session's part: follow the teacher, its questions
        if ctx is not None:
            main_area.draw(ctx)
        write_url()
    st.session_state.full_run = False


if __name__ == "__main__":
    main()
