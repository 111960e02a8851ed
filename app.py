"""Attention explorer: a Streamlit page over the scratch Transformer's captured attention.

The entry point only: page config, the sidebar and sentence (explorer.page), and the chosen
view (explorer.views). Everything that draws lives in explorer/, the model in model/, the
figures in viz/. Streamlit runs this file as ``__main__``; importing it draws nothing.

Run with ``streamlit run app.py``; set ATTENTION_EXPLORER_CHECKPOINTS to read checkpoint
folders from somewhere other than checkpoints/ next to this file.
"""

from __future__ import annotations

import os

# Sessions run in parallel threads, so each request runs its tensor operations on one CPU thread:
# several intra-op threads per request oversubscribe a classroom server's cores
# (benchmarks/README.md). Set before torch is first imported; OMP_NUM_THREADS from the
# environment wins. Calling torch.set_num_threads at run time instead would only change the
# calling thread's OpenMP pool and make results differ in the last bits between threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import streamlit as st  # noqa: E402 - after the thread setting above

from explorer import views  # noqa: E402
from explorer.admission import admitted  # noqa: E402
from explorer.context import PageContext  # noqa: E402
from explorer.page import details_section, open_page, translation_section  # noqa: E402
from explorer.state import bind, presenting, read_url, write_url  # noqa: E402


def route(ctx: PageContext) -> None:
    """The translation, the chosen view right under it, then the sentence's details (not in presenter mode).

    One view at a time: every figure drawn up front delays the first one. The quiz hides the
    translation and the output probabilities, which would give the answers away.
    """
    choices = views.choices(presenting())
    bind("view", choices[0], choices)
    quiz = st.session_state.view == "quiz"
    about_the_sentence = views.VIEWS[st.session_state.view].about_the_sentence
    if about_the_sentence:
        translation_section(ctx, hide_output=quiz)
    # in presenter mode the picker is in the sidebar under the sentence (ctx.controls): the main area is the slide
    picker = ctx.controls if ctx.controls is not None else st
    view = picker.segmented_control(
        "View",
        choices,
        format_func=views.label,
        required=True,
        key="view",
        label_visibility="collapsed" if ctx.controls is None else "visible",
    )
    views.render(view, ctx)
    if not presenting() and about_the_sentence:
        details_section(ctx, hide_output=quiz)


def main() -> None:
    st.set_page_config(page_title="Attention explorer", layout="wide")
    st.session_state.full_run = True  # fragments leave the URL to the full run's end
    with admitted():
        read_url()
        ctx = open_page()
        if ctx is not None:
            route(ctx)
        write_url()
    st.session_state.full_run = False


if __name__ == "__main__":
    main()
