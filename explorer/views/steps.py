"""Step through decoding: what the decoder has read, what it predicts, and where it looks at that step."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.admission import in_turn
from explorer.context import PageContext
from explorer.copy import pieces_markdown
from explorer.state import bind, presenting, write_url_after_fragment
from explorer.widgets import how_to_read, show_figure


def move_step(delta: int, n_steps: int) -> None:
    st.session_state.step = min(max(st.session_state.get("step", 0) + delta, 0), n_steps - 1)


def go_to_step(step: int) -> None:
    st.session_state.step = step


def step_buttons(n_steps: int) -> list:
    """First / Previous / Next / Last with their keyboard shortcuts; returns the row's columns.

    Presenter mode leaves one more column in the row, for the layer picker, and no slider.
    """
    buttons = [
        ("First", ":material/first_page:", "step_first", "Home", go_to_step, (0,)),
        ("Previous", ":material/chevron_left:", "step_previous", "Left", move_step, (-1, n_steps)),
        ("Next", ":material/chevron_right:", "step_next", "Right", move_step, (1, n_steps)),
        ("Last", ":material/last_page:", "step_last", "End", go_to_step, (n_steps - 1,)),
    ]
    columns = st.columns(len(buttons) + presenting())
    for column, (label, icon, key, shortcut, callback, args) in zip(columns, buttons, strict=False):
        column.button(label, icon=icon, key=key, on_click=callback, args=args, shortcut=shortcut, width="stretch")
    if n_steps > 1 and not presenting():
        st.slider("Output step", 0, n_steps - 1, key="step")
    return columns


@st.fragment
@in_turn
def render(ctx: PageContext) -> None:
    """Step navigation reruns only this fragment: the rest of the page and the model stay put."""
    trace, display, file_stem = ctx.trace, ctx.display, ctx.file_stem
    n_steps = trace.n_steps
    bind("step", options=list(range(n_steps)))
    columns = step_buttons(n_steps)
    layers = list(range(trace.attention_stack("cross").shape[0]))
    bind("step_layer", layers[-1], layers)
    layer = (columns[-1] if presenting() else st).selectbox(
        "Decoder layer",
        layers,
        format_func=lambda n: f"layer {n}",
        key="step_layer",
        label_visibility="collapsed" if presenting() else "visible",
    )
    step = viz.decoding_step(trace, st.session_state.step, layer)
    explanation = how_to_read("step")
    st.markdown(f"**Step {step.step + 1} of {n_steps}.** Decoder input so far: {pieces_markdown(step.decoder_input)}")
    st.markdown(
        f"Predicted next token: {pieces_markdown([step.predicted])} with probability {step.predicted_probability:.3f}"
    )
    lesson = ctx.lesson.steps = []  # this fragment's charts replace the ones of its previous run
    # side by side on a normal page; one under the other, at full width, in presenter mode
    top, source = (st.container(), st.container()) if presenting() else st.columns([1, 2])
    with top:
        show_figure(
            viz.top_k_figure(
                step.top_pieces,
                step.top_probabilities,
                step.chosen_rank,
                title=f"Step {step.step + 1}: most likely next tokens",
            ),
            f"{file_stem}-step{step.step}-topk",
            lesson,
            explanation,
        )
    with source:
        show_figure(
            viz.step_attention(
                step.cross_rows,
                trace.source_pieces,
                **display.options(),
                title=f"Cross-attention at this step – decoder layer {layer}",
            ),
            f"{file_stem}-step{step.step}-cross",
            lesson,
        )
    show_figure(
        viz.step_attention(
            step.self_rows,
            step.decoder_input,
            **display.options(),
            title=f"Self-attention at this step – decoder layer {layer}",
        ),
        f"{file_stem}-step{step.step}-self",
        lesson,
    )
    write_url_after_fragment()
