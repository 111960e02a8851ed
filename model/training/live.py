"""Train a small Transformer on a toy task while someone watches: ``train_toy(settings, on_step)``.

The Train view, a notebook and ``python -m model.training.live`` all run this one function. It
builds the model, a word tokenizer and the data from ``ToySettings``, then optimises with the
project's own parts (``TranslationLoss``, ``train_step``, ``make_optimizer``, ``inverse_sqrt``,
``encode_examples``, ``collate``) and calls ``on_step`` after every step with a ``Progress``:
the step's loss and, every ``eval_every`` steps, the held-out exact match and the
cross-attention of one fixed held-out example, teacher-forced on its right answer. The result
(a ``ToyRun``) is plain data (weights, optimiser state, tokenizer bytes, history) that pickles
across processes, continues with more steps, and becomes a ``Translator`` or a checkpoint
folder like any shipped one. docs/train.md explains the view and its exercises.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch

from model.card import Card, HeadScore, ToyTaskSection, TrainingRun
from model.checkpoint import save_checkpoint
from model.config import POSITIONAL_ENCODINGS, TransformerConfig
from model.tokenizer import Tokenizer, train_sentencepiece
from model.trace import Trace
from model.training.data import Example, collate, encode_examples
from model.training.loss import TranslationLoss
from model.training.optimization import inverse_sqrt, make_optimizer, train_step
from model.training.toy_settings import ToySettings
from model.training.toy_tasks import (
    ADJECTIVES,
    DETERMINERS,
    NOUNS,
    SYMBOLS,
    TASKS,
    VERBS,
    Lengths,
    alignment_scores,
    clearest_head,
    generate_pairs,
)
from model.transformer import Transformer
from model.translator import Translator

TRAINING_INPUTS = 20_000  # distinct training inputs drawn up front (fewer when the task has fewer)


@dataclass
class Progress:
    """What ``on_step`` receives after a step. The held-out fields are set every ``eval_every`` steps and at the end."""

    step: int
    steps: int  # the budget of this call
    elapsed_s: float  # training time so far, over every call that made this run
    loss: float  # mean cross-entropy per target token of this step's batch
    exact_match: float | None = None  # share of held-out inputs translated exactly right (greedy)
    attention: Trace | None = None  # the fixed held-out example, teacher-forced on its right answer
    alignment: dict[str, list[float]] | None = None  # per cross-attention module and head: on the expected position


@dataclass
class HistoryPoint:
    step: int
    elapsed_s: float
    loss: float
    exact_match: float | None = None


@dataclass
class ToyRun:
    """A toy training's result: picklable plain data (the model as weights), continued by ``train_toy(start=...)``."""

    settings: ToySettings
    config: dict[str, Any]
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    tokenizer_model: bytes
    held_out: list[tuple[str, str]]
    step: int = 0
    elapsed_s: float = 0.0
    history: list[HistoryPoint] = field(default_factory=list)
    stopped: str = ""
    calls: list[TrainingRun] = field(default_factory=list)  # each train_toy call that made it, oldest first
    exact_match: float | None = None
    alignment: dict[str, list[float]] = field(default_factory=dict)

    @property
    def example(self) -> tuple[str, str]:
        """The held-out pair whose attention is watched."""
        return self.held_out[0]

    def model(self) -> Transformer:
        model = Transformer(TransformerConfig.from_dict(self.config))
        model.load_state_dict(self.weights)
        return model.eval()

    def tokenizer(self) -> Tokenizer:
        return Tokenizer.from_model_bytes(self.tokenizer_model)

    def card(self) -> Card:
        task = TASKS[self.settings.task]
        clearest = clearest_head(self.alignment) if self.alignment else None
        return Card(
            source_language=task.source_suffix,
            target_language=task.target_suffix,
            data=f"{task.name} pairs drawn by model.training.live (seed {self.settings.seed})",
            final_weights=f"the weights at step {self.step}",
            stopped=self.stopped,
            train_command="; then ".join(call.command for call in self.calls if call.command) or None,
            examples=[source for source, _ in self.held_out[:5]],
            wall_time_s=round(self.elapsed_s, 1),
            hardware="one CPU thread",
            history=list(self.calls),
            toy_task=ToyTaskSection(
                task=task.name,
                rule=task.rule,
                seed=self.settings.seed,
                lengths=(
                    {"shortest": self.settings.shortest, "longest": self.settings.longest, "symbols": len(SYMBOLS)}
                    if task.uses_lengths
                    else "5-9 words (grammar)"
                ),
                pattern=task.pattern,
                held_out_pairs=len(self.held_out),
                held_out_exact_match=self.exact_match,
                attention_pairs=1 if self.alignment else None,
                steps_on_expected_source_position=self.alignment or None,
                clearest_head=HeadScore(**clearest) if clearest else None,
                measured_with="model.training.live (held-out exact match; attention of its watched example)",
            ),
        )

    def translator(self, name: str = "") -> Translator:
        """The trained model as the explorer and the analyses use a loaded checkpoint (CPU)."""
        return Translator(self.model(), self.tokenizer(), torch.device("cpu"), name=name, card=self.card())

    def save(self, folder: str | Path) -> Path:
        """A checkpoint folder like the shipped ones: config, weights (fp16), tokenizer and card."""
        return save_checkpoint(folder, self.model(), self.tokenizer(), self.card(), half=True)


def vocabulary(task: str) -> list[str]:
    """Every word the task's inputs and outputs use."""
    return list(SYMBOLS) if task != "svo-sov" else [*DETERMINERS, *ADJECTIVES, *NOUNS, *VERBS]


def distinct_inputs(settings: ToySettings) -> float:
    """How many different inputs the task can draw (inf for the grammar's sentences: far more than any pool)."""
    if not TASKS[settings.task].uses_lengths:
        return math.inf
    lengths = range(settings.shortest, settings.longest + 1)
    symbols = len(SYMBOLS)
    if settings.task == "sort":  # distinct symbols: ordered draws without repetition
        return float(sum(math.perm(symbols, length) for length in lengths if length <= symbols))
    return float(sum(symbols**length for length in lengths))


def draw_data(settings: ToySettings) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Held-out pairs, then training pairs whose inputs are all different from them (seeded)."""
    task = TASKS[settings.task]
    rng = random.Random(settings.seed)
    lengths = Lengths(settings.shortest, settings.longest, len(SYMBOLS))
    space = distinct_inputs(settings)
    held_out_count = int(min(settings.held_out, space // 4))
    seen: set[str] = set()
    held_out = generate_pairs(task, held_out_count, rng, lengths, seen)
    train = generate_pairs(task, int(min(TRAINING_INPUTS, space - held_out_count)), rng, lengths, seen)
    return held_out, train


def build(settings: ToySettings) -> tuple[TransformerConfig, bytes]:
    """The model's configuration and a SentencePiece word model of the task's vocabulary (one piece a word)."""
    words = vocabulary(settings.task)
    tokenizer_model = train_sentencepiece([" ".join(words)] * 4, len(words) + 4, "word", normalization="identity")
    size = Tokenizer.from_model_bytes(tokenizer_model).vocab_size("source")
    longest = settings.longest if TASKS[settings.task].uses_lengths else 9
    config = TransformerConfig(
        src_vocab_size=size,
        tgt_vocab_size=size,
        d_model=settings.d_model,
        n_heads=settings.heads,
        n_encoder_layers=settings.encoder_layers,
        n_decoder_layers=settings.decoder_layers,
        d_ff=2 * settings.d_model,
        dropout=0.0,  # the data is endless and noise-free: nothing to regularise, and it would blur the attention
        max_len=longest + 8,  # BOS/EOS and room for a model that has not learned to stop yet
        share_embeddings=True,
        tie_output=True,
        output_bias=False,
        positional_encoding=settings.positional,
    )
    return config, tokenizer_model


def start_run(settings: ToySettings, held_out: list[tuple[str, str]] | None = None) -> ToyRun:
    """A fresh, untrained run: seeded weights and the held-out pairs (drawn here unless ``held_out`` gives
    draw_data's), nothing trained yet."""
    settings.check()
    config, tokenizer_model = build(settings)
    torch.manual_seed(settings.seed)
    model = Transformer(config)
    held_out = draw_data(settings)[0] if held_out is None else held_out
    return ToyRun(
        settings=settings,
        config=config.to_dict(),
        weights={name: value.detach().clone() for name, value in model.state_dict().items()},
        optimizer={},
        tokenizer_model=tokenizer_model,
        held_out=held_out,
    )


def measure(translator: Translator, run: ToyRun) -> tuple[float, Trace, dict[str, list[float]]]:
    """Held-out exact match (greedy), the watched example's trace and its per-head alignment with the task's rule."""
    sources = [source for source, _ in run.held_out]
    hypotheses = translator.translate_batch(sources, beam_size=1)
    exact = sum(h == t for h, (_, t) in zip(hypotheses, run.held_out, strict=True)) / len(run.held_out)
    source, target = run.example
    trace = translator.trace(source, target=target)
    return exact, trace, alignment_scores(TASKS[run.settings.task], [trace])


def train_toy(
    settings: ToySettings,
    on_step: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    start: ToyRun | None = None,
) -> ToyRun:
    """Train for ``settings.steps`` steps (from ``start`` when given, which must be the same model) and return the run.

    ``on_step`` gets a ``Progress`` after every step; ``should_stop`` is asked before every step and ends the
    training at once when it says so (the run keeps what it learned). Runs on the CPU in the calling thread with
    the thread's torch settings (the Train view's workers use one thread).
    """
    settings.check()
    if start is not None and not start.settings.same_model(settings):
        raise ValueError("a run continues only with the same task and model; start a new one to change them")
    held_out, train_pairs = draw_data(settings)  # seeded: a continued run gets the same pairs again
    run = replace(start) if start is not None else start_run(settings, held_out)
    run.settings = settings
    config = TransformerConfig.from_dict(run.config)
    model = Transformer(config)
    model.load_state_dict(run.weights)
    tokenizer = Tokenizer.from_model_bytes(run.tokenizer_model)
    translator = Translator(model, tokenizer, torch.device("cpu"))
    examples: list[Example] = encode_examples(train_pairs, tokenizer, config)
    optimizer = make_optimizer(model.parameters(), settings.learning_rate, weight_decay=0.0)
    if run.optimizer:
        optimizer.load_state_dict(run.optimizer)
    loss_of = TranslationLoss(model, config.pad_id, label_smoothing=0.0)
    rng = random.Random(settings.seed * 1_000_003 + run.step)  # a continued run draws new batches
    history = list(run.history)
    began, elapsed_before = time.perf_counter(), run.elapsed_s
    stopped = f"stopped after its budget of {settings.steps} steps"
    last = 0
    for last in range(1, settings.steps + 1):
        if should_stop is not None and should_stop():
            last -= 1
            stopped = f"stopped by hand after {run.step + last} steps"
            break
        model.train()
        src, tgt = collate(rng.sample(examples, min(settings.batch_size, len(examples))), config.pad_id)
        tokens = int((tgt[:, 1:] != config.pad_id).sum())
        for group in optimizer.param_groups:
            group["lr"] = settings.learning_rate * inverse_sqrt(run.step + last, settings.warmup)
        loss_sum = train_step(
            loss_of, model.parameters(), optimizer, src, tgt, clip_norm=1.0, use_amp=False, loss_divisor=tokens
        )
        progress = Progress(
            run.step + last,
            run.step + settings.steps,
            elapsed_before + time.perf_counter() - began,
            float(loss_sum) / tokens,
        )
        if last % settings.eval_every == 0 or last == settings.steps:
            model.eval()
            progress.exact_match, progress.attention, progress.alignment = measure(translator, run)
            run.exact_match, run.alignment = progress.exact_match, progress.alignment
        history.append(HistoryPoint(progress.step, progress.elapsed_s, progress.loss, progress.exact_match))
        if on_step is not None:
            on_step(progress)
    model.eval()
    if history and history[-1].exact_match is None and last > 0:  # stopped between measurements: measure the end
        exact, trace, alignment = measure(translator, run)
        history[-1].exact_match, run.exact_match, run.alignment = exact, exact, alignment
    run.step += last
    run.elapsed_s = elapsed_before + time.perf_counter() - began
    run.history = history
    run.stopped = stopped
    if last:  # a fresh run's command repeats it exactly (seeded); a continued one is described
        command = (
            replace(settings, steps=last).command()
            if start is None
            else f"continued in the Train view: {last} more steps at learning rate {settings.learning_rate:g}"
        )
        run.calls = [*run.calls, TrainingRun(command=command, steps=last, stopped=stopped)]
    run.weights = {name: value.detach().clone() for name, value in model.state_dict().items()}
    run.optimizer = optimizer.state_dict()
    return run


def build_parser() -> argparse.ArgumentParser:
    defaults = ToySettings()
    parser = argparse.ArgumentParser(
        prog="python -m model.training.live",
        description=(
            "Train a small Transformer on a toy task (what the explorer's Train view runs) and write a checkpoint\n"
            "folder the explorer opens like a shipped one. Seeded: the same options give the same weights."
        ),
        epilog="example:\n  python -m model.training.live --task reverse --steps 1500 --out runs/live-reverse",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    help_texts = {
        "task": f"toy task: {', '.join(TASKS)}",
        "shortest": "fewest symbols in an input (copy, reverse, sort)",
        "longest": "most symbols in an input (copy, reverse, sort)",
        "positional": f"positional encoding: {', '.join(POSITIONAL_ENCODINGS)}",
        "steps": "optimisation steps (the budget)",
        "batch_size": "pairs per step",
        "warmup": "steps of linear warm-up, then inverse-square-root decay",
        "eval_every": "steps between held-out measurements",
        "held_out": "held-out inputs exact match is measured on",
    }
    for item in fields(ToySettings):
        default = getattr(defaults, item.name)
        parser.add_argument(
            f"--{item.name.replace('_', '-')}",
            type=type(default),
            default=default,
            choices=sorted(TASKS)
            if item.name == "task"
            else POSITIONAL_ENCODINGS
            if item.name == "positional"
            else None,
            help=f"{help_texts.get(item.name, item.name.replace('_', ' '))} (default: %(default)s)",
        )
    parser.add_argument("--out", required=True, help="the checkpoint folder to write")
    parser.add_argument("--quiet", action="store_true", help="print only the result")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    settings = ToySettings(**{f.name: getattr(args, f.name) for f in fields(ToySettings)})
    try:
        settings.check()
    except ValueError as error:
        build_parser().error(str(error))
    torch.set_num_threads(1)

    def report(progress: Progress) -> None:
        if progress.exact_match is not None and not args.quiet:
            print(
                f"step {progress.step}/{progress.steps}  {progress.elapsed_s:5.1f} s  loss {progress.loss:.3f}  "
                f"held-out exact match {progress.exact_match:.1%}",
                file=sys.stderr,
            )

    run = train_toy(settings, on_step=report)
    folder = run.save(args.out)
    print(f"{folder}: {run.stopped}; held-out exact match {run.exact_match:.1%} after {run.elapsed_s:.1f} s")


if __name__ == "__main__":
    main()
