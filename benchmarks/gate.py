"""A first-come, first-served gate: the bounded-concurrency experiment of the classroom benchmark.

Thirty sessions that start work at once on two cores share them (and Python's GIL): every
interaction advances a little at a time, so nearly all of them finish together, at the end
of the burst. Admitting a few at a time *in arrival order* finishes the early arrivals early
and nobody later than under sharing, which roughly halves the 95th percentile of a burst.
``threading.Semaphore`` bounds concurrency but is not fair: a thread that releases it and
asks again at once often gets it back ahead of threads that have been waiting, and those
wait for the whole burst. Here a released slot goes straight to the longest waiter.
"""

from __future__ import annotations

import threading
from collections import deque
from types import TracebackType


class FifoGate:
    """At most ``slots`` holders at a time, admitted strictly in the order they asked (``with gate: ...``)."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("a gate needs at least one slot")
        self.slots = slots
        self._lock = threading.Lock()
        self._waiting: deque[threading.Event] = deque()
        self._holders = 0

    def __enter__(self) -> FifoGate:
        with self._lock:
            if self._holders < self.slots and not self._waiting:
                self._holders += 1
                return self
            turn = threading.Event()
            self._waiting.append(turn)
        turn.wait()  # the releasing holder hands its slot over: _holders already counts this thread
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._holders -= 1
