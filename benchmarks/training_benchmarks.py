"""Training speed of the shipped configuration: target tokens per second, and model-FLOP utilisation against a
matrix-multiply peak measured in the same run; side by side with an older source tree when one is given.

Each timed stretch runs in its own process (benchmarks/train_worker.py) on the ``model`` package of a tree:
this repository, and ``--baseline-tree`` (e.g. ``git worktree add /tmp/old COMMIT``) in turns, so both
meet the same machine load. Training runs as ``python -m model.train --threads 2`` does: two threads.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.context import Context
from benchmarks.model_benchmarks import training_examples
from benchmarks.records import Check, Record
from benchmarks.subject import REPO
from model.training.data import collate, token_batches
from model.training.optimization import train_step
from model.transformer import Transformer

WORKER = Path(__file__).with_name("train_worker.py")
THREADS = 2
# fairseq's transformer recipes (and issue 17's): no dropout on attention probabilities or feed-forward activations
RECIPE = {"attention_dropout": 0.0, "activation_dropout": 0.0}


def matmul_peak_flops(threads: int, size: int = 1024, repeats: int = 20) -> float:
    """FLOP/s of the best of ``repeats`` fp32 (size x size) @ (size x size) products on ``threads`` threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        torch.mm(a, b)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    return 2 * size**3 / best


def flops_per_target_token(ctx: Context, max_tokens: int) -> float:
    """Model FLOPs (forward and backward, as torch's FLOP counter counts them) per target token of one training
    step on the first batch ``python -m model.train`` would make of the corpus."""
    config = ctx.subject.translator.config
    examples, _ = training_examples(ctx, limit=2000)
    batch = token_batches(examples, max_tokens, seed=1)[0]
    src, tgt = collate([examples[i] for i in batch], config.pad_id)
    model = Transformer(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = int((tgt[:, 1:] != config.pad_id).sum())
    with FlopCounterMode(display=False) as counter:
        train_step(model, model.parameters(), optimizer, src, tgt, config.pad_id, label_smoothing=0.1,
                   clip_norm=1.0, use_amp=False, loss_divisor=tokens)  # fmt: skip
    return counter.get_total_flops() / tokens


def run_worker(tree: Path, ctx: Context, steps: int, max_tokens: int, options: dict[str, float]) -> float:
    """Target tokens per second of ``steps`` training steps of ``tree``'s model package, in a process of its own."""
    command = [sys.executable, str(WORKER), "--tree", str(tree), "--checkpoint", str(ctx.subject.folder)]
    command += ["--data", str(ctx.data), "--steps", str(steps), "--threads", str(THREADS)]
    command += ["--max-tokens", str(max_tokens)]
    for name, value in options.items():
        command += [f"--{name.replace('_', '-')}", str(value)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=tree)
    if result.returncode:
        raise RuntimeError(f"train_worker on {tree} failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["tokens_per_s"]


def train_tokens_per_s(ctx: Context) -> list[Record]:
    """Training steps of the shipped configuration (the checkpoint's dropout everywhere) and of the recipe
    (attention and activation dropout 0), this tree against --baseline-tree in turns when it is given;
    model-FLOP utilisation of each against the matrix-multiply peak measured here."""
    max_tokens, steps, rounds = 3072, ctx.reps(10, 25), ctx.reps(2, 4)
    peak = matmul_peak_flops(THREADS)
    per_token = flops_per_target_token(ctx, max_tokens)
    baseline_tree = ctx.baseline_tree
    samples: dict[str, list[float]] = {"shipped": [], "recipe": [], "baseline": []}
    for _ in range(rounds):  # in turns, so that both trees meet the same load
        samples["shipped"].append(run_worker(REPO, ctx, steps, max_tokens, {}))
        samples["recipe"].append(run_worker(REPO, ctx, steps, max_tokens, RECIPE))
        if baseline_tree:
            samples["baseline"].append(run_worker(baseline_tree, ctx, steps, max_tokens, {}))
    medians = {name: statistics.median(values) for name, values in samples.items() if values}
    common = {
        "case": f"{ctx.subject.folder.name} configuration, Multi30k batches of --max-tokens {max_tokens}, {THREADS} "
        f"threads, {steps} timed steps a process, {rounds} rounds",
        "baseline_is": f"the same steps on {baseline_tree} (--baseline-tree), in turns"
        if baseline_tree
        else "none: pass --baseline-tree (a git worktree of an older commit) for the speed-up",
        "matmul_peak_gflops": peak / 1e9,
        "model_gflop_per_target_token": per_token / 1e9,
        "statistic": "median over rounds of target tokens / timed seconds",
    }
    records = []
    for name, key, options in (
        ("train_tokens_per_s", "shipped", {}),
        ("train_tokens_per_s_recipe", "recipe", RECIPE),
    ):
        value = medians[key]
        params = {**common, "options": options, "mfu": value * per_token / peak, "samples": samples[key]}
        if baseline_tree:
            params["baseline_samples"] = samples["baseline"]
        baseline = medians.get("baseline", float("nan"))
        checks = (Check("ratio", ">=", 1.5),) if baseline_tree else ()
        records.append(Record(name, value, "tokens/s", baseline, checks, params))
    return records
