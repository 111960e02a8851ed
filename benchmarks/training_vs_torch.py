"""Training against torch.nn.Transformer: our training steps and a whole training epoch, each beside the PyTorch
tutorial's nn.Transformer with the same weights, on the same batches, steps in turns."""

from __future__ import annotations

import copy
import sys

import torch

from benchmarks.context import Context
from benchmarks.model_benchmarks import random_ids, tutorial_copy
from benchmarks.records import Check, Record
from benchmarks.timing import alternate
from model.interop.torch_transformer import tutorial_logits
from model.training.data import Example, collate, encode_examples, read_parallel, split_file, token_batches
from model.training.loss import TranslationLoss, logits_loss
from model.training.optimization import train_step
from model.transformer import Transformer

MAX_TOKENS = 4096  # python -m model.train's default --max-tokens: the batches an epoch of training makes
EPOCH_SEED = 1001  # model.train's batch order of epoch 1 with its default --seed 1 (seed * 1000 + epoch)


class TrainingPair:
    """Our model in training mode and its tutorial nn.Transformer copy (same weights), each with the optimizer of
    python -m model.train (AdamW, betas 0.9/0.98, no weight decay), both stepped by
    model.training.optimization.train_step."""

    def __init__(self, model: Transformer, device: torch.device) -> None:
        self.ours = copy.deepcopy(model).float().to(device).train().requires_grad_(True)
        self.theirs = tutorial_copy(self.ours).to(device).train().requires_grad_(True)
        self.pad = model.config.pad_id
        self.modules = {"ours": self.ours, "theirs": self.theirs}
        self.losses = {
            "ours": TranslationLoss(self.ours, self.pad, label_smoothing=0.1),
            "theirs": logits_loss(
                lambda src, tgt_in: tutorial_logits(self.theirs, src, tgt_in, self.pad), self.pad, label_smoothing=0.1
            ),
        }
        self.optimizers = {
            side: torch.optim.AdamW(module.parameters(), lr=1e-4, betas=(0.9, 0.98), weight_decay=0.0)
            for side, module in self.modules.items()
        }

    def step(self, side: str, src: torch.Tensor, tgt: torch.Tensor, use_amp: bool) -> torch.Tensor:
        """One train_step of "ours" or "theirs" (label smoothing 0.1, clipping at 1, the token-mean loss): ours
        through python -m model.train's TranslationLoss (fused with the output projection on the CPU), theirs from
        its logits."""
        return train_step(
            self.losses[side],
            self.modules[side].parameters(),
            self.optimizers[side],
            src,
            tgt,
            clip_norm=1.0,
            use_amp=use_amp,
            loss_divisor=float((tgt[:, 1:] != self.pad).sum()),
        )


def train_tokens_vs_torch(ctx: Context) -> list[Record]:
    """Training steps (model.training.optimization.train_step: forward, label-smoothed loss, backward, clip,
    AdamW) of our model vs the tutorial-layout nn.Transformer with the same weights, on the same batches, steps
    alternating; target tokens per second."""
    device = ctx.subject.device
    pair = TrainingPair(ctx.subject.model, device)
    batch, length = (32, 32) if ctx.quick else (128, 32)  # ~ --max-tokens 4096 of python -m model.train
    batches = [
        (
            random_ids(pair.ours, batch, length, seed=10 + i).to(device),
            random_ids(pair.ours, batch, length + 1, seed=20 + i).to(device),
        )
        for i in range(3)
    ]
    tokens = batch * length  # target tokens predicted per step (nothing padded)
    counter = {"ours": 0, "theirs": 0}

    def step(side: str) -> None:
        src, tgt = batches[counter[side] % len(batches)]
        counter[side] += 1
        pair.step(side, src, tgt, use_amp=False)

    paired = alternate(lambda: step("ours"), lambda: step("theirs"), ctx.reps(3, 15), 1, device)
    return [
        Record(
            "train_tokens_vs_torch",
            tokens / paired.candidate_median,
            "tokens/s",
            tokens / paired.baseline_median,
            (Check("ratio", ">=", 0.95),),
            {
                "case": f"batch {batch} x {length}",
                "baseline_is": "export_torch(model): tutorial Seq2SeqTransformer on nn.Transformer, same weights, "
                "same batches, the same loss (from its logits; ours fused with the output projection on the CPU) "
                "and optimizer",
                "tokens_per_step": tokens,
                "dropout": pair.ours.config.dropout,
                "value_samples_s": paired.candidate,
                "baseline_samples_s": paired.baseline,
                "statistic": "tokens_per_step / median seconds",
            },
        )
    ]


def training_examples(ctx: Context, limit: int | None = None) -> tuple[list[Example], tuple[str, str]]:
    """The subject's training examples (the first ``limit`` pairs of --data's train split, in the checkpoint card's
    languages), encoded as ``python -m model.train`` encodes them, and the languages."""
    translator = ctx.subject.translator
    languages = (translator.card.source_language or "en", translator.card.target_language or "de")
    pairs = read_parallel(*(split_file(ctx.data, "train", language) for language in languages))[:limit]
    return encode_examples(pairs, translator.tokenizer, translator.config), languages


def train_epoch_s(ctx: Context) -> list[Record]:
    """Wall time of one training epoch over the Multi30k training split: every batch ``python -m model.train``
    would make (token-bucketed, --max-tokens 4096, its seed), each collated, moved to the device and passed through
    model.training.optimization.train_step (bf16 autocast on CUDA, as there), ours and the tutorial nn.Transformer
    in turns."""
    device = ctx.subject.device
    config = ctx.subject.translator.config
    examples, languages = training_examples(ctx)
    batches = token_batches(examples, MAX_TOKENS, seed=EPOCH_SEED)
    pair = TrainingPair(ctx.subject.model, device)
    pad = config.pad_id
    use_amp = device.type == "cuda"
    counter = {"ours": 0, "theirs": 0}
    warmup = min(3, len(batches))
    report_every = max(1, len(batches) // 10)

    def step(side: str) -> None:
        # warm-up takes the first batches; the timed steps then wrap round, so each batch is timed once per side
        indices = batches[counter[side] % len(batches)]
        counter[side] += 1
        timed = counter[side] - warmup
        if side == "theirs" and timed > 0 and timed % report_every == 0:  # minutes on a CPU: show it moving
            print(f"  train_epoch_s: {timed}/{len(batches)} batches", file=sys.stderr, flush=True)
        src, tgt = collate([examples[i] for i in indices], pad)
        src, tgt = src.to(device, non_blocking=True), tgt.to(device, non_blocking=True)
        loss = pair.step(side, src, tgt, use_amp)
        float(loss)  # model.train reads every step's loss, which waits for the device as this does

    paired = alternate(lambda: step("ours"), lambda: step("theirs"), len(batches), warmup, device)
    target_tokens = sum(len(example.tgt) - 1 for example in examples)
    value, baseline = sum(paired.candidate), sum(paired.baseline)
    return [
        Record(
            "train_epoch_s",
            value,
            "s",
            baseline,
            (),
            {
                "case": f"{ctx.data.name} train {languages[0]}-{languages[1]}, {len(batches)} batches",
                "baseline_is": "the same epoch (same batches, same train_step) for export_torch(model), the tutorial "
                "Seq2SeqTransformer on nn.Transformer with the same weights, its steps in turns with ours",
                "data": str(ctx.data),
                "sentences": len(examples),
                "batches": len(batches),
                "max_tokens": MAX_TOKENS,
                "target_tokens": target_tokens,
                "tokens_per_s": target_tokens / value,
                "baseline_tokens_per_s": target_tokens / baseline,
                "bf16_autocast": use_amp,
                "value_samples_s": paired.candidate,
                "baseline_samples_s": paired.baseline,
                "statistic": "sum of the epoch's step times (collate, copy to the device, train_step)",
            },
        )
    ]
