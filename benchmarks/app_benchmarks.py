"""Benchmarks of what the page does: the default view's figures, AppTest reruns, a classroom of
concurrent sessions, and a 256-piece input.

The page's views draw only inside a Streamlit run, so the page's code path is mirrored here
from its pure parts (Translator.trace and the viz builders it calls with the default widget
values), and each figure is serialised the way st.plotly_chart does it. The AppTest
benchmarks run app.py itself.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import plotly.graph_objects as go
import plotly.io
import plotly.tools

import viz
from benchmarks.context import Context
from benchmarks.records import Check, Record
from benchmarks.subject import REPO, sentence_with_pieces
from benchmarks.timing import alternate, median, percentile, time_call
from explorer.admission import FifoGate, shared_gate
from model.trace import Trace

APP = REPO / "app.py"
CHECKPOINTS_ENV = "ATTENTION_EXPLORER_CHECKPOINTS"
DEFAULT_DISPLAY = {"merge_words": False, "show_special": True, "annotate": False}  # the sidebar's defaults
APP_BEAM = 1  # the page's default search is greedy
CLASSROOM_PIECES = 15  # a typical Multi30k sentence


def default_view_figures(trace: Trace, display: dict | None = None) -> list[go.Figure]:
    """The figure app.py draws on first load, the cross-attention heatmap of one head (the last layer's head 0, the
    size of the readable head the page opens on), and two a click away: the output probabilities (in the folded
    details) and step 0's figure of the decoding steps (presenter mode's first view), each with the margins the
    page's show_figure fits to its labels."""
    display = dict(DEFAULT_DISPLAY if display is None else display)
    axes = viz.attention_axes(trace, "cross")
    layer = axes.stack.shape[0] - 1
    figures = [
        viz.attention_heatmap(axes.stack[layer, 0], axes.query_pieces, axes.key_pieces, **display, title="Cross"),
        viz.token_probabilities(trace.predicted_pieces, trace.step_probs, title="Probability of each output token"),
    ]
    step = viz.decoding_step(trace, 0, layer)
    figures.append(viz.decoding_step_figure(step, trace.source_pieces, **display, title="Step 1"))
    return [viz.fit_margins(figure) for figure in figures]


def grid_figure(trace: Trace, kind: str = "encoder_self") -> go.Figure:
    """The "All heads" display of one attention kind: every layer x head."""
    axes = viz.attention_axes(trace, kind)
    grid_display = {k: v for k, v in DEFAULT_DISPLAY.items() if k != "annotate"}
    return viz.attention_grid(axes.stack, axes.query_pieces, axes.key_pieces, **grid_display, title=kind)


def serialise(figure: go.Figure) -> str:
    """What st.plotly_chart does with a figure before sending it: validate-copy, then JSON."""
    return plotly.io.to_json(
        plotly.tools.return_figure_from_figure_or_data(figure, validate_figure=True), validate=False
    )


def draw(figures_of: Callable[[Trace], list[go.Figure]], trace: Trace) -> int:
    """Build and serialise figures; return the JSON size in bytes (what goes to the browser)."""
    return sum(len(serialise(figure)) for figure in figures_of(trace))


def figures_ms(ctx: Context) -> list[Record]:
    """Every figure of the default view for the trace_ms trace (30 pieces, beam 5), built and serialised."""
    translator = ctx.subject.translator
    trace = translator.trace(sentence_with_pieces(translator, 30, seed=8), beam_size=5)
    budget = 150.0
    size = draw(default_view_figures, trace)
    times = [time_call(lambda: draw(default_view_figures, trace)) for _ in range(ctx.reps(5, 21))]
    value = median(times) * 1000
    return [
        Record(
            "figures_ms",
            value,
            "ms",
            budget,
            (Check("value", "<=", budget),),
            {
                "case": f"{len(trace.source_ids)} source, {trace.n_steps} steps",
                "baseline_is": "the target budget (150 ms): ratio is the share of the budget used",
                "figures": "token probabilities, step top-k, step cross rows, step self rows, encoder L0H0 heatmap",
                "includes": "viz builders + plotly.tools.return_figure_from_figure_or_data + plotly.io.to_json, "
                "as st.plotly_chart does",
                "json_bytes": size,
                "value_samples": [t * 1000 for t in times],
                "statistic": "median",
            },
        )
    ]


def page_interaction(translator, text: str) -> int:
    """One classroom interaction through the page's code path: a new sentence is traced (greedy, the
    page's default) and the default view drawn."""
    return draw(default_view_figures, translator.trace(text, beam_size=APP_BEAM))


def classroom_round(
    translator, texts: list[list[str]], errors: list[BaseException], gate: FifoGate | None = None
) -> list[float]:
    """One thread per session, all released at once; each makes its interactions in turn. Seconds each,
    from asking to done: with a ``gate``, the time spent waiting for it counts."""
    start = threading.Barrier(len(texts))
    lock = threading.Lock()
    latencies: list[float] = []

    def interaction(text: str) -> None:
        with gate or nullcontext():
            page_interaction(translator, text)

    def session(own: list[str]) -> None:
        try:
            start.wait()
            for text in own:
                elapsed = time_call(lambda text=text: interaction(text))
                with lock:
                    latencies.append(elapsed)
        except BaseException as error:  # noqa: BLE001 - reported after the join
            errors.append(error)

    threads = [threading.Thread(target=session, args=(own,)) for own in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def classroom_p95_ms(ctx: Context) -> list[Record]:
    """30 sessions at once (threads) on different sentences against the one shared model; p95 latency of an
    interaction, vs the p95 of the same kind of interaction made by one session alone.

    Each interaction passes the page's first-come, first-served gate (explorer.admission.shared_gate), as
    every page run does; each round also runs the same classroom without it (``params.without_gate``).
    """
    translator = ctx.subject.translator
    sessions = 30
    per_session = ctx.reps(2, 5)
    rounds = ctx.reps(1, 3)
    alone_count = ctx.reps(8, 20)
    sentences = [
        sentence_with_pieces(translator, CLASSROOM_PIECES, seed=1000 + i) for i in range(sessions * per_session)
    ]
    page_interaction(translator, sentences[0])  # warm-up
    gated: list[float] = []
    ungated: list[float] = []
    alone: list[float] = []
    errors: list[BaseException] = []
    for round_index in range(rounds):
        for i in range(alone_count):  # one session alone: the baseline, timed in turn with the classroom
            text = sentences[(round_index * 7 + i) % len(sentences)]
            alone.append(time_call(lambda text=text: page_interaction(translator, text)))
        texts = [
            [sentences[(index * per_session + repeat + round_index) % len(sentences)] for repeat in range(per_session)]
            for index in range(sessions)
        ]
        order = [(gated, shared_gate()), (ungated, None)]  # which goes first alternates between rounds
        for latencies, gate in order if round_index % 2 == 0 else order[::-1]:
            latencies.extend(classroom_round(translator, texts, errors, gate))
    if errors:
        raise RuntimeError(f"{len(errors)} classroom sessions failed") from errors[0]
    value, baseline = percentile(gated, 95) * 1000, percentile(alone, 95) * 1000
    return [
        Record(
            "classroom_p95_ms",
            value,
            "ms",
            baseline,
            (Check("value", "<=", 2000.0),),
            {
                "case": f"{sessions} sessions x {per_session} interactions x {rounds} rounds",
                "baseline_is": "p95 of the same interaction made by one session alone (no contention)",
                "interaction": f"Translator.trace (greedy, {CLASSROOM_PIECES}-piece sentences, all different) + "
                "default-view figures serialised, behind the page's gate (the wait counts); streamlit's own rerun "
                "overhead is not included (see app_edit_ms)",
                "gate_slots": shared_gate().slots,
                "median_concurrent_ms": median(gated) * 1000,
                "median_alone_ms": median(alone) * 1000,
                "value_samples": [t * 1000 for t in gated],
                "baseline_samples": [t * 1000 for t in alone],
                "statistic": "p95 (linear interpolation)",
                "without_gate": {
                    "what": "the same classroom with every interaction started at once (no explorer.admission gate)",
                    "p95_ms": percentile(ungated, 95) * 1000,
                    "median_ms": median(ungated) * 1000,
                    "samples": [t * 1000 for t in ungated],
                },
            },
        )
    ]


def long_input_ms(ctx: Context) -> list[Record]:
    """A 256-piece source (the model's max_len): full trace and the encoder's all-heads grid (built and
    serialised) vs the same for a 30-piece source."""
    translator = ctx.subject.translator
    long_text = sentence_with_pieces(translator, translator.config.max_len, seed=9)
    short_text = sentence_with_pieces(translator, 30, seed=9)
    beam = 5
    traces = {}

    def work(text: str) -> int:
        trace = translator.trace(text, beam_size=beam)
        traces[text] = trace
        return len(serialise(grid_figure(trace, "encoder_self")))

    paired = alternate(lambda: work(long_text), lambda: work(short_text), ctx.reps(1, 5), 0, ctx.subject.device)
    long_trace = traces[long_text]
    return [
        Record(
            "long_input_ms",
            median(paired.candidate) * 1000,
            "ms",
            median(paired.baseline) * 1000,
            (Check("value", "<=", 3000.0),),
            {
                "case": f"{len(long_trace.source_ids)} source pieces, beam {beam}",
                "baseline_is": f"the same work for a {len(traces[short_text].source_ids)}-piece sentence",
                "output_tokens": long_trace.n_steps,
                "grid": "encoder self-attention, every layer x head, built + serialised",
                "grid_json_bytes": len(serialise(grid_figure(long_trace, "encoder_self"))),
                "value_samples": [t * 1000 for t in paired.candidate],
                "baseline_samples": [t * 1000 for t in paired.baseline],
                "statistic": "median",
            },
        )
    ]


@contextmanager
def app_checkpoints(folder: Path) -> Iterator[Path]:
    """A checkpoints folder holding only the subject (so the page's scan builds one model), set for the app."""
    with tempfile.TemporaryDirectory(prefix="bench-app-") as root:
        shutil.copytree(folder, Path(root) / folder.name)
        previous = os.environ.get(CHECKPOINTS_ENV)
        os.environ[CHECKPOINTS_ENV] = root
        try:
            yield Path(root)
        finally:
            if previous is None:
                os.environ.pop(CHECKPOINTS_ENV, None)
            else:
                os.environ[CHECKPOINTS_ENV] = previous


@contextmanager
def server_script_cache() -> Iterator[None]:
    """AppTest runs share one compiled app.py, as a server's runs do.

    A Streamlit server keeps one ScriptCache for its life, so app.py is parsed and compiled
    once; AppTest makes a new cache for every run, which would put that compilation (a large share
    of a rerun) into every timing.
    """
    from unittest import mock

    from streamlit.runtime.scriptrunner.script_cache import ScriptCache

    shared = ScriptCache()
    with (  # AppTest's run makes one for its pages, the script runner it starts another for the code
        mock.patch("streamlit.testing.v1.app_test.ScriptCache", lambda: shared),
        mock.patch("streamlit.testing.v1.local_script_runner.ScriptCache", lambda: shared),
    ):
        yield


def _run_app(app) -> None:
    app.run()
    if app.exception:
        raise RuntimeError(f"app.py raised: {[error.value for error in app.exception]}")


def app_reruns(ctx: Context, which: tuple[str, ...]) -> list[Record]:
    """AppTest reruns of app.py: after typing a new sentence (edit) and after the Next/Previous step
    buttons (step), each timed in turn with a rerun that changes nothing."""
    from streamlit.testing.v1 import AppTest

    translator = ctx.subject.translator
    records = []
    with app_checkpoints(ctx.subject.folder), server_script_cache():
        app = AppTest.from_file(str(APP), default_timeout=300)
        if ctx.subject.device.type != "cuda":
            app.session_state["device"] = "cpu"
        cold = time_call(lambda: _run_app(app))
        repeats = ctx.reps(5, 15)
        texts = iter([sentence_with_pieces(translator, CLASSROOM_PIECES, seed=2000 + i) for i in range(repeats + 2)])
        noop = lambda: _run_app(app)  # noqa: E731

        if "app_edit_ms" in which:

            def edit() -> None:
                app.text_input(key="sentence").input(next(texts))
                _run_app(app)

            paired = alternate(edit, noop, repeats, 1)
            records.append(
                Record(
                    "app_edit_ms",
                    median(paired.candidate) * 1000,
                    "ms",
                    median(paired.baseline) * 1000,
                    (Check("value", "<=", 600.0),),
                    {
                        "case": f"new {CLASSROOM_PIECES}-piece sentence, greedy (page default)",
                        "baseline_is": "an AppTest rerun that changes nothing (trace cached): the page's fixed cost",
                        "cold_first_run_ms": cold * 1000,
                        "script_compiled": "once for all runs, as on a server (server_script_cache)",
                        "value_samples": [t * 1000 for t in paired.candidate],
                        "baseline_samples": [t * 1000 for t in paired.baseline],
                        "statistic": "median",
                    },
                )
            )
        if "app_step_ms" in which:
            app.segmented_control(key="view").set_value("steps")  # the step buttons live in the steps view
            _run_app(app)
            clicks = {"n": 0}

            def step() -> None:  # Next, then Previous: one step each, and the step never runs off the end
                clicks["n"] += 1
                app.button(key="step_next" if clicks["n"] % 2 else "step_previous").click()
                _run_app(app)

            paired = alternate(step, noop, repeats, 1)
            records.append(
                Record(
                    "app_step_ms",
                    median(paired.candidate) * 1000,
                    "ms",
                    median(paired.baseline) * 1000,
                    (Check("value", "<=", 150.0),),
                    {
                        "case": "Next/Previous step button",
                        "baseline_is": "an AppTest rerun that changes nothing (trace cached)",
                        "note": "AppTest reruns the whole script; in a browser the step buttons rerun only the "
                        "decoding_steps fragment, so this is an upper bound",
                        "cold_first_run_ms": cold * 1000,
                        "script_compiled": "once for all runs, as on a server (server_script_cache)",
                        "value_samples": [t * 1000 for t in paired.candidate],
                        "baseline_samples": [t * 1000 for t in paired.baseline],
                        "statistic": "median",
                    },
                )
            )
    return records


def app_edit_ms(ctx: Context) -> list[Record]:
    return app_reruns(ctx, ("app_edit_ms",))


def app_step_ms(ctx: Context) -> list[Record]:
    return app_reruns(ctx, ("app_step_ms",))
