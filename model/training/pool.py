"""Toy trainings for a classroom on one server: each in its own process, at most ``slots`` at once, the rest queued.

A training runs ``model.training.live.train_toy`` in a child process with one CPU thread and a
lower scheduling priority, so it never holds the server's GIL, never slows the page runs of the
other sessions more than a core's worth, can be stopped at once (a stop flag it reads before
every step, then a kill if it does not answer), and gives all its memory back when it ends. A
reader thread per training turns the child's messages into the ``Job``'s state, which a page
reads with ``TrainingPool.view(owner)`` as often as it likes. Each owner (a browser session) has at most one
job; a job whose owner is gone (``alive`` says so for ``grace_s``) is stopped and forgotten.
Nothing here knows about Streamlit: the page passes who the owner is and how to tell it is alive.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from model.trace import Trace
from model.training.live import HistoryPoint, Progress, ToyRun
from model.training.toy_settings import ToySettings

ENDED = ("finished", "cancelled", "failed")


def default_slots() -> int:
    """Trainings at once: one per core beyond the one the page runs need, at least one."""
    return max(1, (os.cpu_count() or 1) - 1)


@dataclass
class JobView:
    """A consistent copy of a job's state for one page run."""

    owner: str
    state: str  # queued, running, stopping, then finished, cancelled or failed (ENDED)
    settings: ToySettings
    position: int  # 1 for the first in the queue; 0 when not queued
    step: int
    steps: int
    elapsed_s: float
    history: list[HistoryPoint]
    latest: Trace | None  # the watched example's attention at the last measurement
    alignment: dict[str, list[float]] | None
    exact_match: float | None
    run: ToyRun | None  # the result, once finished
    error: str

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running", "stopping")

    def time_left_s(self) -> float | None:
        """Seconds until the budget is used up at the pace so far; None before the pace is known."""
        if self.state != "running" or len(self.history) < 5:
            return None
        first = self.history[0]
        done, spent = self.step - first.step + 1, self.elapsed_s - first.elapsed_s
        return max(0.0, (self.steps - self.step) * spent / done)


@dataclass
class Job:
    """One owner's training: its settings, where it stands, and its process once it runs."""

    owner: str
    settings: ToySettings
    start: ToyRun | None = None  # the run it continues
    state: str = "queued"
    step: int = 0
    steps: int = 0
    elapsed_s: float = 0.0
    history: list[HistoryPoint] = field(default_factory=list)
    latest: Trace | None = None
    alignment: dict[str, list[float]] | None = None
    exact_match: float | None = None
    run: ToyRun | None = None
    error: str = ""
    started_at: float = 0.0
    process: Any = None
    stop_flag: Any = None


def _warm_up() -> None:
    """Nothing: starting it makes the fork server load torch and the model before the first training needs them."""


def _work(settings: ToySettings, start: bytes | None, connection: Connection, stop: Any, niceness: int) -> None:
    """The child process: train, sending every step's progress and, at the end, the pickled run.

    Runs travel pickled by the standard pickler (``start`` too): multiprocessing's own would hand every tensor over
    as a shared-memory file descriptor, and the fork server takes only a few hundred per process."""
    import torch  # noqa: PLC0415 - the child sets its threads before torch does any work

    from model.training.live import train_toy  # noqa: PLC0415

    if niceness:
        os.nice(niceness)
    torch.set_num_threads(1)

    def send(progress: Progress) -> None:
        connection.send_bytes(pickle.dumps(("progress", progress)))

    try:
        run = train_toy(settings, on_step=send, should_stop=stop.is_set, start=pickle.loads(start) if start else None)
        connection.send_bytes(pickle.dumps(("done", run)))
    except Exception as error:  # the page shows it; the server carries on
        connection.send_bytes(pickle.dumps(("failed", f"{type(error).__name__}: {error}")))
    finally:
        connection.close()


class TrainingPool:
    """At most ``slots`` trainings at once, the rest in a first-come, first-served queue; one job per owner.

    ``alive(owner)`` tells whether an owner is still there; a job whose owner has been gone for ``grace_s`` is
    stopped and forgotten by a watchdog thread (which then calls ``on_gone(owner)``, for the page to clean up
    after it), and a training that has run ``max_seconds`` is stopped.
    """

    def __init__(
        self,
        slots: int | None = None,
        alive: Callable[[str], bool] | None = None,
        on_gone: Callable[[str], None] | None = None,
        grace_s: float = 10.0,
        max_seconds: float = 600.0,
        niceness: int = 5,
        *,
        start_method: str = "forkserver",
    ) -> None:
        self.slots = default_slots() if slots is None else slots
        if self.slots < 1:
            raise ValueError("a training pool needs at least one slot")
        self.alive = alive or (lambda owner: True)
        self.on_gone = on_gone
        self.grace_s = grace_s
        self.max_seconds = max_seconds
        self.niceness = niceness
        # typeshed types get_context(a str) as BaseContext, which has no Process; every context it returns has one
        # (the two "type: ignore[attr-defined]" below)
        self._context = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            # Children fork from a server that has torch and the model loaded, and the main script too: otherwise
            # every child would import the main script again (under Streamlit, the whole page) before it starts.
            self._context.set_forkserver_preload(["__main__", "model.training.live"])
            warm_up = self._context.Process(target=_warm_up, daemon=True)  # type: ignore[attr-defined]
            threading.Thread(target=warm_up.start, daemon=True).start()
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._queue: deque[str] = deque()
        self._gone_since: dict[str, float] = {}
        self._watched: set[str] = set()  # owners without a job whose leaving still matters (on_gone)
        self._closed = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="training-pool-watchdog", daemon=True)
        self._watchdog.start()

    # --- what a page calls ---------------------------------------------------------------------------------------

    def submit(self, owner: str, settings: ToySettings, start: ToyRun | None = None) -> JobView:
        """Queue a training for ``owner`` (replacing its ended job); ValueError for bad settings, RuntimeError when
        the owner already has one queued or running."""
        settings.check()
        if start is not None and not start.settings.same_model(settings):
            raise ValueError("a run continues only with the same task and model; start a new one to change them")
        with self._lock:
            current = self._jobs.get(owner)
            if current is not None and current.state not in ENDED:
                raise RuntimeError("this session already has a training; stop it first")
            job = Job(owner, settings, start)
            if start is not None:
                job.step, job.elapsed_s, job.history = start.step, start.elapsed_s, list(start.history)
                job.exact_match, job.alignment = start.exact_match, start.alignment
            job.steps = job.step + settings.steps
            self._jobs[owner] = job
            self._queue.append(owner)
            self._start_waiting()
            return self._view(job)

    def view(self, owner: str) -> JobView | None:
        """The owner's job as it stands now, or None."""
        with self._lock:
            job = self._jobs.get(owner)
            return None if job is None else self._view(job)

    def stop(self, owner: str) -> None:
        """Stop the owner's training: a queued one leaves the queue (ended, nothing trained), a running one ends
        after its current step and keeps what it learned."""
        with self._lock:
            job = self._jobs.get(owner)
            if job is None or job.state in ENDED:
                return
            if job.state == "queued":
                self._queue.remove(owner)
                job.state = "cancelled"
                job.run = job.start
                return
            job.state = "stopping"
            job.stop_flag.set()

    def forget(self, owner: str) -> None:
        """Stop the owner's training and drop it and its result (Reset, or the owner left)."""
        self.stop(owner)
        with self._lock:
            job = self._jobs.pop(owner, None)
        if job is not None and job.process is not None:
            self._end_process(job, wait_s=2.0)

    def watch(self, owner: str) -> None:
        """Call ``on_gone(owner)`` when the owner leaves, even if it has no job then (it kept something)."""
        with self._lock:
            self._watched.add(owner)

    def running(self) -> int:
        with self._lock:
            return sum(job.state in ("running", "stopping") for job in self._jobs.values())

    def waiting(self) -> int:
        with self._lock:
            return len(self._queue)

    def close(self) -> None:
        """End every training at once, and the watchdog (tests, benchmarks): nothing the trainings learned is kept,
        so none is waited for (a child still importing torch would not see its stop flag for seconds)."""
        self._closed.set()
        with self._lock:
            jobs = list(self._jobs.values())
            self._jobs.clear()
            self._queue.clear()
        for job in jobs:
            self._end_process(job, wait_s=0.0)

    # --- inside --------------------------------------------------------------------------------------------------

    def _view(self, job: Job) -> JobView:
        position = self._queue.index(job.owner) + 1 if job.state == "queued" else 0
        return JobView(
            owner=job.owner,
            state=job.state,
            settings=job.settings,
            position=position,
            step=job.step,
            steps=job.steps,
            elapsed_s=job.elapsed_s,
            history=list(job.history),
            latest=job.latest,
            alignment=job.alignment,
            exact_match=job.exact_match,
            run=job.run,
            error=job.error,
        )

    def _start_waiting(self) -> None:
        """Start queued jobs while slots are free (called with the lock held)."""
        while self._queue and sum(job.state in ("running", "stopping") for job in self._jobs.values()) < self.slots:
            job = self._jobs[self._queue.popleft()]
            receiver, sender = self._context.Pipe(duplex=False)
            job.stop_flag = self._context.Event()
            job.process = self._context.Process(  # type: ignore[attr-defined]
                target=_work,
                args=(
                    job.settings,
                    pickle.dumps(job.start) if job.start else None,
                    sender,
                    job.stop_flag,
                    self.niceness,
                ),
                name=f"toy-training-{job.owner[:8]}",
                daemon=True,
            )
            job.state, job.started_at = "running", time.monotonic()
            job.process.start()
            sender.close()  # the child holds the only sending end: the reader sees EOF when the child exits
            threading.Thread(target=self._read, args=(job, receiver), name="training-reader", daemon=True).start()

    def _read(self, job: Job, receiver: Connection) -> None:
        """Turn the child's messages into the job's state until it ends, then start the next job in the queue."""
        ended = False
        try:
            while True:
                kind, payload = pickle.loads(receiver.recv_bytes())
                with self._lock:
                    self._apply(job, kind, payload)
                if kind != "progress":
                    ended = True
                    break
        except (EOFError, OSError):
            pass
        finally:
            receiver.close()
        self._end_process(job, wait_s=5.0)
        with self._lock:
            if not ended:
                job.state = "failed"
                job.error = job.error or f"the training process ended unexpectedly (exit code {job.process.exitcode})"
                job.run = job.start
            self._start_waiting()

    def _apply(self, job: Job, kind: str, payload: Any) -> None:
        if kind == "progress":
            progress: Progress = payload
            job.step, job.steps, job.elapsed_s = progress.step, progress.steps, progress.elapsed_s
            job.history.append(HistoryPoint(progress.step, progress.elapsed_s, progress.loss, progress.exact_match))
            if progress.attention is not None:
                job.latest, job.alignment, job.exact_match = (
                    progress.attention,
                    progress.alignment,
                    progress.exact_match,
                )
        elif kind == "done":
            run: ToyRun = payload
            job.run, job.state, job.step = run, "finished", run.step
            job.history, job.exact_match, job.alignment = list(run.history), run.exact_match, run.alignment
        else:
            job.state, job.error, job.run = "failed", payload, job.start

    @staticmethod
    def _end_process(job: Job, wait_s: float) -> None:
        """Wait for the child to exit after its last message; kill it if it does not."""
        process = job.process
        if process is None:
            return
        process.join(wait_s)
        if process.is_alive():
            process.kill()
            process.join(1.0)

    def _watch(self) -> None:
        """Every half second: forget jobs whose owner has gone, stop trainings past ``max_seconds``."""
        while not self._closed.wait(0.5):
            now = time.monotonic()
            with self._lock:
                owners = list(self._jobs.keys() | self._watched)
            for owner in owners:
                if self.alive(owner):
                    self._gone_since.pop(owner, None)
                elif now - self._gone_since.setdefault(owner, now) >= self.grace_s:
                    self._gone_since.pop(owner, None)
                    with self._lock:
                        self._watched.discard(owner)
                    self.forget(owner)
                    if self.on_gone is not None:
                        self.on_gone(owner)
                    continue
                with self._lock:
                    job = self._jobs.get(owner)
                    overdue = job is not None and job.state == "running" and now - job.started_at > self.max_seconds
                if overdue:
                    self.stop(owner)
