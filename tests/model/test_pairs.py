"""Minimal pairs: piece alignment and the attention difference on aligned tokens (against loops).

The hand-made pair is the hand_pair fixture (tests/conftest.py); the figures are tested in tests/viz/test_pairs.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from model import load_checkpoint
from model.analysis.alignment import align_pieces
from model.analysis.pairs import attention_difference, attention_pair
from tests.helpers import DOG_BITES_MAN, MAN_BITES_DOG
from tests.helpers import WORD_START as W

# --- alignment ---


def test_swapped_words_do_not_align_and_the_rest_does():
    alignment = align_pieces(DOG_BITES_MAN, MAN_BITES_DOG)
    assert alignment.first == [0, 2, 3, 4, 6]
    assert alignment.second == [0, 2, 3, 4, 6]
    assert alignment.pieces == [f"{W}the", f"{W}bit", "es", f"{W}the", "</s>"]


def test_an_inserted_word_shifts_the_alignment():
    longer = [f"{W}the", f"{W}big", f"{W}dog", f"{W}bit", "es", f"{W}the", f"{W}man", "</s>"]
    alignment = align_pieces(DOG_BITES_MAN, longer)
    assert alignment.first == list(range(7))
    assert alignment.second == [0, 2, 3, 4, 5, 6, 7]


@given(
    st.lists(st.sampled_from(["a", "b", "c", "</s>"]), max_size=12),
    st.lists(st.sampled_from(["a", "b", "c", "</s>"]), max_size=12),
)
def test_aligned_pieces_are_equal_and_in_order(first, second):
    alignment = align_pieces(first, second)
    assert len(alignment.first) == len(alignment.second) == len(alignment.pieces)
    matches = zip(alignment.first, alignment.second, alignment.pieces, strict=True)
    assert all(first[i] == second[j] == piece for i, j, piece in matches)
    assert alignment.first == sorted(set(alignment.first)) and alignment.second == sorted(set(alignment.second))


# --- the difference ---


def test_difference_equals_loops_on_aligned_rows_and_columns():
    rng = np.random.default_rng(2)
    first, second = rng.random((7, 7)), rng.random((7, 7))
    alignment = align_pieces(DOG_BITES_MAN, MAN_BITES_DOG)
    difference = attention_difference(first, second, alignment, alignment)
    assert difference.shape == (5, 5)
    for row, (q1, q2) in enumerate(zip(alignment.first, alignment.second, strict=True)):
        for column, (k1, k2) in enumerate(zip(alignment.first, alignment.second, strict=True)):
            assert difference[row, column] == first[q1, k1] - second[q2, k2]


@pytest.mark.parametrize(
    ("module", "queries", "keys"),
    [
        ("encoder.layers.0.self_attn", "source", "source"),
        ("decoder.layers.0.self_attn", "decoder", "decoder"),
        ("decoder.layers.0.cross_attn", "decoder", "source"),
    ],
)
def test_pair_aligns_each_axis_with_its_own_pieces(hand_pair, module, queries, keys):
    first, second = hand_pair
    pieces = {"source": lambda t: t.source_pieces, "decoder": lambda t: t.decoder_input_pieces}
    pair = attention_pair(first, second, module, head=1)
    assert pair.queries == align_pieces(pieces[queries](first), pieces[queries](second))
    assert pair.keys == align_pieces(pieces[keys](first), pieces[keys](second))
    np.testing.assert_array_equal(pair.first, first.attention[module][1])
    np.testing.assert_array_equal(pair.second, second.attention[module][1])
    for row, (q1, q2) in enumerate(zip(pair.queries.first, pair.queries.second, strict=True)):
        for column, (k1, k2) in enumerate(zip(pair.keys.first, pair.keys.second, strict=True)):
            expected = first.attention[module][1][q1, k1] - second.attention[module][1][q2, k2]
            assert pair.difference[row, column] == expected
    assert (pair.first_translation, pair.second_translation) == ("der Hund beißt", "der Mann beißt")


def test_bad_module_or_head_is_refused(hand_pair):
    with pytest.raises(ValueError, match="no attention"):
        attention_pair(*hand_pair, "decoder.layers.5.cross_attn", 0)
    with pytest.raises(ValueError, match="head"):
        attention_pair(*hand_pair, "decoder.layers.0.cross_attn", 2)


def test_real_minimal_pair_from_a_checkpoint(tiny_checkpoint):
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    first = translator.trace("the dog sits on the man.", beam_size=1, max_new_tokens=6)
    second = translator.trace("the man sits on the dog.", beam_size=1, max_new_tokens=6)
    for module in first.attention:
        pair = attention_pair(first, second, module, head=0)
        assert pair.difference.shape == (len(pair.queries.first), len(pair.keys.first))
    same = attention_pair(first, first, "decoder.layers.1.cross_attn", head=3)
    assert same.keys.first == list(range(len(first.source_pieces)))
    assert not same.difference.any()
