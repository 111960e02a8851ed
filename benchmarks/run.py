"""Run the benchmarks: ``python -m benchmarks.run [--quick] [--device cpu|cuda] [--out FILE] [--checkpoint DIR]
[--only NAME,...]``.

Each benchmark is a ratio against a baseline measured in the same run (candidate and
baseline timed in turns after warm-up, medians compared). Prints a table, then one JSON
line per result: {"name", "value", "unit", "baseline", "ratio", "target", "met", "params"}.
Targets are reported, never asserted: the exit status is 0 whenever every benchmark ran.
"""

from __future__ import annotations

import os

# Measure what the app runs: app.py gives every request (a session's thread) one intra-op CPU thread, and
# so does this harness unless OMP_NUM_THREADS or --threads says otherwise. Set, as there, before torch is
# first imported. On a busy 2-core machine two intra-op threads per request thrash.
os.environ.setdefault("OMP_NUM_THREADS", "1")
import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks import (
    app_benchmarks,
    browser_benchmarks,
    class_load,
    live_training,
    memory,
    model_benchmarks,
    proxy_load,
    sampling_benchmarks,
    training_benchmarks,
    training_vs_torch,
)
from benchmarks.context import DEFAULT_DATA, Context
from benchmarks.records import Record, table
from benchmarks.subject import resolve_subject


@dataclass(frozen=True)
class Benchmark:
    """One or more record names produced by one function (``run(ctx, names)``), so that names sharing
    costly set-up (an AppTest session) are measured together when both are asked for."""

    names: tuple[str, ...]
    run: Callable[[Context, tuple[str, ...]], list[Record]]
    summary: str
    # where it runs unless named in --only (a Multi30k training epoch takes minutes on a CPU)
    default_devices: tuple[str, ...] = ("cpu", "cuda")
    needs_data: bool = False  # reads the training corpus in --data


def single(function: Callable[[Context], list[Record]]) -> Callable[[Context, tuple[str, ...]], list[Record]]:
    return lambda ctx, names: function(ctx)


BENCHMARKS = (
    Benchmark(
        ("forward_vs_torch",),
        single(model_benchmarks.forward_vs_torch),
        "forward, nothing captured, vs tutorial nn.Transformer (batch 1 and 64 x 30)",
    ),
    Benchmark(
        ("capture_overhead",),
        single(model_benchmarks.capture_overhead),
        "forward with every attention captured vs without",
    ),
    Benchmark(
        ("activation_capture_overhead",),
        single(model_benchmarks.activation_capture_overhead),
        "forward with every hook point of Figure 1 captured vs without",
    ),
    Benchmark(
        ("kv_cache_speedup",),
        single(model_benchmarks.kv_cache_speedup),
        "greedy 60 tokens with the KV cache vs recomputing the prefix",
    ),
    Benchmark(("step_ms",), single(model_benchmarks.step_ms), "one cached decoding step under capture"),
    Benchmark(("trace_ms",), single(model_benchmarks.trace_ms), "Translator.trace, 30 pieces, beam 5"),
    Benchmark(
        ("opus_trace_ms",),
        single(model_benchmarks.opus_trace_ms),
        "Translator.trace at opus-mt-en-de's shape (random weights) vs the shipped model, 30 pieces",
    ),
    Benchmark(
        ("sampled_trace_ms",),
        single(sampling_benchmarks.sampled_trace_ms),
        "Translator.trace sampling vs greedy, on the same output",
    ),
    Benchmark(
        ("sample_again_ms",),
        single(sampling_benchmarks.sample_again_ms),
        "sample again: 20 draws in one batch, scored, vs 20 sampled traces",
    ),
    Benchmark(("figures_ms",), single(app_benchmarks.figures_ms), "default-view figures built and serialised"),
    Benchmark(
        ("attribution_ms",), single(model_benchmarks.attribution_ms), "every attribution method of a 30-piece trace"
    ),
    Benchmark(
        ("app_edit_ms", "app_step_ms"), app_benchmarks.app_reruns, "AppTest rerun after a sentence edit / a step button"
    ),
    Benchmark(
        ("classroom_p95_ms",),
        single(app_benchmarks.classroom_p95_ms),
        "30 concurrent sessions on the shared model, p95 latency",
    ),
    Benchmark(
        (
            "first_heatmap_ms",
            "edit_redraw_ms",
            "head_switch_ms",
            "view_switch_ms",
            "map_click_ms",
            "step_redraw_ms",
            "edit_overhead_ms",
            "opus_edit_overhead_ms",
        ),
        browser_benchmarks.browser_times,
        "headless Chromium at 1280x800: first heatmap of a new page, Enter to redrawn heatmap, a head, view or step "
        "change (vs a bare page); an edit minus the model's trace, also at opus-mt-en-de's shape",
    ),
    Benchmark(("long_input_ms",), single(app_benchmarks.long_input_ms), "256-piece source: trace and all-heads grid"),
    Benchmark(
        ("train_tokens_vs_torch",),
        single(training_vs_torch.train_tokens_vs_torch),
        "training tokens/s vs the tutorial nn.Transformer",
    ),
    Benchmark(
        tuple(training_benchmarks.CASES),
        training_benchmarks.train_tokens_per_s,
        "training steps of the shipped configuration and of the recipe (no attention/activation dropout), "
        "2 threads, fp32 and --cpu-bf16, model-FLOP utilisation; vs --baseline-tree in turns",
        default_devices=("cpu",),  # it times CPU training (the worker processes), whatever --device says
        needs_data=True,
    ),
    Benchmark(
        ("live_reverse_s",),
        single(live_training.live_reverse_s),
        "Train view: Start to 95% held-out exact match on reverse, through the pool vs in-process",
    ),
    Benchmark(
        ("live_browser_reverse_s", "live_refresh_s", "live_click_ms"),
        live_training.browser_live,
        "Train view in headless Chromium: Start to 95% with the browser on the machine vs without; longest gap "
        "between redraws while training; a click's rerun while training",
    ),
    Benchmark(
        ("classroom_training_p95_ms",),
        single(live_training.classroom_training_p95_ms),
        "30 concurrent sessions while two trainings run vs none, p95 latency",
    ),
    Benchmark(
        ("training_rss_mb",),
        single(live_training.training_rss_mb),
        "server RSS after 20 trainings started and stopped vs after 5",
    ),
    Benchmark(
        ("server_rss_mb",), single(memory.server_rss_mb), "RSS of a real `streamlit run app.py` after 10 and 100 traces"
    ),
    Benchmark(
        ("model_budget_rss_mb",),
        single(memory.model_budget_rss_mb),
        "peak RSS of a server whose budget holds 1.5 opus-mt-en-de-shaped models while 10 sessions open two in turns",
    ),
    Benchmark(
        ("proxy_p95_ms",),
        single(proxy_load.proxy_p95_ms),
        "sessions through nginx (python -m deploy.launch), 30/60/120 at once: p95 with 2 replicas vs 1, and errors",
    ),
    Benchmark(
        ("proxy_failover_s",),
        single(proxy_load.proxy_failover_s),
        "60 sessions on 2 replicas behind nginx, the busier one killed: seconds until its sessions are back",
    ),
    Benchmark(
        ("hall_threads_p95_ms",),
        single(proxy_load.hall_threads_p95_ms),
        "30 sessions through nginx with 1 or 2 replicas x 1 thread or one per core per page run: p95 of an edit",
    ),
    Benchmark(
        ("class_follow_p95_ms",),
        single(class_load.class_follow_p95_ms),
        "a teacher and 60 students on 2 replicas behind nginx: each teacher move until every student's page shows it",
    ),
    Benchmark(
        ("class_answers_failover",),
        single(class_load.class_answers_failover),
        "60 answers to one question, the replica holding half the students killed in the middle: counted once each",
    ),
    Benchmark(
        ("train_epoch_s",),
        single(training_vs_torch.train_epoch_s),
        "wall time of one training epoch on Multi30k, ours and the tutorial nn.Transformer in turns "
        "(CUDA only unless named in --only: it takes minutes on a CPU)",
        default_devices=("cuda",),
        needs_data=True,
    ),
)
NAMES = tuple(name for benchmark in BENCHMARKS for name in benchmark.names)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Benchmarks of the attention explorer, each against a baseline measured in the same run. "
        "Prints a table and one JSON line per result; targets are reported (met: true/false), never asserted.",
        epilog="Benchmarks: " + ", ".join(NAMES) + ". See benchmarks/README.md for what each one measures.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer repeats and smaller sizes: every benchmark in a few minutes, with noisier numbers",
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="where the model runs (auto: CUDA when available, else CPU)",
    )
    parser.add_argument("--out", type=Path, help="also write the JSON lines to this file (overwritten)")
    parser.add_argument(
        "--checkpoint",
        help="checkpoint folder, or 'random' for random weights with the shipped architecture "
        "(default: checkpoints/multi30k-en-de, else the newest folder under checkpoints/, else random)",
    )
    parser.add_argument(
        "--only", help="comma-separated benchmark names to run (default: all that run by default on the device)"
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="Multi30k folder ({split}.{lang}[.gz]) for train_epoch_s",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch intra-op CPU threads per working thread (default: OMP_NUM_THREADS, else 1 as in app.py)",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="an older source tree (git worktree add /tmp/old COMMIT) whose training steps train_tokens_per_s "
        "times in turns with this one's",
    )
    parser.add_argument("--list", action="store_true", help="print the benchmark names with a summary and exit")
    return parser


def selected(only: str | None) -> list[tuple[Benchmark, tuple[str, ...]]]:
    wanted = [name.strip() for name in (only or "").split(",") if name.strip()] or list(NAMES)
    unknown = sorted(set(wanted) - set(NAMES))
    if unknown:
        raise SystemExit(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(NAMES)}")
    return [
        (benchmark, names)
        for benchmark in BENCHMARKS
        if (names := tuple(name for name in benchmark.names if name in wanted))
    ]


def has_training_data(folder: Path) -> bool:
    return any(folder.glob("train.*"))


def runnable(
    plan: list[tuple[Benchmark, tuple[str, ...]]], named: bool, device: str, data: Path
) -> tuple[list[tuple[Benchmark, tuple[str, ...]]], list[str]]:
    """The plan without what does not run here, and why each left-out one did not. A benchmark named in --only
    (``named``) runs on any device, and one that needs missing data is then an error rather than a skip."""
    kept, skipped = [], []
    for benchmark, names in plan:
        if benchmark.needs_data and not has_training_data(data):
            if named:
                raise SystemExit(f"{', '.join(names)}: no training files (train.*) in {data}; pass --data FOLDER")
            skipped.append(f"{', '.join(names)}: no training data in {data} (--data)")
        elif not named and device not in benchmark.default_devices:
            skipped.append(f"{', '.join(names)}: not run on {device} unless named in --only")
        else:
            kept.append((benchmark, names))
    return kept, skipped


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for benchmark in BENCHMARKS:
            print(f"{' / '.join(benchmark.names)}: {benchmark.summary}")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)  # threads started later (the classroom's sessions) take it up too
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available here")
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    plan, skipped = runnable(selected(args.only), bool(args.only), device, args.data)
    subject = resolve_subject(args.checkpoint, device)
    ctx = Context(subject, args.quick, args.data, args.baseline_tree)
    shared = subject.describe() | {"quick": args.quick}
    if subject.notes:
        shared["checkpoint_notes"] = subject.notes
    print(f"subject: {shared}", file=sys.stderr)
    records: list[Record] = []
    started = time.perf_counter()
    try:
        for benchmark, names in plan:
            began = time.perf_counter()
            print(f"running {', '.join(names)} ...", file=sys.stderr, flush=True)
            produced = benchmark.run(ctx, names)
            for record in produced:
                record.params = {**record.params, **shared, "benchmark_seconds": time.perf_counter() - began}
            records.extend(produced)
    finally:
        subject.close()
    print(table(records))
    for reason in skipped:
        print(f"skipped {reason}")
    targets = [record for record in records if record.checks]
    print(
        f"\n{len(records)} results in {time.perf_counter() - started:.0f} s "
        f"({sum(record.met for record in targets)} of {len(targets)} targets met)\n"
    )
    lines = [record.to_json() for record in records]
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
