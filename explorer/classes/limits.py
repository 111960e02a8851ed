"""How often one session, or one server process, may try something: joins (a wrong code counts), answers, asks.

A sliding window per key, in memory: each replica counts its own sessions, so a session that floods one replica
is slowed there. Join codes are not guessable one try at a time (explorer.classes.store.CODE_LENGTH); these limits
keep it so when a script tries many: a session gets a few wrong codes a minute, a whole replica a few dozen.
"""

from __future__ import annotations

import threading
import time
from collections import deque


class Throttle:
    """At most ``limit`` events per ``window_s`` seconds per key."""

    def __init__(self, limit: int, window_s: float) -> None:
        if limit < 1 or window_s <= 0:
            raise ValueError("a throttle needs a limit of at least 1 and a positive window")
        self.limit = limit
        self.window_s = window_s
        self._events: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        events = self._events.setdefault(key, deque())
        while events and events[0] <= now - self.window_s:
            events.popleft()
        return events

    def full(self, key: str, now: float | None = None) -> bool:
        """Whether ``key`` has had ``limit`` events in the window (a new one would be refused)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return len(self._recent(key, now)) >= self.limit

    def allow(self, key: str, now: float | None = None) -> bool:
        """Count one event for ``key``; False (and not counted) when ``key`` has had ``limit`` in the window."""
        now = time.monotonic() if now is None else now
        with self._lock:
            events = self._recent(key, now)
            if len(events) >= self.limit:
                return False
            events.append(now)
            if len(self._events) > 10_000:  # forget the keys whose windows have passed (closed sessions)
                self._events = {k: v for k, v in self._events.items() if v and v[-1] > now - self.window_s}
            return True


WRONG_CODES_PER_SESSION = Throttle(5, 60.0)
WRONG_CODES_PER_PROCESS = Throttle(60, 60.0)
ANSWERS_PER_SESSION = Throttle(30, 60.0)  # one counts per question; the rest are clicks a flood would repeat
JOINS_PER_SESSION = Throttle(10, 60.0)
ASKS_PER_SESSION = Throttle(20, 60.0)
