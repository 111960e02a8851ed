"""Average the weights of checkpoints of one architecture and tokenizer: ``python -m model.training.average``.

Two runs that share their starting weights (a run and its ``--init-from`` continuation) end in one
basin of the loss, and the mean of their weights can beat both (a "model soup", Wortsman et al.
2022; docs/training-recipe.md). The card is the first checkpoint's with a history record for
the average; its scores and out-of-domain calibration are dropped, since they belong to other
weights: measure them again (model.evaluate --card-split, model.analysis.domain --card).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from model.analysis.domain import SOURCE_WORDS_FILE
from model.card import Card, DomainSection, TrainingRun
from model.checkpoint import CheckpointError, build_model, read_card, save_checkpoint
from model.tokenizer import Tokenizer
from model.training.optimization import mean_weights
from model.transformer import Transformer


def average_checkpoints(folders: list[Path]) -> tuple[Transformer, Tokenizer]:
    """The first checkpoint's model with the mean of every checkpoint's weights (model.training.optimization's
    mean_weights); every folder must have the first's config.json and tokenizer files."""
    model, tokenizer = build_model(folders[0])

    def weights() -> Iterator[dict[str, torch.Tensor]]:
        yield model.state_dict()
        for folder in folders[1:]:
            other, _ = build_model(folder)  # validates the folder: its weights match its config
            if other.config.to_dict() != model.config.to_dict():
                raise CheckpointError(f"{folder}: its config.json differs from {folders[0]}'s")
            for name in tokenizer.files:
                if (folder / name).read_bytes() != (folders[0] / name).read_bytes():
                    raise CheckpointError(f"{folder}: its {name} differs from {folders[0]}'s")
            yield other.state_dict()

    model.load_state_dict(mean_weights(weights()))
    return model.eval(), tokenizer


def joint_history(folders: list[Path]) -> list[TrainingRun]:
    """Every training run behind the averaged checkpoints, once each, in order: a continuation's card repeats the runs
    of the checkpoint it started from (with fewer scores), so a run is known by its command, epochs and steps."""
    runs: dict[tuple[Any, ...], TrainingRun] = {}
    for folder in folders:
        for run in read_card(folder).history or []:
            resumes = None if run.resumed_with is None else tuple(run.resumed_with)
            runs.setdefault((run.command, resumes, run.epochs, run.steps), run)
    return list(runs.values())


def averaged_card(folders: list[Path], command: str) -> Card:
    """The first checkpoint's card without what its own run measured, the runs of all of them and the average as its
    history, their commands in order as its ``train_command`` and their summed time as its ``wall_time_s``."""
    # what one training run measured of its own weights is not true of the mean; None: left out of the card
    card = replace(
        read_card(folders[0]),
        scores=None,
        valid_loss=None,
        valid_bleu_greedy=None,
        averaged_epochs=None,
        best_single_epoch=None,
        stopped=None,
    )
    if isinstance(card.domain, DomainSection):
        card.domain = replace(card.domain, calibration=None)
    history = [*joint_history(folders), TrainingRun(command=command, averaged_from=[str(f) for f in folders])]
    card.history = history
    card.final_weights = f"the mean of the weights of {', '.join(str(folder) for folder in folders)}"
    card.train_command = " ; then ".join(run.command for run in history if run.command)
    card.wall_time_s = round(sum(run.wall_time_s for run in history if run.wall_time_s is not None), 1)
    return card


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.training.average",
        description="Write the mean of the weights of two or more checkpoints (same config.json and tokenizer) "
        "as a new checkpoint folder (fp16).",
    )
    parser.add_argument("checkpoints", nargs="+", type=Path, help="checkpoint folders to average")
    parser.add_argument("--out", required=True, type=Path, help="the new checkpoint folder (must not exist)")
    return parser


def main(argv: list[str] | None = None) -> Path:
    parser = build_parser()
    args = parser.parse_args(argv)
    if len(args.checkpoints) < 2:
        parser.error("give at least two checkpoint folders")
    if args.out.exists():
        parser.error(f"--out {args.out}: already exists (the average never overwrites a checkpoint)")
    try:
        model, tokenizer = average_checkpoints(args.checkpoints)
    except (CheckpointError, OSError) as error:
        parser.error(str(error))
    command = shlex.join(["python", "-m", "model.training.average", *(sys.argv[1:] if argv is None else argv)])
    save_checkpoint(args.out, model, tokenizer, averaged_card(args.checkpoints, command), half=True)
    words = [folder / SOURCE_WORDS_FILE for folder in args.checkpoints]
    if all(path.is_file() for path in words) and len({path.read_bytes() for path in words}) == 1:
        shutil.copyfile(words[0], args.out / SOURCE_WORDS_FILE)  # the same training source: the same words
    print(f"{args.out}: the mean of {len(args.checkpoints)} checkpoints", file=sys.stderr)
    return args.out


if __name__ == "__main__":
    main()
