"""What a toy training may be asked for (ToySettings) and the ranges a person may choose from: small enough that a
step takes milliseconds on one CPU thread and a class's trainings fit in memory together. model.training.live trains
with them; the Train view binds a widget to each field."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, fields

from model.config import POSITIONAL_ENCODINGS
from model.training.toy_tasks import TASKS

# What a person may ask for: small enough that a step takes milliseconds on one CPU thread and a class's trainings
# fit in memory together, large enough for every exercise.
LAYER_RANGE = (1, 4)
HEAD_RANGE = (1, 8)
D_MODEL_RANGE = (16, 128)
LENGTH_RANGE = (2, 16)  # symbols per sequence; two or more leave room for a held-out set of unseen inputs
STEP_RANGE = (1, 20_000)
LEARNING_RATE_RANGE = (1e-5, 0.1)


@dataclass(frozen=True)
class ToySettings:
    """Everything a toy training depends on; the same settings and seed train the same model."""

    task: str = "reverse"
    shortest: int = 3  # symbols per input (copy, reverse, sort; svo-sov sentences follow their grammar)
    longest: int = 8
    encoder_layers: int = 2
    decoder_layers: int = 2
    heads: int = 4
    d_model: int = 32
    positional: str = "sinusoidal"  # model.config.POSITIONAL_ENCODINGS
    learning_rate: float = 3e-3
    steps: int = 1000  # the budget: training stops after this many steps (Stop ends it sooner)
    batch_size: int = 128  # pairs per step
    warmup: int = 100  # steps of linear warm-up before the inverse-square-root decay (section 5.3)
    seed: int = 0
    eval_every: int = 25  # steps between held-out measurements (and attention snapshots)
    held_out: int = 200  # held-out inputs, never trained on, that exact match is measured on

    def problems(self) -> list[str]:
        """What is wrong with these settings, in words a person can act on; empty when they can train."""
        problems = []
        if self.task not in TASKS:
            problems.append(f"the task must be one of {', '.join(TASKS)}, not {self.task!r}")
        low, high = LENGTH_RANGE
        if not low <= self.shortest <= self.longest <= high:
            problems.append(
                f"the input lengths must satisfy {low} <= shortest <= longest <= {high} "
                f"(got {self.shortest} to {self.longest})"
            )
        for name, value in (("encoder layers", self.encoder_layers), ("decoder layers", self.decoder_layers)):
            if not LAYER_RANGE[0] <= value <= LAYER_RANGE[1]:
                problems.append(f"{name} must be between {LAYER_RANGE[0]} and {LAYER_RANGE[1]} (got {value})")
        if not HEAD_RANGE[0] <= self.heads <= HEAD_RANGE[1]:
            problems.append(f"heads must be between {HEAD_RANGE[0]} and {HEAD_RANGE[1]} (got {self.heads})")
        if not D_MODEL_RANGE[0] <= self.d_model <= D_MODEL_RANGE[1]:
            problems.append(f"d_model must be between {D_MODEL_RANGE[0]} and {D_MODEL_RANGE[1]} (got {self.d_model})")
        elif self.heads >= 1 and self.d_model % self.heads:
            problems.append(f"d_model ({self.d_model}) must be divisible by the number of heads ({self.heads})")
        if self.positional not in POSITIONAL_ENCODINGS:
            problems.append(f"the positional encoding must be one of {', '.join(POSITIONAL_ENCODINGS)}")
        if not LEARNING_RATE_RANGE[0] <= self.learning_rate <= LEARNING_RATE_RANGE[1]:
            problems.append(
                f"the learning rate must be between {LEARNING_RATE_RANGE[0]:g} and {LEARNING_RATE_RANGE[1]:g} "
                f"(got {self.learning_rate:g})"
            )
        if not STEP_RANGE[0] <= self.steps <= STEP_RANGE[1]:
            problems.append(
                f"the step budget must be between {STEP_RANGE[0]} and {STEP_RANGE[1]:,} (got {self.steps:,})"
            )
        for name in ("batch_size", "warmup", "eval_every", "held_out"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1")
        return problems

    def check(self) -> None:
        """Raise ValueError naming every problem (``problems``)."""
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def same_model(self, other: ToySettings) -> bool:
        """Whether ``other`` trains the same model on the same data (only the rate and the budget may differ), so
        a run with these settings can continue with ``other``."""
        free = {"learning_rate", "steps", "warmup", "eval_every"}
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self) if f.name not in free)

    def command(self, out: str = "runs/toy") -> str:
        """The command line that trains this model again (seeded: the same weights)."""
        defaults = ToySettings()
        options = [
            f"--{f.name.replace('_', '-')} {shlex.quote(str(getattr(self, f.name)))}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(defaults, f.name) or f.name == "task"
        ]
        return " ".join(["python -m model.training.live", *options, "--out", shlex.quote(out)])
