"""Does the app's work run on an accelerator, and give the CPU's results? ``python -m benchmarks.device_check``.

On the device asked for (``--device cuda`` on a GPU machine) and on the CPU, from the same checkpoint: greedy and
beam traces of the card's example sentences (the same output, every head's attention and every step's
probabilities within a tolerance), a batched forward pass under capture (the same), and a few training steps from
the same weights on the same batch, dropout off (the same losses, within a looser tolerance: a GPU's kernels sum in
another order). Each is timed on both. Exits 1 when a result differs, 2 when the device is missing. With
``--device cpu`` it compares the CPU with itself: it shows the command works where no GPU is (docs/performance.md
gives the figures of a GPU run). The classroom benchmark and a Multi30k training epoch on the device are
``python -m benchmarks.run --device cuda --only classroom_p95_ms,train_epoch_s``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from model import capture_attention, load_checkpoint
from model.card import Card
from model.training.data import collate, encode_examples
from model.training.loss import TranslationLoss
from model.training.optimization import make_optimizer, train_step
from model.translator import Translator

DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "multi30k-en-de"
ATTENTION_TOLERANCE = 1e-4  # float32 on two devices: sums in another order differ in the last bits
LOSS_TOLERANCE = 1e-3  # relative: a training step's loss after several updates on a GPU's kernels


@dataclass(frozen=True)
class Comparison:
    what: str
    largest_difference: float
    tolerance: float
    device_ms: float
    cpu_ms: float

    @property
    def matches(self) -> bool:
        return self.largest_difference <= self.tolerance


def timed(work: Callable[[], object], device: torch.device, repeats: int) -> tuple[object, float]:
    """``work()``'s result and its median wall time in ms over ``repeats`` runs (the device synchronised)."""
    times, result = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        result = work()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - began) * 1000)
    return result, statistics.median(times)


def largest_difference(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> float:
    """The largest absolute difference between arrays of the same names (inf when names or shapes differ)."""
    if first.keys() != second.keys() or any(first[k].shape != second[k].shape for k in first):
        return float("inf")
    return max((float(np.abs(first[k] - second[k]).max()) for k in first if first[k].size), default=0.0)


def compare_traces(device: Translator, cpu: Translator, sentences: list[str], beam_size: int) -> Comparison:
    def run(translator: Translator) -> list:
        return [translator.trace(sentence, beam_size=beam_size) for sentence in sentences]

    on_device, device_ms = timed(lambda: run(device), device.device, 3)
    on_cpu, cpu_ms = timed(lambda: run(cpu), cpu.device, 3)
    worst = 0.0
    for ours, reference in zip(on_device, on_cpu, strict=True):
        if ours.target_ids != reference.target_ids:
            return Comparison(f"trace, beam {beam_size}: output ids", float("inf"), 0.0, device_ms, cpu_ms)
        arrays = {**ours.attention, "step_probs": ours.step_probs}
        expected = {**reference.attention, "step_probs": reference.step_probs}
        worst = max(worst, largest_difference(arrays, expected))
    name = f"trace, beam {beam_size}: ids, attention, probabilities ({len(sentences)} sentences)"
    return Comparison(name, worst, ATTENTION_TOLERANCE, device_ms, cpu_ms)


def batch_of(translator: Translator, sentences: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The sentences translated into themselves as a training batch (any target does: both devices get the same)."""
    examples = encode_examples([(s, s) for s in sentences], translator.tokenizer, translator.config)
    return collate(examples, translator.config.pad_id)


def compare_capture(device: Translator, cpu: Translator, sentences: list[str]) -> Comparison:
    src, tgt = batch_of(cpu, sentences)

    def run(translator: Translator) -> dict[str, np.ndarray]:
        with torch.inference_mode(), capture_attention(translator.model) as capture:
            translator.model(src.to(translator.device), tgt[:, :-1].to(translator.device))
        return {name: value.float().cpu().numpy() for name, value in capture.attention.items()}

    on_device, device_ms = timed(lambda: run(device), device.device, 5)
    on_cpu, cpu_ms = timed(lambda: run(cpu), cpu.device, 5)
    name = f"forward under capture, batch of {len(sentences)}: every head"
    return Comparison(name, largest_difference(on_device, on_cpu), ATTENTION_TOLERANCE, device_ms, cpu_ms)


def compare_training(device: Translator, cpu: Translator, sentences: list[str], steps: int) -> Comparison:
    src, tgt = batch_of(cpu, sentences)

    def run(translator: Translator) -> list[float]:
        # a copy, so that the shared model stays as it is; dropout off, since a GPU draws other masks than the CPU
        # from the same seed: both devices then compute the same function, and only their arithmetic differs
        model = copy.deepcopy(translator.model).eval().requires_grad_(True)
        loss = TranslationLoss(model, translator.config.pad_id, label_smoothing=0.1)
        optimizer = make_optimizer(model.parameters(), lr=1e-4, weight_decay=0.0)
        batch = src.to(translator.device), tgt.to(translator.device)
        return [
            float(train_step(loss, model.parameters(), optimizer, *batch, clip_norm=1.0, use_amp=False, loss_divisor=1))
            for _ in range(steps)
        ]

    run(device), run(cpu)  # warm-up: the first steps on a device also set it up
    on_device, device_ms = timed(lambda: run(device), device.device, 1)
    on_cpu, cpu_ms = timed(lambda: run(cpu), cpu.device, 1)
    relative = max(abs(a - b) / max(abs(b), 1e-9) for a, b in zip(on_device, on_cpu, strict=True))
    return Comparison(f"{steps} training steps from the same weights: losses (relative)", relative,
                      LOSS_TOLERANCE, device_ms / steps, cpu_ms / steps)  # fmt: skip


def examples_of(card: Card, count: int) -> list[str]:
    from explorer.wording import card_examples  # the same sentences the page offers

    return card_examples(card)[:count]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.device_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="the device to check against the CPU (default cuda)")
    parser.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT), help="checkpoint folder")
    parser.add_argument("--sentences", type=int, default=6, help="example sentences of the card to trace")
    parser.add_argument("--steps", type=int, default=5, help="training steps to compare")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"error: --device {args.device}: no CUDA device here (torch {torch.__version__})", file=sys.stderr)
        return 2
    if args.steps < 1 or args.sentences < 1:
        print("error: --steps and --sentences must be at least 1", file=sys.stderr)
        return 2
    device = load_checkpoint(args.checkpoint, device=args.device)
    cpu = load_checkpoint(args.checkpoint, device="cpu")
    sentences = examples_of(cpu.card, args.sentences)
    results = [
        compare_traces(device, cpu, sentences, beam_size=1),
        compare_traces(device, cpu, sentences, beam_size=5),
        compare_capture(device, cpu, sentences),
        compare_training(device, cpu, sentences, args.steps),
    ]
    print(f"{args.device} ({device.device}) against the CPU, {Path(args.checkpoint).name}, torch {torch.__version__}")
    print(f"{'check':<72} {'largest difference':>18} {'tolerance':>10} {'device ms':>10} {'cpu ms':>9}  match")
    for result in results:
        print(
            f"{result.what:<72} {result.largest_difference:>18.3g} {result.tolerance:>10.0e} "
            f"{result.device_ms:>10.1f} {result.cpu_ms:>9.1f}  {'yes' if result.matches else 'NO'}"
        )
    return 0 if all(result.matches for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
