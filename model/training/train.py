"""Train a translation Transformer: ``python -m model.train --help`` (model/train.py runs this ``main``).

Reads a parallel corpus, trains SentencePiece, trains the model with token-bucketed
batches, Adam (0.9, 0.98), inverse-square-root warmup, label smoothing and gradient
clipping; validates (loss and greedy BLEU) every epoch, keeps the last N epoch weights and
writes their average as the final checkpoint. ``--resume`` continues exactly where the last
saved state left off. Runs unchanged under ``torchrun`` (DistributedDataParallel).

``train`` reads as a run goes: ``set_up`` (folder, data, tokenizer, model, saved state; what they
are read from is model.training.start), then per epoch ``train_epoch`` and ``end_epoch`` (validation,
epoch weights, saved state), then ``finish`` (the averaged final checkpoint and its card).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from tqdm import tqdm

from model.analysis.domain import SourceWords
from model.card import BestEpoch, Card, TrainingRun
from model.checkpoint import save_checkpoint
from model.config import TransformerConfig
from model.tokenizer import Tokenizer
from model.training.data import Example, collate, encode_examples, token_batches
from model.training.distributed import Run
from model.training.loss import TranslationLoss
from model.training.optimization import (
    average_weights,
    cooldown,
    inverse_sqrt,
    make_optimizer,
    train_step,
    weights_of,
)
from model.training.options import parse_arguments, run_arguments
from model.training.start import (
    check_subword_sampling,
    cpu_has_bf16_units,
    get_tokenizer,
    load_corpus,
    make_config,
    read_start_checkpoint,
)
from model.training.state import SAMPLED_FILE, STATE_FILE, load_state, save_atomically, save_state
from model.training.validation import greedy_bleu, validation_loss
from model.transformer import Transformer
from model.translator import Translator


def log_metrics(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line to the run's metrics file."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


@dataclass
class Training:
    """One training run between its steps. ``step``, ``start_epoch``, ``skip_batches`` and ``extra`` are
    what the saved state restores; ``extra`` also carries the best epoch so far."""

    args: argparse.Namespace
    run: Run
    out: Path
    tokenizer: Tokenizer
    config: TransformerConfig
    train_pairs: list[tuple[str, str]]
    train_examples: list[Example]  # segmented anew every epoch under --subword-sampling
    valid_examples: list[Example]
    bleu_pairs: list[tuple[str, str]]  # validation pairs scored by greedy BLEU every epoch
    model: Transformer
    loss: torch.nn.Module  # the model's TranslationLoss, or its DistributedDataParallel wrapper under torchrun
    optimizer: torch.optim.Optimizer
    translator: Translator
    card_base: Card  # languages and data files, on every checkpoint card the run writes
    use_amp: bool
    snapshot_steps: list[int]
    step: int = 0
    start_epoch: int = 1
    skip_batches: int = 0  # batches of start_epoch done before a resume
    extra: dict[str, Any] = field(default_factory=lambda: {"best_bleu": -1.0, "best_epoch": 0, "elapsed": 0.0})
    # what ended this session before its last epoch; not saved, so a resume does not inherit the last session's
    stopped: str = ""
    session_start: float = 0.0  # time.time() minus the time earlier sessions of the run took
    clock_start: float = 0.0  # when this session started: --max-minutes counts from here

    def save(self, epoch: int, batch_in_epoch: int) -> None:
        """Save resumable state (rank 0), with the run's time so far."""
        self.extra["elapsed"] = time.time() - self.session_start
        save_state(
            self.out / STATE_FILE,
            self.model,
            self.optimizer,
            step=self.step,
            epoch=epoch,
            batch_in_epoch=batch_in_epoch,
            extra=self.extra,
        )

    def snapshot(self, name: str) -> None:
        """A shippable fp16 checkpoint of the model now, under snapshots/name (rank 0, once per name)."""
        folder = self.out / "snapshots" / name
        if self.run.main and not folder.exists():
            self.model.eval()
            card = replace(self.card_base, snapshot=name, step=self.step)
            # an untrained model is stored as its seed when it is exactly what the seed creates
            seed = self.args.seed if self.step == 0 else None
            save_checkpoint(folder, self.model, self.tokenizer, card, half=True, initial_seed=seed)
            self.model.train()


@dataclass
class EpochTotals:
    """What one epoch adds up over all ranks, for its metrics record."""

    start: float  # time.time() when the epoch (or its resumed part) started
    loss: float = 0.0  # summed label-smoothed loss
    # counts, as Run.all_sum returns them: floats when summed over several ranks
    tokens: float = 0  # target tokens the loss is over
    seen_tokens: float = 0  # source and target tokens of the sentences trained on in this session


def set_up(args: argparse.Namespace, run: Run) -> Training:
    """The run folder and arguments, data, tokenizer, model and optimiser; on --resume the saved state."""
    out = Path(args.out)
    if run.main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "epochs").mkdir(exist_ok=True)
    run.barrier()
    if args.threads:
        torch.set_num_threads(args.threads)
    start = read_start_checkpoint(args) if args.init_from and not args.resume else None
    args = run_arguments(args, out, write=run.main)
    if start is not None and run.main:  # the run folder's tokenizer is the checkpoint's: get_tokenizer loads it
        start[1].save(out)

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    train_pairs, valid_pairs, paths = load_corpus(args)
    tokenizer = get_tokenizer(args, out, train_pairs, run)
    config = make_config(args, tokenizer)
    if args.subword_sampling:  # every epoch draws its own segmentation (sampled_examples)
        check_subword_sampling(tokenizer, train_pairs[0], args.subword_sampling)
        train_examples = []
    else:
        train_examples = encode_examples(train_pairs, tokenizer, config)
    valid_examples = encode_examples(valid_pairs, tokenizer, config)
    bleu_pairs = valid_pairs[: args.valid_bleu_limit] if args.valid_bleu_limit else valid_pairs

    model = Transformer(config)
    if start is not None:
        model.load_state_dict(start[0])
    model = model.to(run.device)
    optimizer = make_optimizer(model.parameters(), args.lr, args.weight_decay)
    restored: dict[str, Any] = {}
    if args.resume:
        step, start_epoch, skip_batches, extra = load_state(out / STATE_FILE, model, optimizer)
        restored = {"step": step, "start_epoch": start_epoch, "skip_batches": skip_batches, "extra": extra}
        if run.main:
            print(f"resuming at epoch {start_epoch}, batch {skip_batches}, step {step}", file=sys.stderr)
    if args.cpu_bf16 and run.device.type == "cpu" and run.main and not cpu_has_bf16_units():
        print(
            "--cpu-bf16: this CPU has neither AVX512-BF16 nor AMX, so bf16 products are emulated, many times slower "
            "than fp32. Leave out --cpu-bf16 here",
            file=sys.stderr,
        )
    loss: torch.nn.Module = TranslationLoss(model, config.pad_id, args.label_smoothing)
    if run.world > 1:
        loss = torch.nn.parallel.DistributedDataParallel(
            loss, device_ids=[run.device.index] if run.device.type == "cuda" else None
        )
    training = Training(
        args=args,
        run=run,
        out=out,
        tokenizer=tokenizer,
        config=config,
        train_pairs=train_pairs,
        train_examples=train_examples,
        valid_examples=valid_examples,
        bleu_pairs=bleu_pairs,
        model=model,
        loss=loss,
        optimizer=optimizer,
        translator=Translator(model, tokenizer, run.device),
        card_base=Card(source_language=args.src_lang, target_language=args.tgt_lang, data=paths),
        use_amp=(run.device.type == "cuda" and not args.no_amp) or (run.device.type == "cpu" and args.cpu_bf16),
        # a continued model is not "untrained" at step 0 nor "early" at step 200: its snapshots are its first run's
        snapshot_steps=[] if args.init_from else sorted({int(s) for s in args.snapshot_steps.split(",") if s.strip()}),
        **restored,
    )
    training.session_start = time.time() - training.extra["elapsed"]
    training.clock_start = time.time()
    return training


def sampled_examples(training: Training, epoch: int) -> list[Example]:
    """The training pairs segmented anew for ``epoch`` (--subword-sampling), the same on every rank and after a resume.

    SentencePiece's draws differ from process to process even after ``set_random_generator_seed``, so a seed cannot
    repeat them: rank 0 draws once an epoch and keeps the draw in the run folder (SAMPLED_FILE), where a resume
    inside that epoch finds the pieces, hence the batches, it trained on; the other ranks receive rank 0's draw.
    """
    path = training.out / SAMPLED_FILE
    drawn = None
    if training.run.main:
        saved = torch.load(path, weights_only=True) if path.exists() else None
        if saved is not None and saved["epoch"] == epoch:
            drawn = saved
        else:
            examples = encode_examples(
                training.train_pairs, training.tokenizer, training.config, training.args.subword_sampling
            )
            drawn = {"epoch": epoch, "src": [e.src for e in examples], "tgt": [e.tgt for e in examples]}
            save_atomically(drawn, path)
    drawn = training.run.broadcast(drawn)
    return [Example(src, tgt) for src, tgt in zip(drawn["src"], drawn["tgt"], strict=True)]


def train_batch(training: Training, batch: list[int], epochs_done: float) -> tuple[float, float, float]:
    """One optimisation step on this rank's share of ``batch``, ``epochs_done`` epochs into the run (counting
    the part of the current epoch before this batch), the position --cooldown-epochs sets the rate by.

    Returns, summed over all ranks (Run.all_sum: the counts are floats with more than one rank): the label-smoothed
    loss, the target tokens it is over, and the source and target tokens trained on.
    """
    args, run, config = training.args, training.run, training.config
    local = [training.train_examples[i] for i in batch[run.rank :: run.world]]
    # A batch smaller than the world leaves some ranks without sentences; they still run a
    # forward/backward (DDP all-reduces every step) on a stand-in whose loss counts zero.
    weight = 1.0 if local else 0.0
    local = local or [training.train_examples[batch[0]]]
    src, tgt = collate(local, config.pad_id, config.source_pad_id)
    src, tgt = src.to(run.device), tgt.to(run.device)
    target = tgt[:, 1:]
    local_tokens = int((target != config.pad_id).sum()) if weight else 0
    global_tokens = run.all_sum(local_tokens)
    for group in training.optimizer.param_groups:
        group["lr"] = (
            args.lr
            * inverse_sqrt(training.step + 1, args.warmup)
            * cooldown(epochs_done, args.epochs, args.cooldown_epochs)
        )
    loss_sum = train_step(
        training.loss,
        training.model.parameters(),
        training.optimizer,
        src,
        tgt,
        clip_norm=args.clip_norm,
        use_amp=training.use_amp,
        # DDP averages gradients over ranks; dividing by global tokens / world makes that the global token mean
        loss_divisor=global_tokens / run.world,
        weight=weight,
    )
    training.step += 1
    loss = run.all_sum(float(loss_sum))
    seen = run.all_sum(int(weight * sum(len(e.src) + len(e.tgt) for e in local)))
    return loss, global_tokens, seen


def train_epoch(training: Training, epoch: int) -> EpochTotals | None:
    """Every batch of ``epoch`` (after the ones done before a resume), saving state every --save-every steps.

    Returns the epoch's totals, or None when --max-minutes stopped it (its state is saved).
    """
    args, run = training.args, training.run
    training.model.train()
    if args.subword_sampling:
        training.train_examples = sampled_examples(training, epoch)
    skip = training.skip_batches
    # a resume inside an epoch finishes it with the batches it began with; a new --max-tokens starts at the next one
    max_tokens = training.extra.get("epoch_max_tokens", args.max_tokens) if skip else args.max_tokens
    training.extra["epoch_max_tokens"] = max_tokens
    batches = token_batches(training.train_examples, max_tokens, seed=args.seed * 1000 + epoch)
    quiet = args.quiet or not run.main
    progress = tqdm(batches, desc=f"epoch {epoch}", disable=quiet, initial=skip, total=len(batches))
    totals = EpochTotals(start=time.time())
    if skip:  # resuming inside this epoch: its loss totals continue from the saved state
        totals.loss, totals.tokens = training.extra.get("epoch_loss", 0.0), training.extra.get("epoch_tokens", 0)
    for index, batch in enumerate(batches):
        if index < skip:
            continue
        loss, tokens, seen = train_batch(training, batch, epochs_done=epoch - 1 + index / len(batches))
        totals.loss += loss
        totals.tokens += tokens
        totals.seen_tokens += seen
        progress.update(1)
        progress.set_postfix(
            loss=f"{totals.loss / max(totals.tokens, 1):.3f}", lr=f"{training.optimizer.param_groups[0]['lr']:.2e}"
        )
        if training.step in training.snapshot_steps:
            training.snapshot("untrained" if training.step == 0 else "early")
        training.extra.update(epoch_loss=totals.loss, epoch_tokens=totals.tokens)
        if run.main and training.step % args.save_every == 0:
            training.save(epoch, index + 1)
        # all ranks stop at the same step: when the clock of any one of them has run out
        if args.max_minutes and run.all_sum(float(time.time() - training.clock_start > args.max_minutes * 60)):
            break
    progress.close()
    if index + 1 < len(batches):
        training.stopped = f"--max-minutes reached in epoch {epoch}"
        if run.main:
            training.save(epoch, index + 1)
        return None
    training.skip_batches = 0
    return totals


def end_epoch(training: Training, epoch: int, totals: EpochTotals) -> bool:
    """Validate, log the epoch's metrics, keep its weights and save state (rank 0); True to stop early
    (no better validation BLEU for --patience epochs)."""
    args, run, extra = training.args, training.run, training.extra
    model = training.model
    model.eval()
    record = {"epoch": epoch, "step": training.step, "train_loss": totals.loss / max(totals.tokens, 1)}
    if run.main:
        record["valid_loss"] = validation_loss(model, training.valid_examples, training.config, run.device)
        record["valid_bleu_greedy"] = greedy_bleu(training.translator, training.bleu_pairs)
        record["tokens_per_s"] = totals.seen_tokens / (time.time() - totals.start)
        record["elapsed_s"] = time.time() - training.session_start
        record["lr"] = training.optimizer.param_groups[0]["lr"]
        log_metrics(training.out / "metrics.jsonl", record)
        print(json.dumps(record), file=sys.stderr)
        epochs = training.out / "epochs"
        save_file(weights_of(model), str(epochs / f"epoch_{epoch:03d}.safetensors"))
        for old in sorted(epochs.glob("epoch_*.safetensors"))[: -args.keep_last]:
            old.unlink()
        extra["epochs_done"] = epoch
        if record["valid_bleu_greedy"] > extra["best_bleu"]:
            extra["best_bleu"], extra["best_epoch"] = record["valid_bleu_greedy"], epoch
        training.save(epoch + 1, 0)
    best_epoch = run.all_sum(extra["best_epoch"] if run.main else 0)
    if epoch - best_epoch >= args.patience:
        training.stopped = f"early stop: no better validation BLEU since epoch {int(best_epoch)}"
        return True
    return False


def write_final(training: Training, elapsed: float) -> None:
    """Average the kept epoch weights into final/ (fp16), with the validation scores on its card."""
    model, bleu_pairs, out, device = training.model, training.bleu_pairs, training.out, training.run.device
    model.eval()
    translator = Translator(model, training.tokenizer, device)  # a fresh one: no CPU copy of earlier weights
    epochs = sorted((out / "epochs").glob("epoch_*.safetensors"))
    final_weights = f"the weights at step {training.step}"
    averaged_epochs: list[Path] = []  # the epoch files final/ is the mean of; none when it is the run's last weights
    final_bleu = greedy_bleu(translator, bleu_pairs)  # the last weights'; the average's when it is kept
    if len(epochs) > 1:  # keep the average only when it validates at least as well as the last weights
        last_weights = weights_of(model)
        model.load_state_dict(average_weights(epochs), strict=False)
        averaged = f"the average of {epochs[0].stem}-{epochs[-1].stem}"
        averaged_bleu = greedy_bleu(translator, bleu_pairs)
        if averaged_bleu >= final_bleu:
            averaged_epochs, final_weights, final_bleu = epochs, averaged, averaged_bleu
        else:  # after --max-minutes the last weights are past the last epoch file, so they are named by step
            model.load_state_dict(last_weights, strict=False)
            final_weights += f" (greedy validation BLEU above {averaged})"
    args, extra = training.args, training.extra
    this_run = TrainingRun(
        command=args.command,
        resumed_with=getattr(args, "resumed_with", []),
        init_from=args.init_from,
        epochs=extra.get("epochs_done", 0),
        steps=training.step,
        averaged_epochs=[p.stem for p in averaged_epochs],
        final_weights=final_weights,
        stopped=training.stopped or f"stopped after its {args.epochs} planned epochs (--epochs {args.epochs})",
        wall_time_s=round(elapsed, 1),
        hardware=f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
        + (f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""),
        valid_bleu_greedy=final_bleu,
    )
    earlier = [  # the runs of the --init-from checkpoint, kept in args.json
        TrainingRun.from_dict(run, "args.json", f"init_history[{index}]")
        for index, run in enumerate(getattr(args, "init_history", []))
    ]
    card = replace(
        training.card_base,
        averaged_epochs=this_run.averaged_epochs,
        final_weights=final_weights,
        valid_loss=validation_loss(model, training.valid_examples, training.config, device),
        valid_bleu_greedy=final_bleu,
        best_single_epoch=BestEpoch(epoch=extra["best_epoch"], valid_bleu_greedy=extra["best_bleu"]),
        stopped=this_run.stopped,
        train_command=args.command,
        hardware=this_run.hardware,
        wall_time_s=this_run.wall_time_s,
        config=training.config.to_dict(),  # as config.json writes it
        # every run that made these weights, oldest first; model.evaluate --card-split adds scores to the last
        history=[*earlier, this_run],
    )
    save_checkpoint(out / "final", model, training.tokenizer, card, half=True)
    SourceWords.count(source for source, _ in training.train_pairs).save(out / "final")  # the page's rare words
    snapshot_dir = out / "snapshots" / "final"
    save_checkpoint(snapshot_dir, model, training.tokenizer, replace(card, snapshot="final"), half=True)
    print(f"final checkpoint: {out / 'final'} (valid greedy BLEU {final_bleu:.2f})", file=sys.stderr)


def finish(training: Training) -> None:
    """Write the final checkpoint (rank 0) and close the process group."""
    if training.run.main:
        write_final(training, time.time() - training.session_start)
    training.run.barrier()
    if training.run.world > 1:
        dist.destroy_process_group()


def train(args: argparse.Namespace) -> Path:
    """Run or resume the training run in ``args.out`` (``args`` as parse_arguments gives them: a resume needs to know
    which options were given); returns its final checkpoint folder."""
    training = set_up(args, Run(args.device))
    if training.step == 0 and not training.args.init_from:
        training.snapshot("untrained")
    for epoch in range(training.start_epoch, training.args.epochs + 1):
        totals = train_epoch(training, epoch)
        if totals is None or end_epoch(training, epoch, totals):
            break
    finish(training)
    return training.out / "final"


def main(argv: list[str] | None = None) -> None:
    """``python -m model.train``: parse the options and train."""
    argv = sys.argv[1:] if argv is None else argv
    train(parse_arguments(argv))


if __name__ == "__main__":
    main()
