"""Class questions: what a teacher asks a class about one view, with the model's own answer to reveal beside theirs.

Each question is multiple choice, built from a trace: the choices the students pick from, the model's value for each
choice (its attention on each source word, its probability for each candidate token, each head's alignment), and
the choice the model's values make its answer. The kinds, and the views that ask them:

- ``looks_at``: "When the model writes X, which source word does it read most?" (the quiz's "where it looks": a
  decoder layer's cross-attention at one step, one head or the mean of its heads, each word's pieces summed);
- ``next_word``: "What will the model write next?" (the step's top tokens and the one it wrote, with their
  probabilities);
- ``alignment_head``: "Which head of this layer follows the word alignment?" (each cross-attention head's
  diagonality, docs/head-statistics.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.analysis.quiz import step_truth
from model.analysis.words import word_text
from model.heads import module_name
from model.trace import Trace

QUESTION_KINDS = ("looks_at", "next_word", "alignment_head")
MAX_CHOICES = 12  # a question's choices fit a phone's screen: longer sentences offer the model's likeliest words


@dataclass(frozen=True)
class ClassQuestion:
    """One multiple-choice question: ``model_values[i]`` is the model's value for ``choices[i]``
    (``value_label`` says what it is), ``answer`` the index of the model's own answer."""

    kind: str
    prompt: str
    choices: tuple[str, ...]
    model_values: tuple[float, ...]
    answer: int
    value_label: str

    def __post_init__(self) -> None:
        if self.kind not in QUESTION_KINDS:
            raise ValueError(f"unknown question kind {self.kind!r}; known: {', '.join(QUESTION_KINDS)}")
        if not 2 <= len(self.choices) <= MAX_CHOICES:
            raise ValueError(f"a question has 2 to {MAX_CHOICES} choices, not {len(self.choices)}")
        if len(self.model_values) != len(self.choices) or not 0 <= self.answer < len(self.choices):
            raise ValueError("a question needs one model value per choice and an answer among its choices")


def _likeliest(values: np.ndarray, keep: int) -> list[int]:
    """The indices of the ``keep`` largest values, in their original order (the sentence's, the heads')."""
    order = np.argsort(-values, kind="stable")[:keep]
    return sorted(int(i) for i in order)


def looks_at(trace: Trace, step: int, layer: int, head: int | None = None) -> ClassQuestion:
    """Where the model reads at ``step`` (0-based) in decoder ``layer`` (0-based); ``head`` None: the heads' mean."""
    truth = step_truth(trace, step, layer, head)
    kept = _likeliest(truth.weights, MAX_CHOICES)
    weights = truth.weights[kept]
    who = "the mean of its heads" if head is None else f"head {head + 1}"
    return ClassQuestion(
        kind="looks_at",
        prompt=(
            f"When the model writes “{word_text([truth.produced])}” (step {step + 1}), which source word does "
            f"decoder layer {layer + 1} ({who}) read most?"
        ),
        choices=tuple(truth.words[i] for i in kept),
        model_values=tuple(float(w) for w in weights),
        answer=int(np.argmax(weights)),
        value_label="attention weight",
    )


def next_word(trace: Trace, step: int) -> ClassQuestion:
    """What the model writes at ``step`` (0-based): the step's top tokens and the one it wrote, by probability."""
    truth = step_truth(trace, step, 0)
    pieces = list(trace.topk_pieces[step])
    probabilities = [float(p) for p in trace.topk_probs[step]]
    if truth.produced not in pieces:  # teacher forcing, sampling: the written token may lie outside the top k
        pieces.append(truth.produced)
        probabilities.append(float(trace.step_probs[step]))
    kept = _likeliest(np.asarray(probabilities), MAX_CHOICES)
    choices = sorted((pieces[i], probabilities[i]) for i in kept)
    read = word_text(trace.target_pieces[1 : step + 1]) or "nothing yet"
    return ClassQuestion(
        kind="next_word",
        prompt=f"The model has written: {read}. What does it write next (step {step + 1})?",
        choices=tuple(piece for piece, _ in choices),
        model_values=tuple(p for _, p in choices),
        answer=[piece for piece, _ in choices].index(truth.produced),
        value_label="probability",
    )


def alignment_head(trace: Trace, layer: int) -> ClassQuestion:
    """Which cross-attention head of decoder ``layer`` (0-based) lies nearest the word alignment (its diagonality)."""
    # here, not at the top: head_stats imports torch (the search's defaults), and the class store and its command
    # line read ClassQuestion without it
    from model.analysis.head_stats import SpecialPieces, head_statistics, module_axes

    name = module_name("cross", layer)
    query_pieces, key_pieces = module_axes(trace, name)
    statistics = head_statistics(trace.attention[name], query_pieces, key_pieces, special=SpecialPieces.of_trace(trace))
    diagonality = [float(value) for value in statistics["diagonality"]]
    if len(diagonality) < 2:
        raise ValueError("a layer with one head has no head to choose")
    kept = _likeliest(np.asarray(diagonality), MAX_CHOICES)
    return ClassQuestion(
        kind="alignment_head",
        prompt=f"Which head of decoder layer {layer + 1}'s cross-attention follows the word alignment most closely?",
        choices=tuple(f"head {i + 1}" for i in kept),
        model_values=tuple(diagonality[i] for i in kept),
        answer=int(np.argmax([diagonality[i] for i in kept])),
        value_label="diagonality",
    )
