"""This source tree against an older one on the same work, for a change that must not slow anything down.

Each turn is a fresh process that imports one tree's ``model`` and ``viz`` and times a set of
workloads through the public API (greedy and beam-5 traces, a batch translation, the default
view's figures, the attributions) on the same checkpoint; the trees take their turns in the
order A B B A A B ..., so a background load hits both alike. The result is one JSON line per
workload with the median seconds of each tree and their ratio (this tree / baseline).

    git worktree add /tmp/baseline COMMIT
    python -m benchmarks.tree_comparison --baseline-tree /tmp/baseline --turns 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SENTENCES = (
    "A man in a blue shirt is riding a bike down the street.",
    "Two young girls are playing with a brown dog in the park.",
    "The stock market crashed yesterday.",
    "A woman with a red umbrella walks past a crowded cafe in the rain.",
)

# Run inside one tree (its folder first on sys.path): time each workload, print {name: [seconds, ...]}.
WORKER = r"""
import json, sys, time
from model import load_checkpoint  # the tree's own modules first: a tree that cannot load them fails at once
from model.heads import ATTENTION_KINDS  # each tree's own names for the kinds of attention
from viz import attention_axes, attention_grid, attention_heatmap
import torch
torch.set_num_threads(1)

sentences, checkpoint, repeats = json.loads(sys.argv[1])
translator = load_checkpoint(checkpoint, device="cpu")


def attribute(trace):
    from model.analysis import attribution
    for method in attribution.ATTRIBUTION_METHODS:
        if hasattr(translator, "attribute"):
            translator.attribute(trace, method)
        else:
            attribution.attribute(translator, trace, method)  # analyses take the translator


def figures(trace):
    for kind in ATTENTION_KINDS:
        axes = attention_axes(trace, kind)
        attention_heatmap(axes.stack[0, 0], axes.query_pieces, axes.key_pieces).to_json()
        attention_grid(axes.stack, axes.query_pieces, axes.key_pieces).to_json()


traces = [translator.trace(s, beam_size=1) for s in sentences]
work = {
    "trace_greedy_s": lambda: [translator.trace(s, beam_size=1) for s in sentences],
    "trace_beam5_s": lambda: [translator.trace(s, beam_size=5) for s in sentences],
    "translate_batch_beam5_s": lambda: translator.translate_batch(list(sentences) * 4, beam_size=5),
    "figures_s": lambda: [figures(t) for t in traces],
    "attribution_s": lambda: [attribute(t) for t in traces[:2]],
}
for name, run in work.items():
    run()  # warm-up
times = {name: [] for name in work}
for _ in range(repeats):
    for name, run in work.items():
        start = time.perf_counter()
        run()
        times[name].append(time.perf_counter() - start)
print("RESULT " + json.dumps(times))
"""


def run_turn(tree: Path, checkpoint: Path, repeats: int) -> dict[str, list[float]]:
    """One fresh process in ``tree``: its timings per workload."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    argument = json.dumps([list(SENTENCES), str(checkpoint), repeats])
    done = subprocess.run(
        [sys.executable, "-c", WORKER, argument], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the workload failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def compare(baseline: Path, checkpoint: Path, turns: int, repeats: int) -> list[dict[str, object]]:
    """Median seconds per workload of this tree and of ``baseline``, in turns A B B A ..."""
    samples: dict[str, dict[str, list[float]]] = {"candidate": {}, "baseline": {}}
    for turn in range(turns):
        order = ("candidate", "baseline") if turn % 2 == 0 else ("baseline", "candidate")
        for side in order:
            tree = REPO if side == "candidate" else baseline
            for name, seconds in run_turn(tree, checkpoint, repeats).items():
                samples[side].setdefault(name, []).extend(seconds)
    records = []
    for name, candidate in samples["candidate"].items():
        ours, theirs = statistics.median(candidate), statistics.median(samples["baseline"][name])
        records.append({"name": name, "candidate_s": ours, "baseline_s": theirs, "ratio": ours / theirs})
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tree_comparison",
        description="Time the same public-API work in this tree and in an older one, in turns; print the ratios.",
    )
    parser.add_argument("--baseline-tree", type=Path, required=True, help="the older tree (git worktree add DIR REV)")
    parser.add_argument(
        "--checkpoint", type=Path, default=REPO / "checkpoints" / "multi30k-en-de", help="checkpoint both trees load"
    )
    parser.add_argument("--turns", type=int, default=4, help="processes per tree, alternating (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per process (default: %(default)s)")
    args = parser.parse_args(argv)
    if not (args.baseline_tree / "model").is_dir():
        parser.error(f"{args.baseline_tree} is not a source tree of this project (no model/ folder)")
    for record in compare(args.baseline_tree.resolve(), args.checkpoint.resolve(), args.turns, args.repeats):
        rounded = {key: round(value, 4) if isinstance(value, float) else value for key, value in record.items()}
        print(json.dumps(rounded))


if __name__ == "__main__":
    main()
