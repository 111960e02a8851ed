"""Quiz mode, "predict, then reveal": what the model really did at one decoding step, and how a guess scores.

Before a step is shown, the student guesses where the model will look in the source and which
token it will write; then the truth is revealed. The rules, so that a teacher can explain them:

- **Where it looks** is the source word with the largest cross-attention weight at this step,
  in one decoder layer, for one chosen head (the page's default: its readable head) or for the mean
  over the layer's heads. The weights
  of a word's pieces are summed into the word (as "Merge subwords into words" does), so a word
  cut into three pieces competes with its whole weight. Special tokens count as words: models
  really do park attention on </s>. On a tie the earlier word wins.
- **What it writes** is right when the guessed piece is the token the model output at this step
  (its own choice under greedy or beam search, or the typed target under teacher forcing).

Each question guessed at a step is one point to win; scores add up over the steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from model.analysis.words import group_pieces, merge_keys, word_text
from model.trace import Trace


@dataclass(frozen=True)
class StepTruth:
    """What the model did at one decoding step, as the quiz asks about it."""

    step: int
    words: list[str]  # source words as plain text, </s> included
    weights: np.ndarray  # (words,) cross-attention of this step on each word, summed over its pieces
    looked_at: int  # index in ``words`` of the largest weight (the earlier word on a tie)
    produced: str  # the piece output at this step
    candidates: list[str]  # pieces offered for the token guess: the top k and ``produced``, alphabetical


@dataclass(frozen=True)
class Guess:
    where: int | None = None  # index into StepTruth.words
    what: str | None = None  # a piece


@dataclass(frozen=True)
class StepScore:
    where_right: bool | None  # None when that question was not answered
    what_right: bool | None
    weight_on_guess: float | None  # the weight the model gave the guessed word


@dataclass(frozen=True)
class QuizScore:
    where_right: int = 0
    where_asked: int = 0
    what_right: int = 0
    what_asked: int = 0

    @property
    def right(self) -> int:
        return self.where_right + self.what_right

    @property
    def asked(self) -> int:
        return self.where_asked + self.what_asked


def step_truth(trace: Trace, step: int, layer: int, head: int | None = None) -> StepTruth:
    """The answer at ``step`` (0 = the step after <s>) for decoder ``layer``; ``head=None`` averages the heads."""
    if not 0 <= step < trace.n_steps:
        raise ValueError(f"step must be in 0..{trace.n_steps - 1}, not {step}")
    rows = trace.attention_stack("cross")[layer, :, step, :]  # (heads, source pieces)
    row = rows.mean(axis=0) if head is None else rows[head]
    groups = group_pieces(trace.source_pieces)
    weights = merge_keys(row, groups)
    produced = trace.predicted_pieces[step]
    return StepTruth(
        step=step,
        words=[word_text([trace.source_pieces[i] for i in group]) for group in groups],
        weights=weights,
        looked_at=int(np.argmax(weights)),
        produced=produced,
        candidates=sorted({*trace.topk_pieces[step], produced}),
    )


def score_step(truth: StepTruth, guess: Guess) -> StepScore:
    """Score one step's guess against the truth; an unanswered question scores None, not wrong."""
    where_right = weight = None
    if guess.where is not None:
        if not 0 <= guess.where < len(truth.words):
            raise ValueError(f"guess.where must index one of the {len(truth.words)} source words, not {guess.where}")
        where_right = guess.where == truth.looked_at
        weight = float(truth.weights[guess.where])
    what_right = None if guess.what is None else guess.what == truth.produced
    return StepScore(where_right=where_right, what_right=what_right, weight_on_guess=weight)


def total_score(scores: Iterable[StepScore]) -> QuizScore:
    """Add up the steps: one point per question answered right, out of the questions answered."""
    totals = {"where_right": 0, "where_asked": 0, "what_right": 0, "what_asked": 0}
    for score in scores:
        for question, right in (("where", score.where_right), ("what", score.what_right)):
            if right is not None:
                totals[f"{question}_asked"] += 1
                totals[f"{question}_right"] += int(right)
    return QuizScore(**totals)
