"""First come, first served: how the page shares the CPU between many sessions at once.

Thirty sessions that start work at once on two cores share them (and Python's GIL): every
page run advances a little at a time, the threads mostly wait on each other, and nearly all
of them finish together at the end of the burst, later than if they had run one after
another. Admitting a few at a time *in arrival order* finishes the early arrivals early and
the burst as a whole sooner (benchmarks: classroom_p95_ms). ``threading.Semaphore`` bounds
concurrency but is not fair: a thread that releases it and asks again at once often gets it
back ahead of threads that have been waiting, and those wait for the whole burst. Here a
released slot goes straight to the longest waiter.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import wraps
from types import TracebackType
from typing import Any

import streamlit as st


class FifoGate:
    """At most ``slots`` threads inside at a time, admitted strictly in the order they asked (``with gate: ...``).

    Reentrant: a thread already inside passes straight through a nested ``with gate:``. A holder
    doing long work calls ``pass_turn`` between its parts; once it has held its slot for
    ``turn_s`` seconds, the threads waiting then go first.
    """

    def __init__(self, slots: int, turn_s: float = 0.25) -> None:
        if slots < 1:
            raise ValueError("a gate needs at least one slot")
        self.slots = slots
        self.turn_s = turn_s
        self._lock = threading.Lock()
        self._waiting: deque[threading.Event] = deque()
        self._holders = 0
        self._mine = threading.local()  # per thread: nested ``with`` depth and when its current turn began

    def waiting(self) -> int:
        """How many threads are queued now (a new arrival would wait behind them)."""
        with self._lock:
            return len(self._waiting)

    def is_full(self) -> bool:
        """Whether a new arrival would have to wait."""
        with self._lock:
            return self._holders >= self.slots or bool(self._waiting)

    def holds(self) -> bool:
        """Whether the calling thread is inside."""
        return getattr(self._mine, "depth", 0) > 0

    def __enter__(self) -> FifoGate:
        if self.holds():
            self._mine.depth += 1
            return self
        with self._lock:
            turn = None if self._holders < self.slots and not self._waiting else self._queue()
            if turn is None:
                self._holders += 1
        self._wait(turn)
        self._mine.depth = 1
        return self

    def pass_turn(self) -> None:
        """After ``turn_s`` inside, let every thread waiting now go first, then carry on.

        The slot goes to the longest waiter and this thread queues again at the back, so one
        long job (a whole file of sentences) delays the others by about ``turn_s`` at a time,
        not by all of it; work that is quick (cached) never waits.
        """
        if not self.holds():
            raise RuntimeError("only a thread inside the gate can pass its turn")
        if time.monotonic() - self._mine.since < self.turn_s:
            return
        with self._lock:
            if not self._waiting:
                return
            self._hand_over()
            turn = self._queue()
        self._wait(turn)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._mine.depth -= 1
        if self._mine.depth:
            return
        with self._lock:
            if self._waiting:
                self._hand_over()
            else:
                self._holders -= 1

    # _queue and _hand_over run under self._lock; _wait outside it

    def _queue(self) -> threading.Event:
        turn = threading.Event()
        self._waiting.append(turn)
        return turn

    def _hand_over(self) -> None:
        """The slot goes straight to the longest waiter: _holders stays as it is."""
        self._waiting.popleft().set()

    def _wait(self, turn: threading.Event | None) -> None:
        """Wait for ``turn`` (None: admitted already), then start this thread's turn."""
        if turn is not None:
            turn.wait()
        self._mine.since = time.monotonic()


def available_cores() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.cache
def shared_gate() -> FifoGate:
    """The process's gate for page runs: one slot per available core, shared by every session.

    One slot per core, because each page run uses one core (app.py sets one intra-op thread) and
    Python code holds the GIL: more slots would not run more at once, and the order of arrival is what
    shortens the wait (benchmarks: classroom_p95_ms).
    """
    return FifoGate(available_cores())


@contextmanager
def admitted() -> Iterator[None]:
    """Run the page (or a fragment) when its turn comes: first come, first served, one run per core.

    Thirty runs started at once on two cores all finish late together; in turns, the early
    arrivals finish early and the last no later (FifoGate). A run that has to wait says so.
    """
    gate = shared_gate()
    with ExitStack() as turn:
        if gate.is_full() and not gate.holds():
            ahead = gate.waiting()
            with st.spinner(f"Busy with other sessions: {f'{ahead} ahead of you' if ahead else 'you are next'}…"):
                turn.enter_context(gate)
        else:
            turn.enter_context(gate)
        yield


def in_turn(view: Callable[..., None]) -> Callable[..., None]:
    """A fragment's own reruns take their turn like page runs (inside a page run it already has one)."""

    @wraps(view)
    def run(*args: Any, **kwargs: Any) -> None:
        with admitted():
            view(*args, **kwargs)

    return run
