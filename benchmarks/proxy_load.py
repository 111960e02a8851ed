"""A lecture hall through nginx: sessions of real websocket clients against ``python -m deploy.launch``.

``proxy_p95_ms``: with 1 and 2 replicas, the latency of a sentence edit (p50, p95) and the errors, at several
class sizes. ``proxy_failover_s``: a replica killed under a class, and how soon its sessions are back.

Each session opens the page (its first run, not timed), waits until every session has, then all edit their
sentence together, one new sentence after another; an edit is timed from sending the rerun to the end of the
run, as PageClient reads it. The clients run in this process, on the same cores as the servers.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from benchmarks.app_benchmarks import CLASSROOM_PIECES, app_checkpoints
from benchmarks.context import Context
from benchmarks.memory import PageClient
from benchmarks.records import Check, Record
from benchmarks.server import lecture_hall
from benchmarks.subject import sentence_with_pieces
from benchmarks.timing import median, percentile

OPEN_LIMIT_S = 600.0  # every session's first page, 120 of them on 2 cores
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a running process has used, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def hall_cpu_s(run_dir: Path) -> float:
    """CPU seconds used so far by the hall's replicas (nginx's are not counted)."""
    pids = list(json.loads((run_dir / "replicas.json").read_text()).values())
    return sum(cpu_s(pid) for pid in pids)


def need_nginx() -> None:
    """Raise, naming what to install, where the launcher finds no nginx."""
    from deploy.launch import LaunchError, find_nginx

    try:
        find_nginx(None)
    except LaunchError as error:
        raise RuntimeError(f"needs nginx: {error}") from None


def hall_env(ctx: Context, **extra: str) -> dict[str, str]:
    """The replicas' environment: this one with ``extra``, and no GPU unless the subject runs on one (the page's
    "auto" device then means the CPU, as asked)."""
    env = {**os.environ, **extra}
    if ctx.subject.device.type != "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def class_of(
    url: str, sentences: list[list[str]], cpu: Callable[[], float] = lambda: 0.0
) -> tuple[list[float], list[str], float, float]:
    """One session per list of sentences, all editing at once once all are open: (edit latencies in s, errors,
    seconds until every page was open, ``cpu()``'s growth over the edits alone)."""
    latencies: list[float] = []
    errors: list[str] = []
    opened = threading.Semaphore(0)
    go = threading.Event()
    lock = threading.Lock()

    def session(texts: list[str]) -> None:
        client = None
        try:
            client = PageClient(url)
            client.rerun()
            opened.release()
            go.wait()
            for text in texts:
                began = time.perf_counter()
                client.rerun(sentence=text)
                with lock:
                    latencies.append(time.perf_counter() - began)
        except Exception as error:  # a session's failure is what this measures, with its reason
            with lock:
                errors.append(f"{type(error).__name__}: {error}")
            opened.release()
        finally:
            if client is not None:
                client.close()

    began = time.monotonic()
    threads = [threading.Thread(target=session, args=(texts,), daemon=True) for texts in sentences]
    for thread in threads:
        thread.start()
    for _ in threads:
        if not opened.acquire(timeout=max(1.0, OPEN_LIMIT_S - (time.monotonic() - began))):
            break
    open_s = time.monotonic() - began
    cpu_before = cpu()
    go.set()
    for thread in threads:
        thread.join(timeout=OPEN_LIMIT_S)
    return latencies, errors, open_s, cpu() - cpu_before


def proxy_p95_ms(ctx: Context) -> list[Record]:
    need_nginx()
    translator = ctx.subject.translator
    class_sizes = (30, 60) if ctx.quick else (30, 60, 120)
    edits = 2  # as the in-process classroom benchmark's sessions
    results: dict[tuple[int, int], tuple[list[float], list[str], float, float]] = {}
    restarts: dict[int, int] = {}
    client_cpu_ms: dict[tuple[int, int], float] = {}  # the simulated browsers' (this process's) per edit
    with app_checkpoints(ctx.subject.folder), tempfile.TemporaryDirectory(prefix="bench-hall-") as root:
        env = hall_env(ctx)
        for replicas in (1, 2):
            run_dir = Path(root) / f"replicas-{replicas}"
            with lecture_hall(replicas, run_dir, env) as url:
                for size in class_sizes:
                    sentences = [
                        [sentence_with_pieces(translator, CLASSROOM_PIECES, seed=4000 + size * 10 + i * edits + k)
                         for k in range(edits)]
                        for i in range(size)
                    ]  # fmt: skip
                    client_before = time.process_time()
                    results[replicas, size] = class_of(url, sentences, lambda run_dir=run_dir: hall_cpu_s(run_dir))
                    edits_done = max(1, len(results[replicas, size][0]))
                    client_cpu_ms[replicas, size] = (time.process_time() - client_before) * 1000 / edits_done
            # a replica the launcher took for hung under the load and restarted: its sessions' errors say why
            restarts[replicas] = (run_dir / "launcher.log").read_text().count("restarting it")
    records = []
    for size in class_sizes:
        two, one = results[2, size], results[1, size]
        if not two[0] or not one[0]:
            raise RuntimeError(
                f"{size} sessions: no edit finished; replicas restarted by the launcher: {restarts}; "
                f"errors: {(two[1] + one[1])[:3]}"
            )
        checks = (Check("value", "<=", 2500.0), Check("errors", "<=", 0)) if size == 60 else ()
        records.append(
            Record(
                "proxy_p95_ms",
                percentile(two[0], 95) * 1000,
                "ms",
                percentile(one[0], 95) * 1000,
                checks,
                {
                    "case": f"{size} sessions x {edits} edits, 2 replicas behind nginx",
                    "baseline_is": "the same class through nginx with 1 replica",
                    "interaction": f"new {CLASSROOM_PIECES}-piece sentence over the websocket (PageClient), every "
                    "session at once after all pages opened",
                    "errors": float(len(two[1])),
                    "baseline_errors": float(len(one[1])),
                    "replica_restarts_in_the_run": restarts[2],
                    "baseline_replica_restarts_in_the_run": restarts[1],
                    "error_samples": (two[1] + one[1])[:5],
                    "p50_ms": median(two[0]) * 1000,
                    "baseline_p50_ms": median(one[0]) * 1000,
                    "open_all_pages_s": two[2],
                    "baseline_open_all_pages_s": one[2],
                    # the replicas' CPU time over the edits (all pages open) per edit
                    "replicas_cpu_ms_per_edit": two[3] * 1000 / len(two[0]),
                    "baseline_replicas_cpu_ms_per_edit": one[3] * 1000 / len(one[0]),
                    "clients_cpu_ms_per_edit": client_cpu_ms[2, size],
                    "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                    "value_samples": sorted(t * 1000 for t in two[0]),
                    "baseline_samples": sorted(t * 1000 for t in one[0]),
                    "statistic": "p95 (linear interpolation)",
                },
            )
        )
    return records


FAILOVER_SESSIONS = 60
BACK_LIMIT_S = 60.0  # a session not back by then counts as an error


def failover(url: str, run_dir: Path, sentences: list[str]) -> tuple[list[float], list[str], int]:
    """One session per sentence on 2 replicas behind nginx, each opened from its URL (?sentence=...) as a browser
    opens a link; then the replica holding most of them is killed. Each session on it does what its browser does:
    it reconnects through nginx and asks for a whole-page run from its URL (explorer/components/reconnect.py).
    Returns seconds from the kill until each such session's page was drawn again, the errors (of sessions not
    back within BACK_LIMIT_S, and of the others if one of their edits failed), and how many sessions moved."""
    opened = threading.Semaphore(0)
    killed = threading.Event()
    killed_at: list[float] = []
    victim: list[str] = []
    back: list[float] = []
    errors: list[str] = []
    replicas: list[str] = []
    lock = threading.Lock()

    def session(sentence: str) -> None:
        query = f"sentence={quote(sentence)}"
        client = None
        try:
            client = PageClient(url)
            client.rerun(query)
            with lock:
                replicas.append(client.replica)
        except Exception as error:
            with lock:
                errors.append(f"opening: {type(error).__name__}: {error}")
            return
        finally:
            opened.release()
        killed.wait()
        try:
            if client.replica != victim[0]:
                client.rerun(query)  # a session on the live replica goes on as if nothing happened
                return
            client.close()
            while time.monotonic() - killed_at[0] < BACK_LIMIT_S:
                try:
                    client = PageClient(url)
                    client.rerun(query)
                    with lock:
                        back.append(time.monotonic() - killed_at[0])
                    return
                except Exception:  # refused or cut off while nginx finds the live replica: the browser retries
                    time.sleep(0.5)
            raise TimeoutError(f"not back within {BACK_LIMIT_S:.0f} s")
        except Exception as error:
            with lock:
                errors.append(f"{type(error).__name__}: {error}")
        finally:
            client.close()

    threads = [threading.Thread(target=session, args=(sentence,), daemon=True) for sentence in sentences]
    for thread in threads:
        thread.start()
    for _ in threads:
        opened.acquire(timeout=OPEN_LIMIT_S)
    victim.append(Counter(replicas).most_common(1)[0][0])
    pids = json.loads((run_dir / "replicas.json").read_text())
    os.kill(pids[victim[0].rsplit(":", 1)[1]], signal.SIGKILL)
    killed_at.append(time.monotonic())
    killed.set()
    for thread in threads:
        thread.join(timeout=BACK_LIMIT_S + 30)
    return back, errors, replicas.count(victim[0])


def proxy_failover_s(ctx: Context) -> list[Record]:
    translator = ctx.subject.translator
    sentences = [sentence_with_pieces(translator, CLASSROOM_PIECES, seed=5000 + i) for i in range(FAILOVER_SESSIONS)]
    with app_checkpoints(ctx.subject.folder), tempfile.TemporaryDirectory(prefix="bench-failover-") as root:
        env = hall_env(ctx)
        run_dir = Path(root) / "hall"
        with lecture_hall(2, run_dir, env) as url:
            began = time.perf_counter()
            client = PageClient(url)
            client.rerun(f"sentence={quote(sentences[0])}")
            client.close()
            one_page_s = time.perf_counter() - began
            back, errors, moved = failover(url, run_dir, sentences)
    if not back:
        raise RuntimeError(f"no session came back after the kill; errors: {errors[:3]}")
    return [
        Record(
            "proxy_failover_s",
            max(back),
            "s",
            one_page_s,
            (Check("value", "<=", 10.0), Check("errors", "<=", 0)),
            {
                "case": f"{len(sentences)} sessions on 2 replicas behind nginx, the busier replica killed",
                "baseline_is": "one page opened from its URL through nginx, nothing else running",
                "statistic": "the last moved session's seconds from the kill to its page drawn again",
                "moved_sessions": moved,
                "back": len(back),
                "errors": float(len(errors)),
                "error_samples": errors[:5],
                "median_back_s": median(back),
                "back_samples_s": sorted(back),
            },
        )
    ]


THREADS_SESSIONS = 30


def hall_threads_p95_ms(ctx: Context) -> list[Record]:
    """The same class through nginx with replicas x threads per page run (OMP_NUM_THREADS, ``deploy.launch
    --threads``): 1 and 2 replicas, 1 thread and one per core each, against 2 replicas x 1 thread."""
    need_nginx()
    translator = ctx.subject.translator
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    edits = 2
    cases = [
        (2, 1),
        *(
            (replicas, threads)
            for replicas in (1, 2)
            for threads in sorted({1, cores})
            if (replicas, threads) != (2, 1)
        ),
    ]
    results: dict[tuple[int, int], tuple[list[float], list[str], float, float]] = {}
    with app_checkpoints(ctx.subject.folder), tempfile.TemporaryDirectory(prefix="bench-threads-") as root:
        for replicas, threads in cases:
            env = hall_env(ctx, OMP_NUM_THREADS=str(threads))
            run_dir = Path(root) / f"r{replicas}-t{threads}"
            sentences = [
                [sentence_with_pieces(translator, CLASSROOM_PIECES, seed=6000 + i * edits + k) for k in range(edits)]
                for i in range(THREADS_SESSIONS)
            ]
            with lecture_hall(replicas, run_dir, env) as url:
                results[replicas, threads] = class_of(url, sentences, lambda run_dir=run_dir: hall_cpu_s(run_dir))
    baseline = results[2, 1]
    records = []
    for (replicas, threads), (latencies, errors, _, cpu_s) in results.items():
        if not latencies:
            raise RuntimeError(f"{replicas} replicas x {threads} threads: no edit finished; errors: {errors[:3]}")
        records.append(
            Record(
                "hall_threads_p95_ms",
                percentile(latencies, 95) * 1000,
                "ms",
                percentile(baseline[0], 95) * 1000,
                (),
                {
                    "case": f"{THREADS_SESSIONS} sessions x {edits} edits, {replicas} replica(s) x {threads} "
                    f"thread(s) per page run, {cores} cores",
                    "baseline_is": "2 replicas x 1 thread (the launcher's default)",
                    "replicas": replicas,
                    "threads": threads,
                    "p50_ms": median(latencies) * 1000,
                    "errors": float(len(errors)),
                    "replicas_cpu_ms_per_edit": cpu_s * 1000 / len(latencies),
                },
            )
        )
    return records
