"""Subword pieces as words: which pieces form each word, and attention summed (keys) or averaged (queries) over a
word's pieces so that rows stay distributions. Plain numpy, shared by the figures (viz.tokens) and the quiz."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from model.tokenizer import WORD_START, word_index

# Structural specials: they mark sentence boundaries and padding rather than text, so a view may hide them; each is
# a word of its own.
STRUCTURAL_PIECES = ("<s>", "</s>", "<pad>")


def word_text(pieces: Sequence[str]) -> str:
    """The plain text of a word made of pieces ("▁rid", "ing" -> "riding"); not escaped."""
    return "".join(pieces).replace(WORD_START, " ").strip() or WORD_START


def group_pieces(pieces: Sequence[str]) -> list[list[int]]:
    """Positions of the pieces of each word, in order (grouping of model.tokenizer.word_index)."""
    groups: list[list[int]] = []
    for position, word in enumerate(word_index(list(pieces), STRUCTURAL_PIECES)):
        if word == len(groups):
            groups.append([])
        groups[word].append(position)
    return groups


def merge_keys(weights: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """Sum attention over each word's key pieces: (..., keys) -> (..., words).

    Summing keeps each row a distribution: the weight a query gives a word is the weight it
    gives all of the word's pieces together.
    """
    return np.stack([weights[..., list(group)].sum(axis=-1) for group in groups], axis=-1)


def merge_queries(weights: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """Average attention over each word's query pieces: (..., queries, K) -> (..., words, K).

    Averaging (not summing) keeps each row a distribution: a word's row is the mean of its
    pieces' rows.
    """
    return np.stack([weights[..., list(group), :].mean(axis=-2) for group in groups], axis=-2)
