"""What every benchmark function receives: the subject model and how long it may take."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.subject import Subject


@dataclass
class Context:
    subject: Subject
    quick: bool

    def reps(self, quick: int, full: int) -> int:
        """Repeats (or warm-up rounds, or sizes) for --quick and for a full run."""
        return quick if self.quick else full
