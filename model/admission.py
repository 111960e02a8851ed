"""First come, first served: how the app shares the CPU between many sessions at once.

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
from collections import deque
from types import TracebackType


class FifoGate:
    """At most ``slots`` threads inside at a time, admitted strictly in the order they asked (``with gate: ...``).

    Reentrant: a thread already inside passes straight through a nested ``with gate:``.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("a gate needs at least one slot")
        self.slots = slots
        self._lock = threading.Lock()
        self._waiting: deque[threading.Event] = deque()
        self._holders = 0
        self._depth = threading.local()  # per thread: how many nested ``with`` blocks it is in

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
        return getattr(self._depth, "count", 0) > 0

    def __enter__(self) -> FifoGate:
        if self.holds():
            self._depth.count += 1
            return self
        with self._lock:
            admitted = self._holders < self.slots and not self._waiting
            if admitted:
                self._holders += 1
            else:
                turn = threading.Event()
                self._waiting.append(turn)
        if not admitted:
            turn.wait()  # the releasing holder hands its slot over: _holders already counts this thread
        self._depth.count = 1
        return self

    def pass_turn(self) -> None:
        """Let every thread waiting now go first, then carry on: for a holder between the parts of long work.

        Its slot goes to the longest waiter and it queues again at the back, so one long job (a
        whole file of sentences) delays the others by one part each time, not by all of it.
        """
        if not self.holds():
            raise RuntimeError("only a thread inside the gate can pass its turn")
        with self._lock:
            if not self._waiting:
                return
            self._waiting.popleft().set()  # the slot changes hands: _holders stays as it is
            turn = threading.Event()
            self._waiting.append(turn)
        turn.wait()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._depth.count -= 1
        if self._depth.count:
            return
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._holders -= 1


def available_cores() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.cache
def shared_gate() -> FifoGate:
    """The process's gate for page runs: one slot per available core, shared by every session.

    One slot per core, because each page run uses one core (app.py sets one intra-op thread) and
    Python code holds the GIL: in the classroom benchmark one to four slots on two cores gave the
    same latencies, all about half of those without a gate.
    """
    return FifoGate(available_cores())
