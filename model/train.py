"""Train a translation Transformer: ``python -m model.train --help``.

Reads a parallel corpus, trains SentencePiece, trains the model with token-bucketed
batches, Adam (0.9, 0.98), inverse-square-root warmup, label smoothing and gradient
clipping; validates (loss and greedy BLEU) every epoch, keeps the last N epoch weights and
writes their average as the final checkpoint. ``--resume`` continues exactly where the last
saved state left off. Runs unchanged under ``torchrun`` (DistributedDataParallel).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shlex
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path

import sacrebleu
import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from model.checkpoint import save_checkpoint
from model.config import TransformerConfig
from model.data import Example, collate, read_parallel, split_file, token_batches
from model.tokenizer import Tokenizer, train_sentencepiece
from model.transformer import Transformer
from model.translator import Translator


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.train",
        description="Train an encoder-decoder Transformer translation model and write a checkpoint folder.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    data = parser.add_argument_group("data")
    data.add_argument("--data", help="folder with {split}.{lang} files (plain or .gz), e.g. ../shared/data/multi30k")
    data.add_argument("--src-lang", default="en", help="source language suffix of the files in --data")
    data.add_argument("--tgt-lang", default="de", help="target language suffix of the files in --data")
    data.add_argument("--train-split", default="train", help="split name of the training files in --data")
    data.add_argument("--valid-split", default="val", help="split name of the validation files in --data")
    data.add_argument("--train-src", help="explicit training source file (instead of --data)")
    data.add_argument("--train-tgt", help="explicit training target file (instead of --data)")
    data.add_argument("--valid-src", help="explicit validation source file (instead of --data)")
    data.add_argument("--valid-tgt", help="explicit validation target file (instead of --data)")
    tok = parser.add_argument_group("tokenizer")
    tok.add_argument(
        "--vocab-size", type=int, default=8000, help="SentencePiece vocabulary size (per side if --separate-vocab)"
    )
    tok.add_argument(
        "--separate-vocab", action="store_true", help="train one tokenizer per language instead of a joint one"
    )
    tok.add_argument(
        "--tokenizer-type", default="bpe", choices=["bpe", "unigram", "char", "word"], help="SentencePiece model type"
    )
    tok.add_argument(
        "--normalization",
        default="nmt_nfkc",
        choices=["nmt_nfkc", "identity"],
        help="SentencePiece text normalisation; identity leaves out the ~240 KB NFKC table, for tiny checkpoints "
        "of ASCII text (e.g. python -m model.toy_tasks data), where NFKC changes nothing",
    )
    arch = parser.add_argument_group("model")
    arch.add_argument("--layers", type=int, default=4, help="encoder layers and decoder layers (each)")
    arch.add_argument("--decoder-layers", type=int, help="decoder layers when different from --layers")
    arch.add_argument("--d-model", type=int, default=128, help="model width")
    arch.add_argument("--heads", type=int, default=4, help="attention heads per layer")
    arch.add_argument("--d-ff", type=int, default=256, help="feed-forward inner width")
    arch.add_argument("--dropout", type=float, default=0.3, help="dropout on sublayers, embeddings and attention")
    arch.add_argument("--activation", default="relu", choices=["relu", "gelu"], help="feed-forward activation")
    arch.add_argument("--norm-first", action="store_true", help="pre-norm instead of the paper's post-norm")
    arch.add_argument("--final-norm", action="store_true", help="LayerNorm after each stack (as torch.nn.Transformer)")
    arch.add_argument("--max-len", type=int, default=256, help="longest sequence (positions) the model accepts")
    arch.add_argument("--no-tie", action="store_true", help="do not tie embeddings and output weights")
    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--epochs", type=int, default=100, help="maximum number of epochs")
    opt.add_argument(
        "--max-tokens",
        type=int,
        default=4096,
        help="padded tokens per batch (per side, summed over processes); may change on --resume",
    )
    opt.add_argument("--lr", type=float, default=2e-3, help="peak learning rate, reached after --warmup steps")
    opt.add_argument("--warmup", type=int, default=1000, help="linear warmup steps before inverse-square-root decay")
    opt.add_argument("--label-smoothing", type=float, default=0.1, help="label smoothing of the cross-entropy")
    opt.add_argument("--clip-norm", type=float, default=1.0, help="gradient clipping max norm (0 disables)")
    opt.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay")
    opt.add_argument("--seed", type=int, default=1, help="random seed (data order, initialisation, dropout)")
    opt.add_argument(
        "--patience", type=int, default=10, help="stop after this many epochs without a better validation BLEU"
    )
    opt.add_argument(
        "--keep-last", type=int, default=10, help="epoch checkpoints kept and averaged into the final model"
    )
    opt.add_argument(
        "--max-minutes", type=float, help="stop cleanly (state saved, averaged model written) after this long"
    )
    opt.add_argument("--save-every", type=int, default=200, help="save resumable state every this many steps")
    opt.add_argument(
        "--valid-bleu-limit", type=int, default=0, help="sentences used for the per-epoch greedy BLEU (0: all)"
    )
    run = parser.add_argument_group("run")
    run.add_argument("--out", required=True, help="run folder: state, metrics.jsonl, epochs/, snapshots/, final/")
    run.add_argument("--resume", action="store_true", help="continue the run in --out from its last saved state")
    run.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    run.add_argument("--threads", type=int, help="CPU threads for PyTorch (default: PyTorch's choice)")
    run.add_argument("--no-amp", action="store_true", help="disable bf16 mixed precision on CUDA")
    run.add_argument(
        "--snapshot-steps", default="0,200", help="steps at which to save shippable fp16 snapshots (0 = untrained)"
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


class Run:
    """Process-group facts: a single process, or one rank of a torchrun job."""

    def __init__(self, device_name: str) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device_name == "auto":
            device_name = "cuda" if torch.cuda.is_available() else "cpu"
        if device_name == "cuda" and self.world > 1:
            device_name = f"cuda:{local_rank}"
        self.device = torch.device(device_name)
        if self.world > 1:
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def all_sum(self, value: float) -> float:
        if self.world == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return float(tensor)


def load_corpus(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict]:
    if args.data:
        paths = {
            "train_src": split_file(args.data, args.train_split, args.src_lang),
            "train_tgt": split_file(args.data, args.train_split, args.tgt_lang),
            "valid_src": split_file(args.data, args.valid_split, args.src_lang),
            "valid_tgt": split_file(args.data, args.valid_split, args.tgt_lang),
        }
    else:
        paths = {k: getattr(args, k) for k in ("train_src", "train_tgt", "valid_src", "valid_tgt")}
        missing = [k for k, v in paths.items() if not v]
        if missing:
            raise SystemExit(
                f"give --data or all of --train-src --train-tgt --valid-src --valid-tgt (missing {missing})"
            )
    train = read_parallel(paths["train_src"], paths["train_tgt"])
    valid = read_parallel(paths["valid_src"], paths["valid_tgt"])
    return train, valid, {k: str(v) for k, v in paths.items()}


def get_tokenizer(args: argparse.Namespace, out: Path, train: list[tuple[str, str]], run: Run) -> Tokenizer:
    """Train once (rank 0) and save into the run folder; later calls and other ranks load it."""
    if run.main and not ((out / "tokenizer.model").exists() or (out / "source.model").exists()):
        sources, targets = [s for s, _ in train], [t for _, t in train]

        def trained(sentences: list[str]) -> bytes:
            return train_sentencepiece(
                sentences, args.vocab_size, args.tokenizer_type, normalization=args.normalization
            )

        if args.separate_vocab:
            tokenizer = Tokenizer.from_model_bytes(trained(sources), trained(targets))
        else:
            tokenizer = Tokenizer.from_model_bytes(trained(sources + targets))
        tokenizer.save(out)
    run.barrier()
    return Tokenizer.load(out)


def make_config(args: argparse.Namespace, tokenizer: Tokenizer) -> TransformerConfig:
    tie = not args.no_tie
    return TransformerConfig(
        src_vocab_size=tokenizer.vocab_size("source"),
        tgt_vocab_size=tokenizer.vocab_size("target"),
        d_model=args.d_model,
        n_heads=args.heads,
        n_encoder_layers=args.layers,
        n_decoder_layers=args.decoder_layers or args.layers,
        d_ff=args.d_ff,
        dropout=args.dropout,
        activation=args.activation,
        norm_first=args.norm_first,
        final_norm=args.final_norm,
        max_len=args.max_len,
        share_embeddings=tie and tokenizer.joint,
        tie_output=tie,
        output_bias=not tie,
        **tokenizer.special_ids(),
    )


def encode_examples(pairs: list[tuple[str, str]], tokenizer: Tokenizer, config: TransformerConfig) -> list[Example]:
    """Pieces + EOS on the source, BOS + pieces + EOS on the target; over-long pairs are dropped."""
    examples = []
    for source, target in pairs:
        src = tokenizer.encode(source, "source") + [config.eos_id]
        tgt = [config.bos_id] + tokenizer.encode(target, "target") + [config.eos_id]
        if 1 < len(src) <= config.max_len and 2 < len(tgt) <= config.max_len:
            examples.append(Example(src, tgt))
    return examples


def inverse_sqrt(step: int, warmup: int) -> float:
    """Multiplier of the peak rate: linear warmup, then decay with 1/sqrt(step) (section 5.3)."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


def train_step(
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    parameters: Iterable[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    src: torch.Tensor,
    tgt: torch.Tensor,
    pad_id: int,
    *,
    label_smoothing: float,
    clip_norm: float,
    use_amp: bool,
    loss_divisor: float,
    weight: float = 1.0,
) -> torch.Tensor:
    """One optimisation step on a padded batch; returns the summed (label-smoothed) target loss, detached.

    ``forward(src, tgt_in)`` gives logits (B, T-1, V) for ``tgt_in = tgt[:, :-1]``: the model itself, or any
    stand-in with the same contract (benchmarks time nn.Transformer with this very step). The loss is summed
    over target tokens, times ``weight``, and ``sum / loss_divisor`` is what backpropagates. Under ``use_amp``
    the forward runs in bf16 autocast on CUDA and the loss in fp32.
    """
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
        logits = forward(src, tgt[:, :-1])
    loss_sum = (
        F.cross_entropy(
            logits.flatten(0, 1).float(),
            tgt[:, 1:].flatten(),
            ignore_index=pad_id,
            label_smoothing=label_smoothing,
            reduction="sum",
        )
        * weight
    )
    (loss_sum / loss_divisor).backward()
    if clip_norm:
        torch.nn.utils.clip_grad_norm_(parameters, clip_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum.detach()


def weights_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict without tied duplicates, on CPU, for epoch files and averaging."""
    seen: set[int] = set()
    weights = {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        weights[name] = tensor.detach().cpu().clone()
    return weights


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    total = {k: v.double() for k, v in load_file(str(paths[0])).items()}
    for path in paths[1:]:
        for k, v in load_file(str(path)).items():
            total[k] += v.double()
    return {k: (v / len(paths)).float() for k, v in total.items()}


@torch.inference_mode()
def validation_loss(
    model: Transformer, examples: list[Example], config: TransformerConfig, device: torch.device
) -> float:
    total, tokens = 0.0, 0
    for batch in token_batches(examples, 8000, seed=0):
        src, tgt = collate([examples[i] for i in batch], config.pad_id)
        src, tgt = src.to(device), tgt.to(device)
        logits = model(src, tgt[:, :-1])
        total += float(
            F.cross_entropy(
                logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), ignore_index=config.pad_id, reduction="sum"
            )
        )
        tokens += int((tgt[:, 1:] != config.pad_id).sum())
    return total / max(tokens, 1)


def greedy_bleu(translator: Translator, pairs: list[tuple[str, str]]) -> float:
    hypotheses = translator.translate_batch([s for s, _ in pairs], beam_size=1)
    return sacrebleu.corpus_bleu(hypotheses, [[t for _, t in pairs]]).score


def save_state(path: Path, model, optimizer, step: int, epoch: int, batch_in_epoch: int, extra: dict) -> None:
    """Everything --resume needs: written to a temp file and renamed, so a kill never leaves half a file."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "epoch": epoch,
        "batch_in_epoch": batch_in_epoch,
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "extra": json.dumps(extra),
    }
    temporary = path.with_suffix(".tmp")
    torch.save(state, temporary)
    temporary.replace(path)


def log_metrics(path: Path, record: dict) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def train(args: argparse.Namespace) -> Path:
    run = Run(args.device)
    out = Path(args.out)
    if run.main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "epochs").mkdir(exist_ok=True)
    run.barrier()
    if args.threads:
        torch.set_num_threads(args.threads)
    state_path = out / "state.pt"
    if args.resume and not state_path.exists():
        raise SystemExit(f"--resume: {state_path} does not exist")
    if not args.resume and state_path.exists():
        raise SystemExit(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    if args.resume:  # the saved arguments define the run; only run-control options may change
        saved = json.loads((out / "args.json").read_text())
        saved.setdefault("command", args.command)
        for key in ("epochs", "max_minutes", "quiet", "device", "threads", "patience"):
            saved[key] = getattr(args, key)
        if getattr(args, "max_tokens_given", False):  # a new batch size takes effect from the next epoch's batches
            saved["max_tokens"] = args.max_tokens
        saved["resume"] = True
        if run.main:  # later resumes continue with the settings in force now
            (out / "args.json").write_text(json.dumps(saved, indent=2))
        args = argparse.Namespace(**saved)
    elif run.main:
        (out / "args.json").write_text(json.dumps(vars(args), indent=2))

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    train_pairs, valid_pairs, paths = load_corpus(args)
    tokenizer = get_tokenizer(args, out, train_pairs, run)
    config = make_config(args, tokenizer)
    train_examples = encode_examples(train_pairs, tokenizer, config)
    valid_examples = encode_examples(valid_pairs, tokenizer, config)
    bleu_pairs = valid_pairs[: args.valid_bleu_limit] if args.valid_bleu_limit else valid_pairs

    model = Transformer(config).to(run.device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=args.weight_decay
    )
    step, start_epoch, skip_batches = 0, 1, 0
    extra = {"best_bleu": -1.0, "best_epoch": 0, "elapsed": 0.0, "stopped": ""}
    if args.resume:
        state = torch.load(state_path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, start_epoch, skip_batches = state["step"], state["epoch"], state["batch_in_epoch"]
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        extra = json.loads(state["extra"])
        if run.main:
            print(f"resuming at epoch {start_epoch}, batch {skip_batches}, step {step}", file=sys.stderr)
    trained = model
    if run.world > 1:
        trained = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[run.device.index] if run.device.type == "cuda" else None
        )
    use_amp = run.device.type == "cuda" and not args.no_amp
    snapshot_steps = sorted({int(s) for s in args.snapshot_steps.split(",") if s.strip()})
    translator = Translator(model, tokenizer, run.device)
    card_base = {"source_language": args.src_lang, "target_language": args.tgt_lang, "data": paths}

    def snapshot(name: str) -> None:
        if run.main and not (out / "snapshots" / name).exists():
            model.eval()
            save_checkpoint(
                out / "snapshots" / name, model, tokenizer, {**card_base, "snapshot": name, "step": step}, half=True
            )
            model.train()

    session_start = time.time() - extra["elapsed"]
    clock_start = time.time()
    if step == 0:
        snapshot("untrained")
    epoch = start_epoch
    for epoch in range(start_epoch, args.epochs + 1):
        model.train()
        batches = token_batches(train_examples, args.max_tokens, seed=args.seed * 1000 + epoch)
        progress = tqdm(
            batches, desc=f"epoch {epoch}", disable=args.quiet or not run.main, initial=skip_batches, total=len(batches)
        )
        epoch_loss, epoch_tokens, epoch_start, seen_tokens = 0.0, 0, time.time(), 0
        if skip_batches:  # resuming inside this epoch: its loss totals continue from the saved state
            epoch_loss, epoch_tokens = extra.get("epoch_loss", 0.0), extra.get("epoch_tokens", 0)
        for index, batch in enumerate(batches):
            if index < skip_batches:
                continue
            local = [train_examples[i] for i in batch[run.rank :: run.world]]
            # A batch smaller than the world leaves some ranks without sentences; they still run a
            # forward/backward (DDP all-reduces every step) on a stand-in whose loss counts zero.
            weight = 1.0 if local else 0.0
            local = local or [train_examples[batch[0]]]
            src, tgt = collate(local, config.pad_id)
            src, tgt = src.to(run.device), tgt.to(run.device)
            target = tgt[:, 1:]
            local_tokens = int((target != config.pad_id).sum()) if weight else 0
            global_tokens = run.all_sum(local_tokens)
            for group in optimizer.param_groups:
                group["lr"] = args.lr * inverse_sqrt(step + 1, args.warmup)
            loss_sum = train_step(
                trained,
                model.parameters(),
                optimizer,
                src,
                tgt,
                config.pad_id,
                label_smoothing=args.label_smoothing,
                clip_norm=args.clip_norm,
                use_amp=use_amp,
                # DDP averages gradients over ranks; dividing by global tokens / world makes that the global token mean
                loss_divisor=global_tokens / run.world,
                weight=weight,
            )
            step += 1
            epoch_loss += run.all_sum(float(loss_sum))
            epoch_tokens += global_tokens
            seen_tokens += run.all_sum(int(weight * sum(len(e.src) + len(e.tgt) for e in local)))
            progress.update(1)
            progress.set_postfix(
                loss=f"{epoch_loss / max(epoch_tokens, 1):.3f}", lr=f"{optimizer.param_groups[0]['lr']:.2e}"
            )
            if step in snapshot_steps:
                snapshot("untrained" if step == 0 else "early")
            extra.update(epoch_loss=epoch_loss, epoch_tokens=epoch_tokens)
            if run.main and step % args.save_every == 0:
                extra["elapsed"] = time.time() - session_start
                save_state(state_path, model, optimizer, step, epoch, index + 1, extra)
            # all ranks stop at the same step: when the clock of any one of them has run out
            if args.max_minutes and run.all_sum(float(time.time() - clock_start > args.max_minutes * 60)):
                break
        progress.close()
        interrupted = index + 1 < len(batches)
        if interrupted:
            extra["stopped"] = f"--max-minutes reached in epoch {epoch}"
            if run.main:
                extra["elapsed"] = time.time() - session_start
                save_state(state_path, model, optimizer, step, epoch, index + 1, extra)
            break
        skip_batches = 0
        model.eval()
        record = {"epoch": epoch, "step": step, "train_loss": epoch_loss / max(epoch_tokens, 1)}
        if run.main:
            record["valid_loss"] = validation_loss(model, valid_examples, config, run.device)
            record["valid_bleu_greedy"] = greedy_bleu(translator, bleu_pairs)
            record["tokens_per_s"] = seen_tokens / (time.time() - epoch_start)
            record["elapsed_s"] = time.time() - session_start
            record["lr"] = optimizer.param_groups[0]["lr"]
            log_metrics(out / "metrics.jsonl", record)
            print(json.dumps(record), file=sys.stderr)
            save_file(weights_of(model), str(out / "epochs" / f"epoch_{epoch:03d}.safetensors"))
            for old in sorted((out / "epochs").glob("epoch_*.safetensors"))[: -args.keep_last]:
                old.unlink()
            if record["valid_bleu_greedy"] > extra["best_bleu"]:
                extra["best_bleu"], extra["best_epoch"] = record["valid_bleu_greedy"], epoch
            extra["elapsed"] = time.time() - session_start
            save_state(state_path, model, optimizer, step, epoch + 1, 0, extra)
        best_epoch = run.all_sum(extra["best_epoch"] if run.main else 0)
        if epoch - best_epoch >= args.patience:
            extra["stopped"] = f"early stop: no better validation BLEU since epoch {int(best_epoch)}"
            break
    if run.main:
        write_final(
            out,
            model,
            tokenizer,
            config,
            card_base,
            extra,
            valid_examples,
            bleu_pairs,
            run,
            args,
            time.time() - session_start,
        )
    run.barrier()
    if run.world > 1:
        dist.destroy_process_group()
    return out / "final"


def write_final(
    out, model, tokenizer, config, card_base, extra, valid_examples, bleu_pairs, run, args, elapsed
) -> None:
    """Average the kept epoch weights into final/ (fp16), with the validation scores on its card."""
    model.eval()
    translator = Translator(model, tokenizer, run.device)
    epochs = sorted((out / "epochs").glob("epoch_*.safetensors"))
    if len(epochs) > 1:  # keep the average only when it validates at least as well as the last weights
        last_bleu = greedy_bleu(translator, bleu_pairs)
        last_weights = weights_of(model)
        model.load_state_dict(average_weights(epochs), strict=False)
        if greedy_bleu(translator, bleu_pairs) < last_bleu:
            model.load_state_dict(last_weights, strict=False)
            epochs = epochs[-1:]
    card = {
        **card_base,
        "averaged_epochs": [p.stem for p in epochs],
        "valid_loss": validation_loss(model, valid_examples, config, run.device),
        "valid_bleu_greedy": greedy_bleu(translator, bleu_pairs),
        "best_single_epoch": {"epoch": extra["best_epoch"], "valid_bleu_greedy": extra["best_bleu"]},
        "stopped": extra.get("stopped", ""),
        "train_command": args.command,
        "hardware": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
        + (f", {torch.cuda.get_device_name(run.device)}" if run.device.type == "cuda" else ""),
        "wall_time_s": round(elapsed, 1),
        "config": asdict(config),
    }
    save_checkpoint(out / "final", model, tokenizer, card, half=True)
    snapshot_dir = out / "snapshots" / "final"
    save_checkpoint(snapshot_dir, model, tokenizer, {**card, "snapshot": "final"}, half=True)
    print(f"final checkpoint: {out / 'final'} (valid greedy BLEU {card['valid_bleu_greedy']:.2f})", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.max_tokens_given = any(a == "--max-tokens" or a.startswith("--max-tokens=") for a in argv)
    args.command = "python -m model.train " + " ".join(shlex.quote(a) for a in argv)  # the run's first command
    train(args)


if __name__ == "__main__":
    main()
