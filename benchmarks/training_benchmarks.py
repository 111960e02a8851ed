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
from benchmarks.records import Check, Record
from benchmarks.subject import REPO
from benchmarks.training_vs_torch import training_examples
from model.training.data import collate, token_batches
from model.training.loss import TranslationLoss
from model.training.optimization import make_optimizer, train_step
from model.transformer import Transformer

WORKER = Path(__file__).with_name("train_worker.py")
THREADS = 2
# record name -> (--max-tokens, --cpu-bf16): train_worker's default batch, half of it, and half of it in bf16 (this
# tree's steps only; a baseline tree's stay fp32, as its model.train's did)
CASES = {
    "train_tokens_per_s": (3072, False),
    "train_tokens_per_s_1536": (1536, False),
    "train_tokens_per_s_bf16": (1536, True),
}


def matmul_peak_flops(threads: int, dtype: torch.dtype = torch.float32, size: int = 1024, repeats: int = 20) -> float:
    """FLOP/s of the best of ``repeats`` (size x size) @ (size x size) products in ``dtype`` on ``threads`` threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        torch.mm(a, b)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    return 2 * size**3 / best


def flops_per_target_token(ctx: Context, max_tokens: int, batches: int = 5) -> float:
    """Model FLOPs (forward and backward, as torch's FLOP counter counts them) per target token of training steps
    on the first ``batches`` batches ``python -m model.train`` would make of the corpus: the work a step needs,
    with the output projection over the non-padded targets only (as model.training.loss computes it), the same
    figure for both trees."""
    config = ctx.subject.translator.config
    examples, _ = training_examples(ctx)  # the whole split, batched as the worker batches it
    model = Transformer(config).train()
    loss = TranslationLoss(model, config.pad_id, label_smoothing=0.1)
    optimizer = make_optimizer(model.parameters(), 1e-4, 0.0)
    flops, tokens = 0, 0
    for batch in token_batches(examples, max_tokens, seed=1)[:batches]:
        src, tgt = collate([examples[i] for i in batch], config.pad_id)
        target_tokens = int((tgt[:, 1:] != config.pad_id).sum())
        with FlopCounterMode(display=False) as counter:
            train_step(loss, model.parameters(), optimizer, src, tgt, clip_norm=1.0, use_amp=False,
                       loss_divisor=target_tokens)  # fmt: skip
        flops, tokens = flops + counter.get_total_flops(), tokens + target_tokens
    return flops / tokens


def run_worker(tree: Path, ctx: Context, steps: int, max_tokens: int, cpu_bf16: bool = False) -> float:
    """Target tokens per second of ``steps`` training steps of ``tree``'s model package, in a process of its own."""
    command = [sys.executable, str(WORKER), "--tree", str(tree), "--checkpoint", str(ctx.subject.folder)]
    command += ["--data", str(ctx.data), "--steps", str(steps), "--threads", str(THREADS)]
    command += ["--max-tokens", str(max_tokens)] + (["--cpu-bf16"] if cpu_bf16 else [])
    result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=tree)
    if result.returncode:
        raise RuntimeError(f"train_worker on {tree} failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["tokens_per_s"]


def train_tokens_per_s(ctx: Context, names: tuple[str, ...]) -> list[Record]:
    """Training steps of the checkpoint's configuration in the CASES named (each case starts several worker
    processes, slow even with --quick), this tree against --baseline-tree (fp32) in turns when it is given;
    model-FLOP utilisation of each against the matrix-multiply peak measured here in the precision of its products."""
    steps, rounds = ctx.reps(10, 25), ctx.reps(2, 4)
    cases = {name: CASES[name] for name in names}
    # the fp32 peak always (a baseline tree's steps are fp32), the bf16 one when a --cpu-bf16 case runs
    precisions = {False} | {cpu_bf16 for _, cpu_bf16 in cases.values()}
    peaks = {bf16: matmul_peak_flops(THREADS, torch.bfloat16 if bf16 else torch.float32) for bf16 in precisions}
    baseline_tree = ctx.baseline_tree
    flops_per_token = {max_tokens: flops_per_target_token(ctx, max_tokens) for max_tokens, _ in cases.values()}
    records = []
    for name, (max_tokens, cpu_bf16) in cases.items():
        per_token = flops_per_token[max_tokens]
        peak = peaks[cpu_bf16]
        samples: dict[str, list[float]] = {"tree": [], "baseline": []}
        for _ in range(rounds):  # in turns, so that both trees meet the same load
            samples["tree"].append(run_worker(REPO, ctx, steps, max_tokens, cpu_bf16))
            if baseline_tree:
                samples["baseline"].append(run_worker(baseline_tree, ctx, steps, max_tokens))
        value = statistics.median(samples["tree"])
        baseline = statistics.median(samples["baseline"]) if baseline_tree else float("nan")
        params = {
            "case": f"{ctx.subject.folder.name} configuration, Multi30k batches of --max-tokens {max_tokens}, "
            f"{'--cpu-bf16, ' if cpu_bf16 else ''}{THREADS} threads, {steps} timed steps a process, {rounds} rounds",
            "baseline_is": f"the same steps on {baseline_tree} (--baseline-tree, fp32), in turns"
            if baseline_tree
            else "none: pass --baseline-tree (a git worktree of an older commit) for the speed-up",
            "max_tokens": max_tokens,
            "cpu_bf16": cpu_bf16,
            "matmul_peak_gflops": peak / 1e9,  # bf16 products' peak for a --cpu-bf16 case
            "model_gflop_per_target_token": per_token / 1e9,
            "mfu": value * per_token / peak,
            "statistic": "median over rounds of target tokens / timed seconds",
            "samples": samples["tree"],
        }
        if baseline_tree:
            params["baseline_samples"] = samples["baseline"]
            params["baseline_matmul_peak_gflops"] = peaks[False] / 1e9  # the baseline tree's steps are fp32
            params["baseline_mfu"] = baseline * per_token / peaks[False]
        checks = (Check("ratio", ">=", 1.5),) if baseline_tree else ()
        records.append(Record(name, value, "tokens/s", baseline, checks, params))
    return records
