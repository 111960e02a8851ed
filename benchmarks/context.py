"""What every benchmark function receives: the subject model and how long it may take."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.subject import REPO, Subject

# Multi30k as ../shared/data lays it out beside a clone of the repository ({split}.{lang}.gz)
DEFAULT_DATA = REPO.parent / "shared" / "data" / "multi30k"


@dataclass
class Context:
    subject: Subject
    quick: bool
    data: Path = DEFAULT_DATA  # parallel corpus folder for the training-epoch benchmark
    baseline_tree: Path | None = None  # an older source tree (git worktree) the training benchmark compares with

    def reps(self, quick: int, full: int) -> int:
        """Repeats (or warm-up rounds, or sizes) for --quick and for a full run."""
        return quick if self.quick else full
