"""The Train view's "Try this" exercises: settings to train a toy model with and what the class should see, each a
claim tests/model/test_live.py trains and checks (docs/train.md#exercises)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from model.training.toy_settings import ToySettings


@dataclass(frozen=True)
class Exercise:
    """A "try this" claim of the Train view: settings to train with and the held-out exact match they should reach
    (``at_least``) or never exceed (``at_most``) within ``steps``, measured every 50 steps on one CPU thread as the
    Train view's workers train. tests/model/test_live.py trains every one that learns and checks it, and shows for
    those that never learn that no training of their model can pass the ceiling."""

    title: str
    changes: dict[str, Any]  # ToySettings fields that differ from the defaults
    expect: str  # what the class should see, in words
    steps: int
    at_least: float | None = None
    at_most: float | None = None

    def settings(self, **more: Any) -> ToySettings:
        return replace(ToySettings(), **{**self.changes, **more})


EXERCISES = (
    Exercise(
        "Reverse, with the positional encoding",
        {},
        "Held-out exact match climbs past 90% within about 500 steps, and the cross-attention of the last layer "
        "turns from a blur into the anti-diagonal: output step i reads source position n-1-i.",
        steps=500,
        at_least=0.9,
    ),
    Exercise(
        "Reverse, without the positional encoding",
        {"positional": "none"},
        "It never learns: exact match stays near 0%. Without the encoding the encoder sees a bag of symbols "
        '("a b c" and "c b a" give it the same vectors), so nothing can tell which symbol comes last.',
        steps=600,
        at_most=0.1,
    ),
    Exercise(
        "Copy, without the positional encoding",
        {"task": "copy", "positional": "none"},
        "It fails too, for the same reason: copying needs to know which symbol came first.",
        steps=600,
        at_most=0.1,
    ),
    Exercise(
        "Sort, without the positional encoding",
        {"task": "sort", "positional": "none"},
        "It learns anyway, within a few hundred steps: sorting needs only which symbols are there, not where.",
        steps=300,
        at_least=0.95,
    ),
    Exercise(
        "Copy with one head",
        {"task": "copy", "heads": 1},
        "One head is enough: it learns the diagonal and copies nearly every held-out input within 400 steps.",
        steps=400,
        at_least=0.9,
    ),
    Exercise(
        "Reverse with a learned positional encoding",
        {"positional": "learned"},
        "It learns as well: the encoding starts as the sinusoids and is trained with the rest of the model.",
        steps=500,
        at_least=0.9,
    ),
)
