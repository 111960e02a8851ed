"""Quiz: predict, then reveal. Guesses are kept per sentence, layer and head, and scored by model.analysis.quiz."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.admission import in_turn
from explorer.components import assistive
from explorer.context import PageContext
from explorer.state import AVERAGE_HEADS, bind, presenting, write_url_after_fragment
from explorer.views.steps import move_step
from explorer.widgets import how_to_read, show_figure
from explorer.wording import escape_markdown, pieces_markdown
from model.analysis.quiz import Guess, StepTruth, score_step, step_truth, total_score
from model.heads import head_label, layer_label
from viz.tokens import display_text


def reveal(step: int) -> None:
    """Record the quiz guesses made at ``step``; the page then shows the truth and the score."""
    guess = Guess(where=st.session_state.get(f"quiz_where_{step}"), what=st.session_state.get(f"quiz_what_{step}"))
    st.session_state.quiz["answers"][step] = guess


def restart_quiz() -> None:
    st.session_state.quiz["answers"] = {}
    st.session_state.step = 0
    for key in [key for key in st.session_state if key.startswith(("quiz_where_", "quiz_what_"))]:
        del st.session_state[key]


@st.fragment
@in_turn
def render(ctx: PageContext) -> None:
    trace = ctx.trace
    n_steps = trace.n_steps
    n_layers, n_heads = trace.attention_stack("cross").shape[:2]
    layers, head_choices = list(range(n_layers)), [AVERAGE_HEADS, *range(n_heads)]
    bind("step", options=list(range(n_steps)))
    # the head the first screen opens on, chosen for how clearly it aligns the two sentences: the mean over the heads
    # would mark a linguistically right answer wrong where other heads park their weight elsewhere
    readable_layer, readable_head = ctx.first_head
    bind("quiz_layer", readable_layer, layers)
    bind("quiz_head", readable_head, head_choices)
    how_to_read("quiz")
    left, right = st.columns(2)
    layer = left.selectbox("Decoder layer", layers, format_func=layer_label, key="quiz_layer")
    chosen = right.selectbox(
        "Which attention counts",
        head_choices,
        format_func=lambda h: "mean over the heads" if h == AVERAGE_HEADS else head_label(h),
        key="quiz_head",
    )
    head = None if chosen == AVERAGE_HEADS else chosen
    st.caption(who_decides(layer, head, (readable_layer, readable_head)))
    quiz_key = (ctx.entry.name, trace.source_text, tuple(trace.target_ids), layer, head)
    if st.session_state.get("quiz", {}).get("key") != quiz_key:
        st.session_state.quiz = {"key": quiz_key, "answers": {}}
    answers: dict[int, Guess] = st.session_state.quiz["answers"]
    total = total_score(score_step(step_truth(trace, s, layer, head), guess) for s, guess in answers.items())
    st.markdown(
        f"**Score: {total.right} of {total.asked}** · where it looks {total.where_right}/{total.where_asked}"
        f" · what it writes {total.what_right}/{total.what_asked}"
    )
    step = st.session_state.step
    truth = step_truth(trace, step, layer, head)
    st.markdown(
        f"**Step {step + 1} of {n_steps}.** The decoder has read {pieces_markdown(trace.target_pieces[: step + 1])}"
    )
    if step not in answers:
        ask(truth, step)
    else:
        quiz_result(truth, answers[step], trace.step_probs[step])
        show_answer(ctx, step, layer)
        if step < n_steps - 1:
            st.button(
                "Next step",
                icon=":material/chevron_right:",
                type="primary",
                key="quiz_next",
                on_click=move_step,
                args=(1, n_steps),
                shortcut="Right",
            )
        else:
            st.success(f"That was the last step. Final score: {total.right} of {total.asked}.")
    st.button("Start again", icon=":material/restart_alt:", key="quiz_restart", on_click=restart_quiz)
    write_url_after_fragment()


def who_decides(layer: int, head: int | None, readable: tuple[int, int]) -> str:
    """Which attention decides "where it looks", in words."""
    if head is None:
        return f"Where it looks is decided by the mean of decoder {layer_label(layer)}'s heads."
    why = " (the page's readable head: it aligns the two sentences most clearly)" if (layer, head) == readable else ""
    return f"Where it looks is decided by decoder {layer_label(layer)}, {head_label(head)}{why}."


def ask(truth: StepTruth, step: int) -> None:
    """The two questions of a step, and the button that reveals the answers once one is answered."""
    where = st.pills(
        "Where will it look in the source?",
        list(range(len(truth.words))),
        format_func=lambda i: escape_markdown(truth.words[i]),
        key=f"quiz_where_{step}",
    )
    what = st.pills(
        "Which token will it write?",
        truth.candidates,
        format_func=lambda piece: escape_markdown(display_text(piece)),
        key=f"quiz_what_{step}",
    )
    st.button(
        "Reveal",
        icon=":material/visibility:",
        type="primary",
        key="quiz_reveal",
        on_click=reveal,
        args=(step,),
        disabled=where is None and what is None,
    )


def show_answer(ctx: PageContext, step: int, layer: int) -> None:
    """Where the model looked at this step (words merged) and what it could have written."""
    trace, file_stem = ctx.trace, ctx.file_stem
    rows = trace.attention_stack("cross")[layer, :, step, :]
    source, top = (st.container(), st.container()) if presenting() else st.columns([2, 1])
    with source:
        show_figure(
            viz.step_attention(
                rows,
                trace.source_pieces,
                **{**ctx.token_style.options(), "merge_words": True},
                title=f"Where it looked, {layer_label(layer)}",
            ),
            f"{file_stem}-quiz-step{step}-cross",
        )
    with top:
        answer = viz.decoding_step(trace, step, layer)
        show_figure(
            viz.top_k_figure(
                answer.top_pieces, answer.top_probabilities, answer.chosen_rank, title="What it could write"
            ),
            f"{file_stem}-quiz-step{step}-topk",
        )


def quiz_result(truth: StepTruth, guess: Guess, probability: float) -> None:
    """What the model really did at this step, next to the student's guesses."""
    score = score_step(truth, guess)
    top_word = escape_markdown(truth.words[truth.looked_at])
    looked = f"It looked most at **{top_word}** (weight {truth.weights[truth.looked_at]:.2f})."
    wrong_where = ""
    if guess.where is not None:
        picked = escape_markdown(truth.words[guess.where])
        wrong_where = f"You picked **{picked}** (weight {score.weight_on_guess:.2f}). {looked}"
    where = verdict(score.where_right, looked, f"Right: you picked **{top_word}**. {looked}", wrong_where)
    wrote = f"It wrote **{escape_markdown(display_text(truth.produced))}** (probability {probability:.2f})."
    wrong_what = "" if guess.what is None else f"You picked **{escape_markdown(display_text(guess.what))}**. {wrote}"
    what = verdict(score.what_right, wrote, f"Right: {wrote}", wrong_what)
    assistive.announce("quiz", assistive.plain(where), assistive.plain(what))


def verdict(right: bool | None, truth: str, when_right: str, when_wrong: str) -> str:
    """One question's answer: the truth alone when it was not asked, else green when right and red when wrong (the
    words say which as well: "Right:" or "Wrong:"). Returns what it showed."""
    if right is None:
        st.info(truth)
        return truth
    if right:
        st.success(when_right)
        return when_right
    st.error(f"Wrong: {when_wrong}")
    return f"Wrong: {when_wrong}"
