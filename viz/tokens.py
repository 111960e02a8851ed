"""Token labels and token selection for attention figures: readable, escaped, merged into words.

Every token string comes from a user, so every label built here is HTML-escaped: plotly
renders a subset of HTML (<b>, <br>, <a>, ...) in tick labels, titles and hovers.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from model.analysis.words import STRUCTURAL_PIECES, group_pieces, merge_keys, merge_queries, word_text
from model.tokenizer import WORD_START

# Structural specials (model.analysis.words.STRUCTURAL_PIECES) may be hidden; <unk> stands for real text the
# tokenizer could not cover and is never hidden, but is marked like them.
MARKED_PIECES = (*STRUCTURAL_PIECES, "<unk>")
CONTINUATION_MARK = "\u00b7"  # "·" before a piece that continues the previous word
# a language code read or written as a token: MarianMT's ">>fr<<", M2M100's "__fr__", mBART-50's "fr_XX", NLLB's
# "fra_Latn": shown without the continuation mark (a piece of text of these shapes, rare, only loses its mark)
LANGUAGE_PIECE = re.compile(r">>\w+<<|__[a-z]{2,3}__|[a-z]{2,3}_[A-Z][A-Za-z]{1,3}")


def display_text(piece: str) -> str:
    """One piece as plain text, for labels drawn as text rather than HTML.

    A piece that starts a word ("▁rid") is shown bare ("rid"); a piece that continues a word
    ("ing") gets a leading "·" ("·ing"); special tokens and language codes stay as they are.
    """
    if piece in MARKED_PIECES or piece == WORD_START or LANGUAGE_PIECE.fullmatch(piece):
        return piece
    if piece.startswith(WORD_START):
        return piece[len(WORD_START) :]
    return CONTINUATION_MARK + piece


def display_piece(piece: str) -> str:
    """One piece as an HTML-safe label: display_text, escaped; special tokens in grey italics."""
    if piece in MARKED_PIECES:
        return f"<i style='color:#6b6b6b'>{html.escape(piece)}</i>"
    return html.escape(display_text(piece))


def display_word(pieces: Sequence[str]) -> str:
    """A merged word as an HTML-safe label; a special token stays marked."""
    if len(pieces) == 1 and pieces[0] in MARKED_PIECES:
        return display_piece(pieces[0])
    return html.escape(word_text(pieces))


def plain_text(label: Any) -> str:
    """Plotly text (escaped HTML with our markup: <br>, grey italics for special tokens) as plain text."""
    return html.unescape(re.sub(r"<[^>]*>", " ", str(label))).strip()


def display_labels(pieces: Sequence[str]) -> list[str]:
    return [display_piece(piece) for piece in pieces]


@dataclass(frozen=True)
class TokenAttention:
    """Attention weights with the tokens of both axes, ready to draw.

    ``weights`` is (..., queries, keys). ``query_tokens``/``key_tokens`` are plain text (a
    piece, or a merged word), ``query_labels``/``key_labels`` the HTML-safe labels drawn, and
    ``query_positions`` the piece positions each drawn query row stands for (one, or a word's).
    """

    weights: np.ndarray
    query_tokens: list[str]
    key_tokens: list[str]
    query_labels: list[str]
    key_labels: list[str]
    query_positions: list[list[int]]


def _tokens_and_labels(pieces: Sequence[str], merge_words: bool) -> tuple[list[list[int]], list[str], list[str]]:
    if merge_words:
        groups = group_pieces(pieces)
        words = [[pieces[i] for i in group] for group in groups]
        return groups, [word_text(word) for word in words], [display_word(word) for word in words]
    groups = [[position] for position in range(len(pieces))]
    return groups, list(pieces), display_labels(pieces)


def _visible(tokens: Sequence[str], show_special: bool) -> list[int]:
    return [i for i, token in enumerate(tokens) if show_special or token not in STRUCTURAL_PIECES]


def select_tokens(
    weights: np.ndarray,
    query_pieces: Sequence[str] | None,
    key_pieces: Sequence[str],
    *,
    merge_words: bool = False,
    show_special: bool = True,
) -> TokenAttention:
    """Merge subword pieces into words and/or hide special tokens.

    ``weights`` is (..., queries, keys); ``query_pieces=None`` means there is no query axis
    (weights are (..., keys), e.g. one decoding step's attention row) and only keys are
    merged or hidden.

    Merging sums over a word's key pieces and averages over its query pieces, so rows still
    sum to one. Hiding special tokens drops their rows and columns WITHOUT renormalising:
    the weight a query gave to <s> or </s> simply disappears from the picture, so rows may
    sum to less than one. That is deliberate: models often park much of their attention on
    </s>, and renormalising would hide that and inflate the remaining weights.
    """
    weights = np.asarray(weights)
    key_groups, key_tokens, key_labels = _tokens_and_labels(key_pieces, merge_words)
    if merge_words:
        weights = merge_keys(weights, key_groups)
    keep_keys = _visible(key_tokens, show_special)
    weights = weights[..., keep_keys]
    key_tokens = [key_tokens[i] for i in keep_keys]
    key_labels = [key_labels[i] for i in keep_keys]
    if query_pieces is None:
        return TokenAttention(weights, [], key_tokens, [], key_labels, [])
    query_groups, query_tokens, query_labels = _tokens_and_labels(query_pieces, merge_words)
    if merge_words:
        weights = merge_queries(weights, query_groups)
    keep_queries = _visible(query_tokens, show_special)
    weights = weights[..., keep_queries, :]
    return TokenAttention(
        weights,
        [query_tokens[i] for i in keep_queries],
        key_tokens,
        [query_labels[i] for i in keep_queries],
        key_labels,
        [list(query_groups[i]) for i in keep_queries],
    )
