"""Step through decoding: what the decoder has read, what it predicts, and where it looks at that step."""

from __future__ import annotations

from functools import partial

import streamlit as st

import viz
from explorer.admission import in_turn
from explorer.compute import compute_draws, compute_samples
from explorer.context import PageContext
from explorer.explanations import EXPLANATIONS
from explorer.state import SAMPLE_DRAWS_RANGE, bind, presenting, write_url_after_fragment
from explorer.widgets import how_to_read, show_figure
from explorer.wording import pieces_markdown
from model.heads import layer_label
from viz.style import ROW_HEIGHT

# Presenter mode's step cross-attention rows, in px before viz.enlarge (PRESENTER_SCALE): low enough that a
# 1280x800 projector shows every head and the source pieces under them
PRESENTER_ROW_HEIGHT = 14
# The step figure's panels: the bars, then what the step reads in the source and in its own output so far
STEP_PANELS = ("Next token", "Cross-attention: the source", "Self-attention: the output so far")


def move_step(delta: int, n_steps: int) -> None:
    st.session_state.step = min(max(st.session_state.get("step", 0) + delta, 0), n_steps - 1)


def go_to_step(step: int) -> None:
    st.session_state.step = step


def step_buttons(n_steps: int) -> None:
    """First / Previous / Next / Last with their keyboard shortcuts."""
    buttons = [
        ("First", ":material/first_page:", "step_first", "Home", go_to_step, (0,)),
        ("Previous", ":material/chevron_left:", "step_previous", "Left", move_step, (-1, n_steps)),
        ("Next", ":material/chevron_right:", "step_next", "Right", move_step, (1, n_steps)),
        ("Last", ":material/last_page:", "step_last", "End", go_to_step, (n_steps - 1,)),
    ]
    for column, (label, icon, key, shortcut, callback, args) in zip(st.columns(len(buttons)), buttons, strict=True):
        column.button(label, icon=icon, key=key, on_click=callback, args=args, shortcut=shortcut, width="stretch")


@st.fragment
@in_turn
def render(ctx: PageContext) -> None:
    """Step navigation reruns only this fragment: the rest of the page and the model stay put."""
    trace, token_style, file_stem = ctx.trace, ctx.token_style, ctx.file_stem
    n_steps = trace.n_steps
    bind("step", options=list(range(n_steps)))
    step_buttons(n_steps)
    layers = list(range(trace.attention_stack("cross").shape[0]))
    bind("step_layer", layers[-1], layers)
    if presenting():
        # the step in one line beside the layer, the attention before the bars and the help below them: the step's
        # cross-attention is on the first screen of a 1280x800 projector
        step_line, layer_column = st.columns([3, 1], vertical_alignment="center")
        figures, help_area = st.container(), st.container()
    else:
        slider_column, layer_column = st.columns([3, 1], vertical_alignment="bottom")
        if n_steps > 1:  # presenter mode has none: the arrow keys and the buttons step
            # counted from 1, as the step line under it says "Step 1 of N"
            slider_column.select_slider(
                "Output step", list(range(n_steps)), format_func=lambda step: str(step + 1), key="step"
            )
        help_area, step_line, figures = (st.container() for _ in range(3))
    layer = layer_column.selectbox(
        "Decoder layer",
        layers,
        format_func=layer_label,
        key="step_layer",
        label_visibility="collapsed" if presenting() else "visible",
    )
    step = viz.decoding_step(trace, st.session_state.step, layer)
    with help_area:
        explanation = how_to_read("step")
    step_line.markdown(
        f"**Step {step.step + 1} of {n_steps}.** Decoder input so far: {pieces_markdown(step.decoder_input)}"
        + (" → " if presenting() else "\n\nPredicted next token: ")
        + f"{pieces_markdown([step.predicted])} with probability {step.predicted_probability:.3f}"
        + (FORCED_LANGUAGE if trace.settings.target_language is not None and step.step == 0 else "")
    )
    handout = ctx.handout.steps = []  # this fragment's chart replaces the one of its previous run
    figure = viz.decoding_step_figure(
        step,
        trace.source_pieces,
        **token_style.options(),
        title=f"Step {step.step + 1}: next token and attention, decoder {layer_label(layer)}",
        panel_titles=STEP_PANELS,
        attention_first=presenting(),
        cross_row_height=PRESENTER_ROW_HEIGHT if presenting() else ROW_HEIGHT,
    )
    with figures:
        show_figure(figure, f"{file_stem}-step{step.step}", handout, explanation)
        if trace.settings.sampling is not None:
            sampled_step(ctx, step.step, handout)
    write_url_after_fragment()


# the first step of a many-language model's output: the target language's code, which decoding writes whatever the
# model predicts
FORCED_LANGUAGE = (
    " — **forced, not chosen**: the target language's code, which the model is made to write first (as Hugging "
    "Face's generate does with forced_bos_token_id); its probability is what the model itself gave it."
)


def sampled_step(ctx: PageContext, step: int, handout: list) -> None:
    """How this step's token was drawn: the model's candidates before and after the temperature and in the draw."""
    trace = ctx.trace
    draws = compute_draws(ctx.trace_key)
    draw = next((found for found in draws if found.step == step), None)
    if draw is None:  # a forced start (what-if), or a </s> forced at the output's limit
        st.caption("This token was not drawn: it was forced (a what-if's choice, or the end at the output's limit).")
        return
    kept = f"{draw.kept_count} token{'s' if draw.kept_count != 1 else ''}"
    st.markdown(
        f"**Drawn:** {pieces_markdown([trace.target_pieces[step + 1]])}, the model's choice number {draw.rank}, "
        f"with probability {draw.drawn_prob:.3f} in the draw. Top-k and top-p left {kept} in the draw, "
        f"{draw.kept_mass:.0%} of the probability after the temperature."
    )
    figure = viz.draw_figure(draw, title=f"Step {step + 1}: how the token was drawn")
    show_figure(figure, f"{ctx.file_stem}-step{step}-draw", handout, EXPLANATIONS["sampled_step"])
    if not presenting():
        sample_again_section(ctx)


def open_sample(table_key: str, translations: list[str]) -> None:
    """A row picked in the samples' table: that translation opens in every view, as a typed target would."""
    rows = st.session_state[table_key].selection.rows
    if rows:
        st.session_state.teacher_forcing = True
        st.session_state.target = translations[rows[0]]


def sample_again_section(ctx: PageContext) -> None:
    """The sentence sampled N times at once: how often each translation came and how likely the model finds it,
    beside greedy's and the beam's. A row opens its translation in the views."""
    st.markdown("**Sample again**")
    bind("sample_draws")
    count_column, button_column = st.columns([1, 2], vertical_alignment="bottom")
    draws = count_column.number_input("Draws", *SAMPLE_DRAWS_RANGE, step=1, key="sample_draws")
    if button_column.button("Sample again", icon=":material/casino:", key="sample_again"):
        st.session_state.samples_for = (ctx.trace_key, draws)
    if st.session_state.get("samples_for") != (ctx.trace_key, draws):
        st.caption(EXPLANATIONS["sample_again"])
        return
    table = compute_samples(ctx.trace_key, draws)
    if table.notice:
        st.warning(table.notice)
    frame = viz.samples_frame(table)
    st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        key="samples_table",
        on_select=partial(open_sample, "samples_table", list(frame["translation"])),
        selection_mode="single-row",
        column_config={
            "translation": st.column_config.TextColumn(width="large"),
            "found by": st.column_config.TextColumn(width="small"),
            "times drawn": st.column_config.NumberColumn(width="small"),
            "log-probability": st.column_config.NumberColumn(format="%.2f", width="small"),
        },
    )
    st.caption("Pick a row to open that translation in every view (as a typed target).")
