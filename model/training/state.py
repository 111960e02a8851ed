"""A run's resumable state (state.pt in the run folder): weights, optimiser, random generators and position.

Saving and loading it is all ``--resume`` needs to continue exactly where a run stopped: the
same batches in the same order, the same dropout masks, the same optimiser moments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

STATE_FILE = "state.pt"
SAMPLED_FILE = "sampled_epoch.pt"  # --subword-sampling: the current epoch's segmentation of the training pairs


def save_atomically(value: Any, path: Path) -> None:
    """torch.save to a temp file, then renamed into place: a kill never leaves half a file."""
    temporary = path.with_suffix(".tmp")
    torch.save(value, temporary)
    temporary.replace(path)


def save_state(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    step: int,
    epoch: int,
    batch_in_epoch: int,
    extra: dict[str, Any],
) -> None:
    """Everything --resume needs (but the epoch's SAMPLED_FILE), saved atomically."""
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
    save_atomically(state, path)


def load_state(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[int, int, int, dict[str, Any]]:
    """Restore what save_state wrote into ``model``, ``optimizer`` and the random generators.

    Returns the step, the epoch to continue, the batches of it already done, and the extra record.
    """
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state["step"], state["epoch"], state["batch_in_epoch"], json.loads(state["extra"])
