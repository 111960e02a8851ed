"""The Train view's targets: how soon a class sees reverse learned, how often the page refreshes while a training
runs, whether the rest of the page still answers, what two trainings do to a classroom, and memory over many
trainings.

- ``live_reverse_s``: from Start (``TrainingPool.submit``, a fresh worker process) to held-out exact match >= 95% on
  the reverse task with the default settings; baseline: ``train_toy`` run in this process, the same seeded training
  on one thread, stopped at the same mark (ratio = the pool's overhead). The curve is in params.
- ``live_refresh_s`` and ``live_click_ms``: headless Chromium at 1280x800 on a real ``streamlit run app.py``; the
  longest gap between two redraws of the progress line while a training runs (baseline: the page's 1 s period),
  and a click on an exercise's button (a whole-page rerun) until the task box shows its task, while a training runs;
  baseline: the same clicks with no training.
- ``live_browser_reverse_s``: the same Start to 95% pressed in the Train view at 1280x800, headless Chromium on the
  server's machine (a teacher's laptop: the browser's redraws share the cores with the training); baseline: the pool
  without a browser, the same seeded training, in the same run.
- ``classroom_training_p95_ms``: app_benchmarks' classroom (30 sessions) while two trainings run in a pool of two;
  baseline: the same classroom without trainings, in turns.
- ``training_rss_mb``: this process's RSS (the server's side of a pool) after 20 trainings started and stopped in a
  row, one session replacing its finished job each time; baseline: after the first 5.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.app_benchmarks import CLASSROOM_PIECES, classroom_round, page_interaction
from benchmarks.context import Context
from benchmarks.memory import rss_mb
from benchmarks.records import Check, Record
from benchmarks.subject import sentence_with_pieces
from benchmarks.timing import median, percentile, wait_for
from explorer.admission import shared_gate
from model.training.live import Progress, train_toy
from model.training.pool import TrainingPool
from model.training.toy_settings import ToySettings

MARK = 0.95  # held-out exact match the class waits for


def _train_here_until_the_mark(settings: ToySettings) -> float:
    """Seconds for train_toy, in this process, to reach the mark."""
    reached = [False]

    def note(progress: Progress) -> None:
        reached[0] = (progress.exact_match or 0) >= MARK

    began = time.perf_counter()
    train_toy(settings, on_step=note, should_stop=lambda: reached[0])
    return time.perf_counter() - began


def _pool_until_the_mark(pool: TrainingPool, owner: str, settings: ToySettings) -> float:
    """Seconds from submitting ``settings`` to ``pool`` until its held-out exact match reaches the mark."""
    began = time.perf_counter()
    pool.submit(owner, settings)
    wait_for(lambda: (pool.view(owner).exact_match or 0) >= MARK, "95% exact match")
    return time.perf_counter() - began


def live_reverse_s(ctx: Context) -> list[Record]:
    """Start to 95% held-out exact match on reverse (default settings) through the pool vs in this process."""
    settings = replace(ToySettings(), steps=5000)
    repeats = ctx.reps(1, 3)
    pooled, direct, curve = [], [], []
    pool = TrainingPool(slots=1)
    try:
        time.sleep(3.0)  # the fork server warms up when the pool is made, as on a server before anyone presses Start
        for repeat in range(repeats):
            owner = f"bench-{repeat}"
            pooled.append(_pool_until_the_mark(pool, owner, settings))
            curve = [
                (p.step, round(p.elapsed_s, 2), p.exact_match)
                for p in pool.view(owner).history
                if p.exact_match is not None
            ]
            pool.forget(owner)
            direct.append(_train_here_until_the_mark(settings))
    finally:
        pool.close()
    return [
        Record(
            "live_reverse_s",
            median(pooled),
            "s",
            median(direct),
            (Check("value", "<=", 20.0),),
            {
                "case": "reverse, default ToySettings (2+2 layers, d_model 32, 4 heads, batch 128, lr 3e-3), "
                f"one CPU thread, until held-out exact match >= {MARK:.0%}",
                "baseline_is": "the same seeded training by train_toy in this process (no worker process)",
                "value_samples": pooled,
                "baseline_samples": direct,
                "curve_step_s_exact_match": curve,
            },
        )
    ]


def classroom_training_p95_ms(ctx: Context) -> list[Record]:
    """The 30-session classroom while two trainings run, vs the same classroom alone, in turns."""
    translator = ctx.subject.translator
    sessions, per_session, rounds = 30, ctx.reps(2, 3), ctx.reps(2, 4)
    sentences = [
        sentence_with_pieces(translator, CLASSROOM_PIECES, seed=2000 + i) for i in range(sessions * per_session)
    ]
    page_interaction(translator, sentences[0])
    texts = [[sentences[index * per_session + repeat] for repeat in range(per_session)] for index in range(sessions)]
    with_training: list[float] = []
    without: list[float] = []
    errors: list[BaseException] = []
    pool = TrainingPool(slots=2)
    try:
        for round_index in range(rounds):
            order = [(with_training, True), (without, False)]
            for latencies, training in order if round_index % 2 == 0 else order[::-1]:
                if training:
                    for owner in ("first", "second"):
                        pool.submit(owner, replace(ToySettings(), steps=20_000))
                    wait_for(lambda: all(pool.view(o).step > 0 for o in ("first", "second")), "two trainings")
                latencies.extend(classroom_round(translator, texts, errors, shared_gate()))
                if training:
                    steps = [pool.view(owner).step for owner in ("first", "second")]
                    for owner in ("first", "second"):
                        pool.forget(owner)
    finally:
        pool.close()
    if errors:
        raise RuntimeError(f"{len(errors)} classroom sessions failed") from errors[0]
    return [
        Record(
            "classroom_training_p95_ms",
            percentile(with_training, 95) * 1000,
            "ms",
            percentile(without, 95) * 1000,
            (Check("value", "<=", 2500.0),),
            {
                "case": f"{sessions} sessions x {per_session} interactions x {rounds} rounds, two trainings running",
                "baseline_is": "p95 of the same classroom with no training, in turns",
                "trainings": "two TrainingPool workers (one thread each, niced), reverse, default model",
                "training_steps_during_last_round": steps,
                "value_samples": [t * 1000 for t in with_training],
                "baseline_samples": [t * 1000 for t in without],
                "statistic": "p95 (linear interpolation)",
            },
        )
    ]


def training_rss_mb(ctx: Context) -> list[Record]:
    """RSS of this process (a pool's server side) after 20 trainings started and stopped, vs after 5."""
    import os

    pool = TrainingPool(slots=1)
    samples = []
    try:
        for index in range(20):
            pool.submit("session", replace(ToySettings(), steps=20_000, seed=index))
            wait_for(lambda: pool.view("session").exact_match is not None, "a first measurement")
            pool.stop("session")
            wait_for(lambda: pool.view("session").state == "finished", "the stop")
            samples.append(rss_mb(os.getpid()))
    finally:
        pool.close()
    return [
        Record(
            "training_rss_mb",
            samples[-1],
            "MB",
            samples[4],
            (Check("ratio", "<=", 1.05),),
            {
                "case": "20 trainings in a row by one session, each stopped after its first measurement; the "
                "session keeps its last result, as the page does",
                "baseline_is": "the same process's RSS after the 5th",
                "rss_mb_after_each": samples,
            },
        )
    ]


# --- the browser ---------------------------------------------------------------------------------------------------

PROGRESS_TEXT = """
const bar = document.querySelector('[data-testid="stProgress"]');
return bar ? bar.innerText : '';
"""
EXACT_MATCH = re.compile(r"exact match (\d+)%")  # in the progress line
TASK_BOX = """
const box = document.querySelector('input[aria-label="Task"]');
return box ? box.value : '';
"""


def _press(driver, label: str) -> None:
    """Click the enabled button labelled ``label`` (in the page's script: a sticky header may cover it)."""
    from selenium.webdriver.common.by import By

    path = f"//button[.//p[normalize-space(.)='{label}']][not(@disabled)]"
    driver.execute_script("arguments[0].click()", wait_for(lambda: driver.find_elements(By.XPATH, path), label)[0])


def _click_exercise(driver, title: str, task: str) -> float:
    """Click an exercise's button; ms until the task box shows ``task``."""

    began = time.perf_counter()
    _press(driver, title)
    wait_for(lambda: driver.execute_script(TASK_BOX) == task, f"the task box to show {task}")
    return (time.perf_counter() - began) * 1000


def _clicks(driver, count: int) -> list[float]:
    """Alternate two exercises whose tasks differ; each click reruns the whole page."""
    times = []
    for index in range(count):
        exercise = (
            ("Copy with one head", "copy") if index % 2 == 0 else ("Sort, without the positional encoding", "sort")
        )
        times.append(_click_exercise(driver, *exercise))
        time.sleep(0.3)
    return times


def _shown_exact_match(driver) -> float:
    """The held-out exact match the progress line shows (0 before the first measurement)."""
    found = EXACT_MATCH.search(driver.execute_script(PROGRESS_TEXT))
    return int(found[1]) / 100 if found else 0.0


def browser_live(ctx: Context, names: tuple[str, ...]) -> list[Record]:
    """live_browser_reverse_s, live_refresh_s and live_click_ms in headless Chromium on a real server."""
    from tests.browser_helpers import chromium, missing_browser, streamlit_server

    reason = missing_browser()
    if reason:
        raise RuntimeError(f"needs headless Chromium: {reason}")
    clicks = ctx.reps(4, 8)
    settings = replace(ToySettings(), steps=20_000)  # as the page's link below asks
    pool = TrainingPool(slots=1)
    try:
        time.sleep(3.0)  # the fork server warms up, as the page's pool does before anyone presses Start
        without_browser = _pool_until_the_mark(pool, "bench-alone", settings)
    finally:
        pool.close()
    with tempfile.TemporaryDirectory(prefix="bench-live-") as root:
        folder = Path(root) / ctx.subject.folder.name
        folder.symlink_to(ctx.subject.folder.resolve())
        with (
            streamlit_server(Path(root)) as url,
            chromium(Path(tempfile.mkdtemp(prefix="bench-chromium-")), width=1280, height=800) as driver,
        ):
            driver.get(f"{url}/?view=train&train_steps=20000")
            wait_for(lambda: driver.execute_script(TASK_BOX) == "reverse", "the Train view", 90)
            idle = _clicks(driver, clicks + 1)[1:]  # the first click of a new page pays for loading it
            _click_exercise(driver, "Reverse, with the positional encoding", "reverse")
            time.sleep(3.0)  # the page's pool warmed up as the one above
            began = time.perf_counter()
            _press(driver, "Start")
            wait_for(lambda: _shown_exact_match(driver) >= MARK, "95% exact match on the page", 120)
            in_the_browser = time.perf_counter() - began
            changes, last, began = [], driver.execute_script(PROGRESS_TEXT), time.perf_counter()
            while time.perf_counter() - began < ctx.reps(10, 20):
                text = driver.execute_script(PROGRESS_TEXT)
                if text != last:
                    changes.append(time.perf_counter())
                    last = text
                time.sleep(0.02)
            gaps = [later - earlier for earlier, later in zip(changes, changes[1:], strict=False)]
            busy = _clicks(driver, clicks)  # the settings are locked while it trains; an exercise still sets them
            _press(driver, "Stop")
    records = []
    if "live_browser_reverse_s" in names:
        records.append(
            Record(
                "live_browser_reverse_s",
                in_the_browser,
                "s",
                without_browser,
                (Check("value", "<=", 20.0),),
                {
                    "case": "reverse, default ToySettings, Start pressed in the Train view until the page shows "
                    f"held-out exact match >= {MARK:.0%}, headless Chromium at 1280x800 on the same machine",
                    "baseline_is": "the same seeded training through a pool with no browser, in the same run",
                },
            )
        )
    if "live_refresh_s" in names:
        records.append(
            Record(
                "live_refresh_s",
                max(gaps),
                "s",
                1.0,
                (Check("value", "<=", 1.5),),
                {
                    "case": "the progress line of a running training (default reverse) in headless Chromium",
                    "baseline_is": "the page's refresh period (explorer.views.train.REFRESH_S)",
                    "value_samples": gaps,
                    "median_gap_s": median(gaps),
                    "redraws": len(changes),
                },
            )
        )
    if "live_click_ms" in names:
        records.append(
            Record(
                "live_click_ms",
                median(busy),
                "ms",
                median(idle),
                (Check("value", "<=", 500.0),),
                {
                    "case": "an exercise's button (a whole-page rerun) until the task box shows its task",
                    "baseline_is": "the same clicks with no training running",
                    "value_samples": busy,
                    "baseline_samples": idle,
                    "p95_ms": percentile(busy, 95),
                },
            )
        )
    return records
