"""This page's place in a class: teacher or student, following or not, and the class store it reads and writes.

The teacher's page publishes its state (the URL's settings) each time its URL is written (``publish``, called by
explorer.state.write_url). A following student's page opens the teacher's state at the start of each of its runs
when the teacher has moved (``take_follow_request``, read by explorer.state.read_url as a link being opened); the
runs come from this process's watch (explorer.classes.watch), or, where it cannot wake a page, from the strip
looking every FOLLOW_POLL_S. Reads of a class are shared by every session of a server process for INFO_FRESH_S.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorer.classes.database import StoreUnavailable
from explorer.classes.store import ClassError, ClassInfo, ClassStore, open_store, store_url
from explorer.classes.watch import ClassWatch

FOLLOW_POLL_S = 0.5
INFO_FRESH_S = 0.25
PURGE_EVERY_S = 300.0  # an expired class is not found at once, and deleted within this
# settings that stay each page's own: the class itself, a student's seat, the projector's text size, the device
NOT_FOLLOWED = ("class", "seat", "presenter", "device")
MEMBERSHIP = "class_membership"
STORE_PROBLEM = "class_store_problem"
NOTICE = "class_notice"  # a message for this page about the class (a code that did not work, a class that ended)
TEACHER_LINK = "class_teacher_link"  # the teacher link, shown once after the class is made


@dataclass
class Membership:
    """A page in a class: the teacher's (``teacher_key`` set) or a student's (``seat`` set)."""

    code: str
    seat: str = ""
    teacher_key: str = ""
    following: bool = True
    applied_version: int = 0  # the teacher's last move this student's page went to
    published: dict[str, str] | None = None  # the teacher page's state as last published

    @property
    def teaching(self) -> bool:
        return bool(self.teacher_key)


def session_key() -> str:
    """This browser session's id (the throttles' key)."""
    context = get_script_run_ctx()
    return context.session_id if context is not None else "no-session"


@st.cache_resource(show_spinner=False)
def _store(url: str) -> ClassStore:
    """The store, opened once per process, and a thread that deletes the classes past their time every PURGE_EVERY_S
    (each replica's: deleting is idempotent)."""
    store = open_store(url)

    def purge() -> None:
        while True:
            try:
                store.purge_expired()
            except StoreUnavailable:
                pass  # tried again next time; the pages say what they see
            time.sleep(PURGE_EVERY_S)

    threading.Thread(target=purge, name="class-purge", daemon=True).start()
    return store


def class_store() -> ClassStore | None:
    """The server's class store (one per store URL and process), or None (the reason kept for the page to show)
    when it cannot be opened; it is tried again on the next look."""
    try:
        store = _store(store_url())
    except (StoreUnavailable, ValueError) as error:
        store_problem(error)
        return None
    return store


def store_problem(error: Exception | None = None) -> str | None:
    """Record a store error for the page to show; return the last one recorded (None: none this run)."""
    if error is not None:
        st.session_state[STORE_PROBLEM] = str(error)
    return st.session_state.get(STORE_PROBLEM)


def membership() -> Membership | None:
    return st.session_state.get(MEMBERSHIP)


def set_membership(member: Membership | None) -> None:
    if member is None:
        st.session_state.pop(MEMBERSHIP, None)
    else:
        st.session_state[MEMBERSHIP] = member


def say(message: str) -> None:
    """A message for this page about its class, shown on its next run."""
    st.session_state[NOTICE] = message


def leave() -> None:
    """This page leaves its class (the class goes on), and its URL the class's code and seat."""
    set_membership(None)
    st.session_state.pop(TEACHER_LINK, None)
    st.session_state["class"] = st.session_state["seat"] = ""
    watch = class_watch()
    if watch is not None:
        watch.forget(session_key())


class _SharedReads:
    """The last read of each class, shared by the sessions of this process for INFO_FRESH_S."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reads: dict[str, tuple[float, ClassInfo | ClassError]] = {}

    def read(self, store: ClassStore, code: str, max_age_s: float = INFO_FRESH_S) -> ClassInfo:
        """The class as read at most ``max_age_s`` ago (0: from the store now, for everyone after)."""
        now = time.monotonic()
        with self._lock:
            last = self._reads.get(code)
        if last is None or now - last[0] >= max_age_s:
            try:
                result: ClassInfo | ClassError = store.info(code)
            except ClassError as error:
                result = error
            with self._lock:
                self._reads[code] = (now, result)
                if len(self._reads) > 1000:
                    self._reads = {k: v for k, v in self._reads.items() if now - v[0] <= INFO_FRESH_S}
            last = (now, result)
        if isinstance(last[1], ClassError):
            raise last[1]
        return last[1]

    def forget(self, code: str) -> None:
        """Drop a class's shared read (after this page changed it: its next look reads the store)."""
        with self._lock:
            self._reads.pop(code, None)


@st.cache_resource(show_spinner=False)
def shared_reads() -> _SharedReads:
    return _SharedReads()


def followed_state(state: dict[str, str]) -> dict[str, str]:
    """The part of a page's URL state that students follow."""
    return {key: value for key, value in state.items() if key not in NOT_FOLLOWED}


def publish(state: dict[str, str]) -> None:
    """On the teacher's page: make ``state`` (its URL's settings) the class's, when it changed."""
    member = membership()
    if member is None or not member.teaching:
        return
    followed = followed_state(state)
    if followed == member.published:
        return
    store = class_store()
    if store is None:
        return
    try:
        store.move(member.code, member.teacher_key, followed)
    except StoreUnavailable as error:
        store_problem(error)
        return
    except ClassError:
        return  # ended or expired: the class panel says so on its next look
    member.published = followed
    shared_reads().forget(member.code)


def take_follow_request() -> dict[str, str] | None:
    """The teacher's state a following student's page opens on this run (explorer.state.read_url), when the teacher
    moved since the page last went there; this page's own settings (NOT_FOLLOWED) stay as they are."""
    member = membership()
    if member is None or member.teaching or not member.following:
        return None
    store = class_store()
    if store is None:
        return None
    try:
        info = shared_reads().read(store, member.code)
    except (ClassError, StoreUnavailable):
        return None  # the strip says so
    if info.version <= member.applied_version:
        return None
    member.applied_version = info.version
    if info.version == 0:
        return None  # the teacher's page has not published yet; an empty state later is its page at its defaults
    own = {key: st.query_params[key] for key in NOT_FOLLOWED if key in st.query_params}
    return {**info.state, **own, "class": member.code, "seat": member.seat}


@st.cache_resource(show_spinner=False)
def _class_watch(url: str) -> ClassWatch:
    store, reads = _store(url), shared_reads()
    return ClassWatch(lambda code: reads.read(store, code, max_age_s=0.0))


def class_watch() -> ClassWatch | None:
    """This process's watch over the classes of its pages (explorer.classes.watch), on the server's store."""
    try:
        return _class_watch(store_url())
    except (StoreUnavailable, ValueError):
        return None
