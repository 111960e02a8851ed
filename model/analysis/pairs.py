"""Minimal pairs: one head's attention on two sentences, and its difference where their tokens align.

For "the dog is chasing the cat" / "the cat is chasing the dog" the pieces that the two
sentences share in order (the, is, chasing, the, </s>) align; "dog" and "cat" swap places and do not. The
difference is taken only between aligned query rows and aligned key columns, so every cell
compares the same query token attending to the same key token in both sentences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.analysis.alignment import PieceAlignment, align_pieces
from model.analysis.head_stats import module_axes
from model.trace import Trace


@dataclass(frozen=True)
class AttentionPair:
    """One head of one module on two sentences, and first minus second on their aligned tokens."""

    module: str
    head: int
    first_source: str
    second_source: str
    first_translation: str
    second_translation: str
    first: np.ndarray  # (queries, keys) of the first sentence
    second: np.ndarray  # (queries, keys) of the second sentence
    first_query_pieces: list[str]
    first_key_pieces: list[str]
    second_query_pieces: list[str]
    second_key_pieces: list[str]
    queries: PieceAlignment
    keys: PieceAlignment
    difference: np.ndarray  # (aligned queries, aligned keys): first - second


def attention_difference(
    first: np.ndarray, second: np.ndarray, queries: PieceAlignment, keys: PieceAlignment
) -> np.ndarray:
    """first - second on aligned rows and columns: (aligned queries, aligned keys).

    Weight on unaligned keys is left out, not renormalised, so a cell is exactly the
    difference of the two weights shown in the two maps.
    """
    first_aligned = np.asarray(first)[np.ix_(queries.first, keys.first)]
    second_aligned = np.asarray(second)[np.ix_(queries.second, keys.second)]
    return first_aligned - second_aligned


def attention_pair(first: Trace, second: Trace, module: str, head: int) -> AttentionPair:
    """Compare head ``head`` of ``module`` (e.g. "decoder.layers.1.cross_attn") between two traces.

    Query and key pieces are aligned separately (for cross-attention: the two translations
    and the two sources).
    """
    for trace in (first, second):
        if module not in trace.attention:
            raise ValueError(f"no attention captured for {module!r}")
        if not 0 <= head < trace.attention[module].shape[0]:
            raise ValueError(f"head must be in 0..{trace.attention[module].shape[0] - 1}, not {head}")
    first_queries, first_keys = module_axes(first, module)
    second_queries, second_keys = module_axes(second, module)
    queries = align_pieces(first_queries, second_queries)
    keys = align_pieces(first_keys, second_keys)
    first_weights = first.attention[module][head]
    second_weights = second.attention[module][head]
    return AttentionPair(
        module=module,
        head=head,
        first_source=first.source_text,
        second_source=second.source_text,
        first_translation=first.translation,
        second_translation=second.translation,
        first=first_weights,
        second=second_weights,
        first_query_pieces=first_queries,
        first_key_pieces=first_keys,
        second_query_pieces=second_queries,
        second_key_pieces=second_keys,
        queries=queries,
        keys=keys,
        difference=attention_difference(first_weights, second_weights, queries, keys),
    )
