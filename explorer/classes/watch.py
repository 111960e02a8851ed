"""Brings a class's news to the students' pages of this server process, instead of each page looking every half second.

One thread per process (``class_watch()``) reads each class that has a student's page here every WATCH_S (one store
read per class, shared with the pages through explorer.classes.session's shared reads) and asks the Streamlit
session of every page that has not drawn the class's latest state to run again: a teacher's move, a new question,
a reveal. That run opens the teacher's state (explorer.state.read_url) and draws the strip. Thirty students cost
nothing while the class is still; a page's strip polling instead cost a third of a core for sixty students
(benchmarks: class_follow_p95_ms).

Asking a session to run is Streamlit's own server-side rerun (what ``st.rerun`` and "run on save" use), reached
through its runtime (``Runtime.get_app_session``, not public API). Where there is no runtime (AppTest) or the
call is missing, ``can_push()`` is False and the strip looks by itself every FOLLOW_POLL_S, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from explorer.classes.database import StoreUnavailable
from explorer.classes.store import ClassError, ClassInfo

WATCH_S = 0.2
log = logging.getLogger("explorer.classes")

Mark = tuple[Any, ...]  # what a page drew of its class: the teacher's version it follows, the question and its reveal


def mark_of(info: ClassInfo, following: bool) -> Mark:
    """What a student's page must redraw for: the teacher's moves while it follows, the question, its reveal."""
    question = info.question
    return (
        info.version if following else None,
        None if question is None else question.id,
        None if question is None else question.revealed,
    )


def _runtime() -> Any:
    try:
        from streamlit.runtime import Runtime
    except ImportError:
        return None
    if not Runtime.exists() or not hasattr(Runtime.instance(), "get_app_session"):
        return None
    return Runtime.instance()


def can_push() -> bool:
    """Whether this process can ask a session to run (a real Streamlit server), so pages need not look."""
    return _runtime() is not None


def request_run(session_id: str) -> bool:
    """Ask a browser session of this process to run its page again; False when it is gone."""
    runtime = _runtime()
    session = None if runtime is None else runtime.get_app_session(session_id)
    if session is None:
        return False
    loop = getattr(session, "_event_loop", None)
    if loop is None or loop.is_closed():
        return False
    loop.call_soon_threadsafe(session.request_rerun, None)  # an AppSession is driven from its event loop only
    return True


class ClassWatch:
    """The pages of this process in a class, each with what it last drew (``Mark``); a thread that wakes them."""

    def __init__(self, read: Callable[[str], ClassInfo], interval_s: float = WATCH_S) -> None:
        self._read = read
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._pages: dict[str, tuple[str, bool, Mark]] = {}  # session id -> (class code, following, mark)
        self._thread: threading.Thread | None = None

    def drew(self, session_id: str, code: str, following: bool, mark: Mark) -> None:
        """A page drew ``mark`` of class ``code``: it is woken when the class moves past it."""
        with self._lock:
            self._pages[session_id] = (code, following, mark)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="class-watch", daemon=True)
                self._thread.start()

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._pages.pop(session_id, None)

    def watching(self) -> int:
        with self._lock:
            return len(self._pages)

    def check(self, wake: Callable[[str], bool]) -> int:
        """One look at every class with a page here: ``wake`` each page behind its class (a page gone is forgotten);
        returns how many were woken."""
        with self._lock:
            pages = dict(self._pages)
        infos: dict[str, ClassInfo | None] = {}
        for code in {code for code, _, _ in pages.values()}:
            try:
                infos[code] = self._read(code)
            except ClassError:
                infos[code] = None  # ended: its pages run once more and say so
            except StoreUnavailable:
                continue
        woken = 0
        for session_id, (code, following, mark) in pages.items():
            if code not in infos:
                continue
            info = infos[code]
            latest = None if info is None else mark_of(info, following)
            if latest == mark:
                continue
            if wake(session_id):
                woken += 1
                with self._lock:
                    if session_id in self._pages:  # woken once for this news; its run records what it drew
                        self._pages[session_id] = (code, following, latest)
            else:
                self.forget(session_id)
        return woken

    def _run(self) -> None:
        while True:
            time.sleep(self._interval_s)
            try:
                self.check(request_run)
            except Exception:  # the watch must outlive any one class's trouble
                log.exception("the class watch failed one look")
