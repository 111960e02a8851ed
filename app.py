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
from streamlit.delta_generator import DeltaGenerator  # noqa: E402
from streamlit.elements.lib.utils import LabelVisibility  # noqa: E402

from explorer import views  # noqa: E402
from explorer.admission import admitted, in_turn  # noqa: E402
from explorer.context import PageContext  # noqa: E402
from explorer.page import details_section, open_page, translation_section  # noqa: E402
from explorer.state import (  # noqa: E402
    bind,
    presenting,
    read_url,
    view_settings,
    write_url,
    write_url_after_fragment,
)


def surroundings(view: str) -> tuple[bool, bool]:
    """What the page draws around ``view``: whether it shows the sentence's translation and details (not for a view
    about something else), and whether it hides the model's output (the quiz, which it would give away)."""
    return views.VIEWS[view].about_the_sentence, view == "quiz"


def route(ctx: PageContext) -> None:
    """The translation, the chosen view right under it, then the sentence's details (not in presenter mode).

    One view at a time: every figure drawn up front delays the first one.
    """
    choices = views.choices(presenting())
    bind("view", choices[0], choices)
    around = surroundings(st.session_state.view)
    about_the_sentence, quiz = around
    if about_the_sentence:
        translation_section(ctx, hide_output=quiz)
    if ctx.controls is None:
        view_area(ctx, choices, around)
    else:
        # in presenter mode the picker is in the sidebar under the sentence (ctx.controls), where a fragment cannot
        # draw: the main area is the slide
        views.render(view_picker(ctx.controls, choices, "visible"), ctx)
    if not presenting() and about_the_sentence:
        details_section(ctx, hide_output=quiz)


def view_picker(where: DeltaGenerator, choices: list[str], label_visibility: LabelVisibility) -> str:
    """The view picker (URL: view), drawn in ``where``; returns the view chosen."""
    return where.segmented_control(
        "View", choices, format_func=views.label, required=True, key="view", label_visibility=label_visibility
    )


@st.fragment
@in_turn
def view_area(ctx: PageContext, choices: list[str], around: tuple[bool, bool]) -> None:
    """The view picker and the view as a fragment: a switch to a view the page draws the same ``around`` reruns this
    alone, not the sidebar, the translation and the details (docs/performance.md); any other switch reruns the page.
    """
    view = view_picker(st, choices, "collapsed")
    if surroundings(view) != around:
        st.rerun()
    ctx.lesson.view, ctx.lesson.steps = [], []  # the view drawn now replaces the last one's charts in the lesson
    with view_settings():
        views.render(view, ctx)
    write_url_after_fragment()


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
