"""The live strip over the view while a page is in a class: it looks at the class every FOLLOW_POLL_S, takes a
student's page where the teacher went, and draws the question of the moment: the teacher asks, sees the count and
reveals; a student answers with one press and sees the class's answers beside the model's once revealed."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable

import segno
import streamlit as st

from explorer.classes.database import StoreUnavailable
from explorer.classes.limits import ANSWERS_PER_SESSION, ASKS_PER_SESSION, Throttle
from explorer.classes.session import (
    FOLLOW_POLL_S,
    NOTICE,
    Membership,
    class_store,
    class_watch,
    leave,
    membership,
    say,
    session_key,
    shared_reads,
    store_problem,
)
from explorer.classes.store import AskedQuestion, ClassError, ClassInfo, ClassNotFound, ClassStore
from explorer.classes.watch import ClassWatch, can_push, mark_of
from explorer.context import PageContext
from explorer.state import AVERAGE_HEADS, presenting
from explorer.widgets import show_figure
from explorer.wording import escape_markdown
from model.analysis.questions import ClassQuestion, alignment_head, looks_at, next_word
from viz.classes import choice_text, class_answers_figure

# the views a teacher can ask about, and what; every other view has no class question
VIEW_QUESTIONS = {
    "steps": ("next_word", "looks_at"),
    "quiz": ("looks_at", "next_word"),
    "cross": ("alignment_head",),
}
QUESTION_NAMES = {
    "looks_at": "Which source word does the model read?",
    "next_word": "What will the model write next?",
    "alignment_head": "Which head is an alignment?",
}
ANSWERS = "class_answers"  # this page's answers, by question id
TEACHER_LOOK_S = 1.0  # the teacher's strip: the count of answers as they come


def base_url() -> str:
    """The page's address as the browser reached it (through a proxy too), without its parameters."""
    return (st.context.url or "").rstrip("/") + "/"


def join_link(code: str) -> str:
    return f"{base_url()}?class={code}"


def spaced(code: str) -> str:
    """A code as the projector shows it: in two halves, easier to read out and type."""
    half = (len(code) + 1) // 2
    return f"{code[:half]} {code[half:]}"


@functools.lru_cache(maxsize=64)  # the teacher's strip draws it every second
def qr_png(link: str) -> bytes:
    image = io.BytesIO()
    segno.make(link, error="m").save(image, kind="png", scale=8, border=2)
    return image.getvalue()


def live_strip(ctx: PageContext | None) -> None:
    """The strip, a fragment: on a teacher's page it looks every TEACHER_LOOK_S (the live count); a student's page is
    woken by this process's watch (explorer.classes.watch) when the class changes, or, where nothing can wake it,
    looks every FOLLOW_POLL_S."""
    member = membership()
    if member is None:
        return
    watch = class_watch() if can_push() else None
    every = TEACHER_LOOK_S if member.teaching else None if watch is not None else FOLLOW_POLL_S
    st.fragment(_strip, run_every=every)(ctx, watch)


def _strip(ctx: PageContext | None, watch: ClassWatch | None) -> None:
    member = membership()
    store = class_store()
    if member is None or store is None:
        return
    try:
        info = shared_reads().read(store, member.code)
    except ClassNotFound:
        leave()
        say(f"Class {member.code} has ended.")
        st.rerun(scope="app")
    except StoreUnavailable as error:
        st.warning(f"The class cannot be reached just now ({error}); the page keeps working on its own.")
        return
    if not member.teaching and member.following and info.version > member.applied_version:
        st.rerun(scope="app")  # the page run opens the teacher's state (session.take_follow_request)
    with st.container(border=True, key="class_strip"):
        notice = st.session_state.pop(NOTICE, None)  # from a press in the strip (an answer refused, a throttle)
        if notice:
            st.warning(notice)
        if member.teaching:
            teacher_strip(ctx, store, member, info)
        else:
            student_strip(store, member, info)
    if watch is not None and not member.teaching:
        drawn = (member.applied_version if member.following else None, *mark_of(info, following=False)[1:])
        watch.drew(session_key(), member.code, member.following, drawn)


def teacher_strip(ctx: PageContext | None, store: ClassStore, member: Membership, info: ClassInfo) -> None:
    """One row: the class, its join code on demand, and the question controls (ask; or the count, reveal, close);
    under it the question asked and, revealed, its chart. One row, so that a projected slide keeps its view in the
    first screen."""
    asked = info.question
    with st.container(horizontal=True, vertical_alignment="center", key="class_teacher_row"):
        students = f"{info.seats} student{'s' if info.seats != 1 else ''}"
        where = "" if presenting() else f" · join at `{join_link(member.code)}`"
        st.markdown(f"Class **{spaced(member.code)}** · {students}{where}")
        with st.popover("Join code"):
            link = join_link(member.code)
            st.markdown(f"# {spaced(member.code)}")
            st.image(qr_png(link), width=320, alt=f"QR code of the join link {link}")
            st.code(link, language=None, wrap_lines=True)
        if asked is None:
            ask_controls(ctx)
        else:
            st.markdown(f"{sum(info.counts)} of {info.seats} answered")
            if not asked.revealed:
                st.button("Reveal", key="class_reveal", on_click=teacher_action, args=("reveal", asked.id))
            st.button("Close the question", key="class_close", on_click=teacher_action, args=("close", asked.id))
    if asked is not None:
        st.markdown(f"**Asked:** {escape_markdown(asked.question.prompt)}")
        if asked.revealed:
            answers_chart(asked, info.counts)


def teacher_action(action: str, question_id: str) -> None:
    if action == "reveal":
        act_on_class(lambda store, member: store.reveal(member.code, member.teacher_key, question_id))
    else:
        act_on_class(lambda store, member: store.close_question(member.code, member.teacher_key))


def act_on_class(act: Callable[[ClassStore, Membership], object], throttle: Throttle | None = None) -> bool:
    """Do a press's ``act`` on this page's class in the store: False, with the reason said on the page, when the page
    is in no class, the store cannot be reached, ``throttle`` refuses this session, or the store refuses the act.
    The class's shared read is dropped after, so the page's next look reads what the act changed."""
    member, store = membership(), class_store()
    if member is None or store is None:
        return False
    if throttle is not None and not throttle.allow(session_key()):
        say("Too many of those in a minute: wait a moment.")
        return False
    try:
        act(store, member)
    except ValueError as error:
        say(f"That cannot be done here: {error}")
        return False
    except (ClassError, StoreUnavailable) as error:
        say(str(error))
        return False
    finally:
        shared_reads().forget(member.code)
    return True


def ask_controls(ctx: PageContext | None) -> None:
    view = st.session_state.get("view", "")
    kinds = VIEW_QUESTIONS.get(view, ())
    if ctx is None or not kinds:
        st.caption("No class question on this view (the decoding steps, the quiz and cross-attention have some).")
        return
    kind = st.selectbox(
        "Ask the class", kinds, format_func=QUESTION_NAMES.get, key="class_question_kind", label_visibility="collapsed"
    )
    st.button("Ask", key="class_ask", on_click=ask, args=(ctx, kind))


def ask(ctx: PageContext, kind: str) -> None:
    view = st.session_state.get("view", "")
    act_on_class(
        lambda store, member: store.ask(
            member.code, member.teacher_key, question_on_view(ctx, view, kind), member.published or {}
        ),
        ASKS_PER_SESSION,
    )


def question_on_view(ctx: PageContext, view: str, kind: str) -> ClassQuestion:
    """The question of ``kind`` about what ``view`` shows now (its step, layer and head); a ValueError when the
    view has no such question."""
    if kind not in VIEW_QUESTIONS.get(view, ()):
        raise ValueError(f"the view {view!r} has no question {kind!r}")
    state = st.session_state
    trace = ctx.trace
    if kind == "alignment_head":
        return alignment_head(trace, int(state.get("layer", 0)))
    step = int(state.get("step", 0))
    if kind == "next_word":
        return next_word(trace, step)
    if view == "quiz":
        head = state.get("quiz_head", AVERAGE_HEADS)
        return looks_at(trace, step, int(state.get("quiz_layer", 0)), None if head == AVERAGE_HEADS else int(head))
    return looks_at(trace, step, int(state.get("step_layer", ctx.config.n_decoder_layers - 1)))


def student_strip(store: ClassStore, member: Membership, info: ClassInfo) -> None:
    with st.container(horizontal=True, vertical_alignment="center"):
        if member.following:
            st.markdown(f"Class **{spaced(member.code)}** · following the teacher's page")
            st.button("Explore on my own", key="class_unfollow", on_click=set_following, args=(False,))
        else:
            st.markdown(f"Class **{spaced(member.code)}** · exploring on your own")
            st.button("Follow again", key="class_follow", on_click=set_following, args=(True,))
    asked = info.question
    if asked is None:
        return
    st.markdown(f"**Question:** {escape_markdown(asked.question.prompt)}")
    mine = st.session_state.setdefault(ANSWERS, {})  # question id -> this seat's choice, None: not answered
    if asked.id not in mine:  # once per question: this seat may have answered before the page reconnected
        try:
            mine[asked.id] = store.answered(asked.id, member.seat)
        except StoreUnavailable as error:
            store_problem(error)
    if asked.revealed:
        answers_chart(asked, info.counts)
        return
    if mine.get(asked.id) is not None:
        choice = choice_text(asked.question, mine[asked.id])
        st.markdown(f"Your answer: **{escape_markdown(choice)}**. The teacher reveals the model's answer.")
        return
    with st.container(horizontal=True, key="class_choices"):
        for index in range(len(asked.question.choices)):
            label = escape_markdown(choice_text(asked.question, index))  # a button's label is Markdown
            st.button(label, key=f"class_choice_{asked.id}_{index}", on_click=answer, args=(asked.id, index))


def set_following(following: bool) -> None:
    member = membership()
    if member is not None:
        member.following = following
        if following:
            member.applied_version = -1  # go to the teacher's page at the next look


def answer(question_id: str, choice: int) -> None:
    if act_on_class(
        lambda store, member: store.answer(member.code, member.seat, question_id, choice), ANSWERS_PER_SESSION
    ):
        st.session_state.setdefault(ANSWERS, {})[question_id] = choice


def answers_chart(asked: AskedQuestion, counts: tuple[int, ...]) -> None:
    figure = class_answers_figure(asked.question, counts, revealed=asked.revealed)
    show_figure(figure, f"class-question-{asked.id}")
