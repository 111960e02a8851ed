"""The class on the page: the sidebar's Class section (start, join, the join code and QR, end, leave), and the live
strip over the view (following the teacher, the question of the moment: asked, answered, revealed)."""

from __future__ import annotations

import logging
from functools import partial

import streamlit as st

from explorer.classes.database import StoreUnavailable
from explorer.classes.export import answers_csv
from explorer.classes.limits import JOINS_PER_SESSION, WRONG_CODES_PER_PROCESS, WRONG_CODES_PER_SESSION
from explorer.classes.session import (
    NOTICE,
    STORE_PROBLEM,
    TEACHER_LINK,
    Membership,
    class_store,
    leave,
    membership,
    say,
    session_key,
    set_membership,
    shared_reads,
    store_problem,
)
from explorer.classes.store import MAX_NICKNAME, ClassError, ClassNotFound, ClassStore, normalise_code
from explorer.classes.strip import base_url, join_link, live_strip, qr_png, spaced
from explorer.context import PageContext
from explorer.state import bind
from viz.classes import class_answers_figure, class_answers_rows
from viz.export import HandoutSection

log = logging.getLogger("explorer.classes")


def draw(ctx: PageContext | None) -> None:
    """The class's part of the page run: enter a class from the link (``class``, ``teacher``), the sidebar's
    section, and while in a class the live strip. The URL keeps the class's code (and a student's seat) so that a
    student's page that reconnects, or is reloaded, is back on its seat (a teacher's takes the teacher link)."""
    bind("class")
    bind("seat")
    enter_from_link()
    sidebar_section()
    notice = st.session_state.pop(NOTICE, None)
    if notice:
        st.warning(notice)
    member = membership()
    if member is not None:
        if ctx is not None and member.teaching:
            add_to_handout(ctx, member)
        live_strip(ctx)
    member = membership()
    st.session_state["class"] = member.code if member else ""
    st.session_state["seat"] = member.seat if member else ""


# --- entering and leaving ------------------------------------------------------------------------------------------


def enter_from_link() -> None:
    """Take the class the URL names: as its teacher with the teacher key (which then leaves the URL: it must not
    reach a projected address bar or a shared link), else as a student."""
    code = normalise_code(st.session_state.get("class", ""))
    member = membership()
    if not code or (member is not None and member.code == code):
        return
    request = st.session_state.get("url_request") or {}
    key = request.get("teacher", "")
    if key:
        enter_as_teacher(code, key)
    else:
        join(code, st.session_state.get("seat", ""))


def enter_as_teacher(code: str, key: str) -> None:
    store = class_store()
    if store is None:
        return
    try:
        teacher = store.is_teacher(code, key)
    except StoreUnavailable as error:
        store_problem(error)
        return
    if not teacher:
        log.warning("refused a teacher link for class %s: no such class, or not its teacher key", code)
        say("That teacher link does not open a class: the class has ended, or the link is not its teacher's.")
        return
    set_membership(Membership(code, teacher_key=key))
    # out of the address bar now, before anything of the class is drawn: the run's URL is written only at its end
    # (explorer.state.write_url), a second or more after the page shows the class on a busy server
    if "teacher" in st.query_params:
        del st.query_params["teacher"]


def join(code: str, seat: str = "") -> None:
    """Join class ``code`` as a student (``seat``: the page's seat before it reconnected), following the teacher."""
    session = session_key()
    if WRONG_CODES_PER_SESSION.full(session) or WRONG_CODES_PER_PROCESS.full("process"):
        say("Too many wrong codes: wait a minute before trying again.")
        return
    if not JOINS_PER_SESSION.allow(session):
        say("Too many joins from this page: wait a minute before trying again.")
        return
    store = class_store()
    if store is None:
        return
    try:
        seat = store.join(code, seat or None)
    except ClassNotFound:
        WRONG_CODES_PER_SESSION.allow(session)
        WRONG_CODES_PER_PROCESS.allow("process")
        say(f"There is no class {code}: it has ended, or the code is mistyped.")
        return
    except StoreUnavailable as error:
        store_problem(error)
        return
    set_membership(Membership(code, seat=seat))


def start_class() -> None:
    store = class_store()
    if store is None:
        return
    try:
        new = store.create_class()
    except StoreUnavailable as error:
        store_problem(error)
        return
    set_membership(Membership(new.code, teacher_key=new.teacher_key))
    st.session_state[TEACHER_LINK] = f"{base_url()}?class={new.code}&teacher={new.teacher_key}"


def join_typed() -> None:
    code = normalise_code(st.session_state.get("class_code_typed", ""))
    if not code:
        say("Type the class's code, as the teacher's screen shows it.")
        return
    join(code)
    st.session_state.class_code_typed = ""


def end_class() -> None:
    member = membership()
    store = class_store()
    if member is None or store is None:
        return
    try:
        store.end(member.code, member.teacher_key)
    except StoreUnavailable as error:
        store_problem(error)
        return
    except ClassError:
        pass  # already gone
    shared_reads().forget(member.code)
    leave()
    say("The class has ended: its questions and answers are deleted.")


# --- the sidebar ---------------------------------------------------------------------------------------------------


def sidebar_section() -> None:
    member = membership()
    with st.sidebar.expander("Class", expanded=member is not None):
        problem = store_problem()
        if problem:
            st.warning(f"Classes are unavailable: {problem}. The page works on its own meanwhile.")
            st.session_state.pop(STORE_PROBLEM, None)
        if member is None:
            st.caption("Students follow your page on their own devices and answer your questions.")
            st.button("Start a class", on_click=start_class, key="class_start")
            st.text_input("Join a class with its code", key="class_code_typed", max_chars=16)
            st.button("Join", on_click=join_typed, key="class_join")
        elif member.teaching:
            teacher_section(member)
        else:
            student_section(member)


def teacher_section(member: Membership) -> None:
    link = join_link(member.code)
    st.markdown(f"You teach class **{spaced(member.code)}**. Students open:")
    st.code(link, language=None, wrap_lines=True)  # wrapped: a scrolling box would need its own keyboard focus
    st.image(qr_png(link), caption="The join link as a QR code", width=200, alt=f"QR code of the join link {link}")
    teacher_link = st.session_state.get(TEACHER_LINK)
    if teacher_link:
        st.markdown("**Your teacher link**, shown this once: keep it to take the class again from another page.")
        st.code(teacher_link, language=None, wrap_lines=True)
        st.button("I have kept it", key="class_link_kept", on_click=lambda: st.session_state.pop(TEACHER_LINK, None))
    store = class_store()
    if store is not None:
        st.download_button(
            "Download answers (CSV)",
            lambda: answers_csv(store.questions(member.code, member.teacher_key)),
            f"class-{member.code}.csv",
            "text/csv",
            on_click="ignore",
            key="class_csv",
        )
    st.button("End the class", on_click=end_class, key="class_end", help="Deletes its questions and answers")


def student_section(member: Membership) -> None:
    st.markdown(f"You are in class **{spaced(member.code)}**.")
    st.text_input("Nickname (optional)", key="class_nickname", max_chars=MAX_NICKNAME, on_change=rename, args=(member,))
    st.button("Leave the class", on_click=leave, key="class_leave")


def rename(member: Membership) -> None:
    store = class_store()
    if store is None:
        return
    try:
        store.rename(member.code, member.seat, st.session_state.get("class_nickname", ""))
    except StoreUnavailable as error:
        store_problem(error)


# --- the handout ---------------------------------------------------------------------------------------------------


def add_to_handout(ctx: PageContext, member: Membership) -> None:
    """The class's questions so far, each with its answers and the model's (once revealed), in the handout: read
    and drawn when the handout is written, not on every page run."""
    store = class_store()
    if store is not None:
        ctx.handout.classroom = partial(class_sections, store, member.code, member.teacher_key)


def class_sections(store: ClassStore, code: str, key: str) -> list[HandoutSection]:
    try:
        questions = store.questions(code, key)
    except (ClassError, StoreUnavailable):
        return []  # ended meanwhile, or unreachable: the handout goes without them
    return [
        HandoutSection(
            f"Class question {number}: {asked.question.prompt}",
            "",
            class_answers_figure(asked.question, counts, revealed=asked.revealed),
            class_answers_rows(asked.question, counts, revealed=asked.revealed),
        )
        for number, (asked, counts) in enumerate(questions, start=1)
    ]
