"""Two piece lists aligned by difflib: the pieces they share in order, and which pieces changed.

One alignment serves two comparisons: minimal pairs compare a head's attention on the pieces
two sentences share (``align_pieces``), and the experiments show which pieces of a
translation changed (``token_diff``). Pieces are compared exactly (the "▁" word-start mark
included), and difflib's junk heuristic is off, so every piece counts: frequent pieces such
as "▁the" still match in long lists.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

# difflib.SequenceMatcher's (tag, i1, i2, j1, j2): "equal", "replace", "delete" or "insert".
Opcode = tuple[str, int, int, int, int]


def piece_opcodes(first: Sequence[str], second: Sequence[str]) -> list[Opcode]:
    """The difflib opcodes that turn ``first`` into ``second``; their "equal" stretches are the shared pieces."""
    matcher = difflib.SequenceMatcher(None, list(first), list(second), autojunk=False)
    return list(matcher.get_opcodes())


@dataclass(frozen=True)
class PieceAlignment:
    """The pieces two lists share, in order: ``first[n]`` in one list matches ``second[n]`` in the other."""

    first: list[int]
    second: list[int]
    pieces: list[str]  # the shared pieces, in order


def align_pieces(first: Sequence[str], second: Sequence[str]) -> PieceAlignment:
    """Positions of the pieces the two lists share, in order (the "equal" stretches of ``piece_opcodes``)."""
    first_positions: list[int] = []
    second_positions: list[int] = []
    for tag, i1, i2, j1, j2 in piece_opcodes(first, second):
        if tag == "equal":
            first_positions.extend(range(i1, i2))
            second_positions.extend(range(j1, j2))
    return PieceAlignment(first_positions, second_positions, [first[i] for i in first_positions])


def _outside(length: int, spans: list[tuple[int, int]]) -> list[bool]:
    """Per position of a sequence of ``length``: True when no [start, end) span covers it."""
    outside = [True] * length
    for start, end in spans:
        outside[start:end] = [False] * (end - start)
    return outside


@dataclass
class TokenDiff:
    """Two token sequences aligned by difflib: which tokens of each changed.

    ``opcodes`` are difflib.SequenceMatcher's (tag, i1, i2, j1, j2): tag "equal", "replace",
    "delete" (only in ``original``) or "insert" (only in ``other``).
    """

    original: list[str]
    other: list[str]
    opcodes: list[Opcode]

    @property
    def identical(self) -> bool:
        return self.original == self.other

    @property
    def original_changed(self) -> list[bool]:
        """Per original token: True when it is not kept in ``other``."""
        return _outside(len(self.original), [(i1, i2) for tag, i1, i2, _, _ in self.opcodes if tag == "equal"])

    @property
    def other_changed(self) -> list[bool]:
        """Per token of ``other``: True when it is new (not kept from ``original``)."""
        return _outside(len(self.other), [(j1, j2) for tag, _, _, j1, j2 in self.opcodes if tag == "equal"])

    def columns(self) -> list[tuple[int | None, int | None]]:
        """Both sequences laid out side by side: (original index, other index) per column, None for a gap.

        Kept tokens share a column; a replaced stretch takes as many columns as its longer side.
        """
        columns: list[tuple[int | None, int | None]] = []
        for _, i1, i2, j1, j2 in self.opcodes:
            for offset in range(max(i2 - i1, j2 - j1)):
                columns.append((i1 + offset if i1 + offset < i2 else None, j1 + offset if j1 + offset < j2 else None))
        return columns


def token_diff(original: Sequence[str], other: Sequence[str]) -> TokenDiff:
    """Align two piece sequences: the changed stretches of ``piece_opcodes``, kept with both sequences."""
    return TokenDiff(list(original), list(other), piece_opcodes(original, other))
