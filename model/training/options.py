"""The command line of ``python -m model.train``, and the arguments a run keeps in its folder (args.json).

A run's arguments are saved when it starts; ``--resume`` continues with the saved ones. Two
kinds of option may differ on a resume. Those of this process alone (the folder, which may be
a copy, time limit, device, threads, progress bar) are this command's, given or not, and are
never carried to a later resume. The run's own plan (epochs, patience, cool-down, and
--max-tokens from the next epoch's batches) changes only where the command gives it and keeps
its saved value otherwise, for this and later resumes. Every resume's command is added to the
saved ``resumed_with`` list, so the final card can say how the run went.

``--init-from CHECKPOINT_DIR`` starts a new run from a checkpoint's weights, tokenizer and
architecture with a fresh optimiser (warmed up over --warmup steps): quality can grow across
sessions from the shipped weights alone, without committing optimiser state.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from model.training.state import STATE_FILE

SESSION_OPTIONS = ("out", "max_minutes", "quiet", "device", "threads")  # this process's: a resume's own or defaults
RUN_PLAN_OPTIONS = ("epochs", "patience", "cooldown_epochs", "max_tokens")  # a resume's where given, else saved
DEFAULT_DROPOUT = 0.3  # --dropout of a new model; with --init-from the checkpoint's stays unless given


def subword_sampling(text: str) -> float:
    """--subword-sampling's value: a probability or a smoothing exponent, in (0, 1], or 0 for off; refused at parse
    time, before a tokenizer is trained or a run folder is made."""
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1 (0: off), not {value}")
    return value


def epochs_count(text: str) -> float:
    """--cooldown-epochs' value: a number of epochs, 0 or more (a negative one would stop all learning)."""
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no cool-down) or more, not {value}")
    return value


def _data_options(parser: argparse.ArgumentParser) -> None:
    """Where the sentences come from: a --data folder or explicit files."""
    group = parser.add_argument_group("data")
    group.add_argument("--data", help="folder with {split}.{lang} files (plain or .gz), e.g. ../shared/data/multi30k")
    group.add_argument("--src-lang", default="en", help="source language suffix of the files in --data")
    group.add_argument("--tgt-lang", default="de", help="target language suffix of the files in --data")
    group.add_argument("--train-split", default="train", help="split name of the training files in --data")
    group.add_argument("--valid-split", default="val", help="split name of the validation files in --data")
    group.add_argument("--train-src", help="explicit training source file (instead of --data)")
    group.add_argument("--train-tgt", help="explicit training target file (instead of --data)")
    group.add_argument("--valid-src", help="explicit validation source file (instead of --data)")
    group.add_argument("--valid-tgt", help="explicit validation target file (instead of --data)")


def _tokenizer_options(parser: argparse.ArgumentParser) -> None:
    """The SentencePiece tokenizer a new run trains."""
    group = parser.add_argument_group("tokenizer")
    group.add_argument(
        "--vocab-size", type=int, default=8000, help="SentencePiece vocabulary size (per side if --separate-vocab)"
    )
    group.add_argument(
        "--separate-vocab", action="store_true", help="train one tokenizer per language instead of a joint one"
    )
    group.add_argument(
        "--tokenizer-type", default="bpe", choices=["bpe", "unigram", "char", "word"], help="SentencePiece model type"
    )
    group.add_argument(
        "--normalization",
        default="nmt_nfkc",
        choices=["nmt_nfkc", "identity"],
        help="SentencePiece text normalisation; identity leaves out the ~240 KB NFKC table, for tiny checkpoints "
        "of ASCII text (e.g. python -m model.training.toy_tasks data), where NFKC changes nothing",
    )
    group.add_argument(
        "--subword-sampling",
        type=subword_sampling,
        default=0.0,
        help="segment the training sentences anew every epoch, each merge of a BPE tokenizer skipped with this "
        "probability (BPE-dropout; 0.1 in Provilkov et al. 2020), or a unigram tokenizer's segmentation sampled with "
        "this smoothing; validation and translation keep the best segmentation. 0: off",
    )


def _model_options(parser: argparse.ArgumentParser) -> None:
    """The architecture of a new model (TransformerConfig's fields)."""
    group = parser.add_argument_group("model")
    group.add_argument("--layers", type=int, default=4, help="encoder layers and decoder layers (each)")
    group.add_argument("--decoder-layers", type=int, help="decoder layers when different from --layers")
    group.add_argument("--d-model", type=int, default=128, help="model width")
    group.add_argument("--heads", type=int, default=4, help="attention heads per layer")
    group.add_argument("--d-ff", type=int, default=256, help="feed-forward inner width")
    group.add_argument(
        "--dropout",
        type=float,
        help=f"dropout on sublayer outputs and embeddings (default {DEFAULT_DROPOUT}; with --init-from the "
        "checkpoint's)",
    )
    group.add_argument(
        "--attention-dropout",
        type=float,
        help="dropout on the attention probabilities (default: --dropout; with --init-from the checkpoint's)",
    )
    group.add_argument(
        "--activation-dropout",
        type=float,
        help="dropout inside the feed-forward network, after its activation (default: --dropout; with --init-from "
        "the checkpoint's)",
    )
    group.add_argument("--activation", default="relu", choices=["relu", "gelu"], help="feed-forward activation")
    group.add_argument("--norm-first", action="store_true", help="pre-norm instead of the paper's post-norm")
    group.add_argument("--final-norm", action="store_true", help="LayerNorm after each stack (as torch.nn.Transformer)")
    group.add_argument("--max-len", type=int, default=256, help="longest sequence (positions) the model accepts")
    group.add_argument("--no-tie", action="store_true", help="do not tie embeddings and output weights")


def _optimisation_options(parser: argparse.ArgumentParser) -> None:
    """Epochs, batches, learning rate and the rest of the run's plan."""
    group = parser.add_argument_group("optimisation")
    group.add_argument("--epochs", type=int, default=100, help="maximum number of epochs")
    group.add_argument(
        "--max-tokens",
        type=int,
        default=4096,
        help="padded tokens per batch (per side, summed over processes); may change on --resume",
    )
    group.add_argument("--lr", type=float, default=2e-3, help="peak learning rate, reached after --warmup steps")
    group.add_argument("--warmup", type=int, default=1000, help="linear warmup steps before inverse-square-root decay")
    group.add_argument(
        "--cooldown-epochs",
        type=epochs_count,
        default=0.0,
        help="take the learning rate linearly to 0 over the last this many of --epochs (0: no cool-down). May be "
        "given on --resume with a new --epochs, to end a run whose quality has levelled off",
    )
    group.add_argument("--label-smoothing", type=float, default=0.1, help="label smoothing of the cross-entropy")
    group.add_argument("--clip-norm", type=float, default=1.0, help="gradient clipping max norm (0 disables)")
    group.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay")
    group.add_argument("--seed", type=int, default=1, help="random seed (data order, initialisation, dropout)")
    group.add_argument(
        "--patience", type=int, default=10, help="stop after this many epochs without a better validation BLEU"
    )
    group.add_argument(
        "--keep-last", type=int, default=10, help="epoch checkpoints kept and averaged into the final model"
    )
    group.add_argument(
        "--max-minutes", type=float, help="stop cleanly (state saved, averaged model written) after this long"
    )
    group.add_argument("--save-every", type=int, default=200, help="save resumable state every this many steps")
    group.add_argument(
        "--valid-bleu-limit", type=int, default=0, help="sentences used for the per-epoch greedy BLEU (0: all)"
    )


def _run_options(parser: argparse.ArgumentParser) -> None:
    """The run folder, resuming and continuing, devices, precision, snapshots."""
    group = parser.add_argument_group("run")
    group.add_argument("--out", required=True, help="run folder: state, metrics.jsonl, epochs/, snapshots/, final/")
    group.add_argument("--resume", action="store_true", help="continue the run in --out from its last saved state")
    group.add_argument(
        "--init-from",
        metavar="CHECKPOINT_DIR",
        help="start a new run from this checkpoint's weights, tokenizer and architecture (the model options and "
        "--vocab-size are not used) with a fresh optimiser: e.g. continue a shipped model with a lower --lr and a "
        "short --warmup",
    )
    group.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    group.add_argument("--threads", type=int, help="CPU threads for PyTorch (default: PyTorch's choice)")
    group.add_argument("--no-amp", action="store_true", help="disable bf16 mixed precision on CUDA")
    group.add_argument(
        "--cpu-bf16",
        action="store_true",
        help="bf16 mixed precision on the CPU too: matrix products in bf16, attention and the loss's softmax in fp32, "
        "fp32 weights. Faster on CPUs with AVX512-BF16 or AMX, slower elsewhere; the model may score a little lower "
        "than an fp32 run's (docs/training-recipe.md)",
    )
    group.add_argument(
        "--snapshot-steps", default="0,200", help="steps at which to save shippable fp16 snapshots (0 = untrained)"
    )
    group.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python -m model.train``, grouped as --help shows them: data, tokenizer, model,
    optimisation, run."""
    parser = argparse.ArgumentParser(
        prog="python -m model.train",
        description="Train an encoder-decoder Transformer translation model and write a checkpoint folder.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _data_options(parser)
    _tokenizer_options(parser)
    _model_options(parser)
    _optimisation_options(parser)
    _run_options(parser)
    return parser


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed, with ``command`` (the command line, as the card keeps it) and ``given`` (the names of the
    options on it: what a --resume replaces) added."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # argparse fills in a default only where the namespace lacks the attribute: a marker left in place is not given
    not_given = object()
    marked = parser.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys(vars(args), not_given)))
    args.given = sorted(key for key, value in vars(marked).items() if value is not not_given)
    args.command = "python -m model.train " + " ".join(shlex.quote(a) for a in argv)
    return args


def run_arguments(args: argparse.Namespace, out: Path, write: bool) -> argparse.Namespace:
    """The arguments the run in ``out`` uses: ``args`` for a new run, the saved ones on --resume.

    A new run refuses a folder that already holds one; --resume needs one. ``write`` (rank 0)
    saves the arguments in force to args.json, so later resumes continue with them.
    """
    state_path = out / STATE_FILE
    if args.resume and args.init_from:
        raise SystemExit(
            "--resume continues the run in --out with its own weights and optimiser; --init-from starts a new run"
        )
    if args.resume and not state_path.exists():
        raise SystemExit(f"--resume: {state_path} does not exist")
    if not args.resume and state_path.exists():
        raise SystemExit(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    if not args.resume:
        if write:
            saved = {key: value for key, value in vars(args).items() if key != "given"}
            (out / "args.json").write_text(json.dumps(saved, indent=2))
        return args
    saved = json.loads((out / "args.json").read_text())
    missing = sorted(set(vars(args)) - {"given"} - set(saved))
    if missing:
        options = ", ".join("--" + name.replace("_", "-") for name in missing)
        raise SystemExit(
            f"{out / 'args.json'} was written by an older model.train that had no {options}: this version cannot "
            f"resume it. Start a new run from its weights instead: --init-from {out / 'final'} (or an epochs/ folder)"
        )
    for key in SESSION_OPTIONS:
        saved[key] = getattr(args, key)
    for key in RUN_PLAN_OPTIONS:
        if key in args.given:
            saved[key] = getattr(args, key)
    saved["resume"] = True
    saved["resumed_with"] = [*saved.get("resumed_with", []), args.command]
    if write:  # later resumes continue with the settings in force now
        (out / "args.json").write_text(json.dumps(saved, indent=2))
    return argparse.Namespace(**saved)
