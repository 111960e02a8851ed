"""The main area under the sentence: the translation, the view picker with the chosen view (one fragment), and the
sentence's details."""

from __future__ import annotations

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.elements.lib.utils import LabelVisibility

from explorer import views
from explorer.admission import in_turn
from explorer.components import figure_map
from explorer.context import PageContext
from explorer.page import details_section, translation_section
from explorer.state import bind, presenting, view_settings, write_url_after_fragment

VIEW_KEY = "view_area"  # the chosen view's container: its class st-key-view_area tells the view from its surroundings
MAP_KEY = "figure_map"  # the map's container (class st-key-figure_map)
MAP_AND_VIEW = (1, 3.4)  # the widths of the map's column and the view's


def surroundings(view: str) -> tuple[bool, bool]:
    """What the page draws around ``view``: whether it shows the sentence's translation and details (not for a view
    about something else), and whether it hides the model's output (the quiz, which it would give away)."""
    return views.VIEWS[view].about_the_sentence, view == "quiz"


def draw(ctx: PageContext) -> None:
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
        view = view_picker(ctx.controls, choices, "visible")
        map_and_view(ctx, view)
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
    ctx.handout.view, ctx.handout.steps = [], []  # the view drawn now replaces the last one's charts in the handout
    with view_settings():
        map_and_view(ctx, view)
    write_url_after_fragment()


def map_and_view(ctx: PageContext, view: str) -> None:
    """The view, with the map of the model (Figure 1) beside it when the view is one of its boxes: the quiz, the
    experiments, the word sources and the Train view take the whole width, and so does every view in presenter mode
    (where the map is a view of its own, drawn large)."""
    if presenting() or not views.VIEWS[view].on_the_map:
        with st.container(key=VIEW_KEY):
            views.render(view, ctx)
        return
    map_column, view_column = st.columns(MAP_AND_VIEW, gap="small")
    with view_column, st.container(key=VIEW_KEY):
        views.render(view, ctx)
    with map_column, st.container(key=MAP_KEY):  # after the view, which binds the layer and stack it marks
        figure_map.draw(ctx, view)
