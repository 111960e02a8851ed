"""Timing helpers: warm-up, then candidate and baseline alternate, and the medians are compared.

Alternating (A, B, A, B, ...) rather than timing all of A then all of B means that a
background load that comes and goes (a training run on the same cores) hits both sides
alike, so the ratio stays meaningful even when the absolute numbers move.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


def synchronize(device: torch.device | str | None) -> None:
    """Wait for queued GPU work so that a timer measures it (no-op on the CPU)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(work: Callable[[], object], device: torch.device | str | None = None) -> float:
    """Seconds one call of ``work`` takes, GPU work included."""
    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


@dataclass
class Paired:
    """Seconds per repeat of the candidate and of its baseline, timed alternately."""

    candidate: list[float]
    baseline: list[float]

    @property
    def candidate_median(self) -> float:
        return median(self.candidate)

    @property
    def baseline_median(self) -> float:
        return median(self.baseline)


def alternate(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    repeats: int,
    warmup: int = 1,
    device: torch.device | str | None = None,
    prepare: Callable[[], object] | None = None,
) -> Paired:
    """Warm both up, then time them in turns (the order flips every round so neither always goes first).

    ``prepare`` runs untimed before every timed call (e.g. to copy a cache the call consumes).
    """
    for _ in range(warmup):
        for work in (candidate, baseline):
            if prepare is not None:
                prepare()
            work()
    synchronize(device)
    times: dict[str, list[float]] = {"candidate": [], "baseline": []}
    for round_index in range(repeats):
        order = (("candidate", candidate), ("baseline", baseline))
        for key, work in order if round_index % 2 == 0 else order[::-1]:
            if prepare is not None:
                prepare()
            times[key].append(time_call(work, device))
    return Paired(times["candidate"], times["baseline"])


def wait_for(condition: Callable[[], object], what: str, limit_s: float = 90.0, poll_s: float = 0.01) -> object:
    """Poll ``condition`` until it returns something truthy, and return that; RuntimeError naming ``what`` after
    ``limit_s`` (a bound for a busy machine, not a measurement)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(poll_s)
    raise RuntimeError(f"{what} did not happen within {limit_s:.0f} s")
