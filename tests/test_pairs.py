"""Minimal pairs: piece alignment, the attention difference on aligned tokens (against loops), and the figures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from model import load_checkpoint
from model.analysis.alignment import align_pieces
from model.analysis.pairs import attention_difference, attention_pair
from model.trace import Trace
from viz.pairs import pair_difference_heatmap, pair_heatmaps

W = "\u2581"
DOG_BITES_MAN = [f"{W}the", f"{W}dog", f"{W}bit", "es", f"{W}the", f"{W}man", "</s>"]
MAN_BITES_DOG = [f"{W}the", f"{W}man", f"{W}bit", "es", f"{W}the", f"{W}dog", "</s>"]


def hand_trace(source_pieces: list[str], target_pieces: list[str], translation: str, seed: int) -> Trace:
    """A Trace with random (row-normalised) attention of the right shapes for 1 layer and 2 heads."""
    rng = np.random.default_rng(seed)
    n_source, n_steps = len(source_pieces), len(target_pieces) - 1

    def attention(queries: int, keys: int) -> np.ndarray:
        return rng.dirichlet(np.ones(keys), size=(2, queries)).astype(np.float32)

    return Trace(
        source_text=" ".join(source_pieces),
        source_ids=list(range(n_source)),
        source_pieces=source_pieces,
        target_ids=list(range(n_steps + 1)),
        target_pieces=target_pieces,
        translation=translation,
        step_probs=np.ones(n_steps, dtype=np.float32),
        topk_ids=np.zeros((n_steps, 1), dtype=np.int64),
        topk_probs=np.ones((n_steps, 1), dtype=np.float32),
        topk_pieces=[["x"]] * n_steps,
        attention={
            "encoder.layers.0.self_attn": attention(n_source, n_source),
            "decoder.layers.0.self_attn": attention(n_steps, n_steps),
            "decoder.layers.0.cross_attn": attention(n_steps, n_source),
        },
        positional={},
        embedding_norms={},
    )


@pytest.fixture(scope="module")
def hand_pair() -> tuple[Trace, Trace]:
    first = hand_trace(DOG_BITES_MAN, ["<s>", f"{W}der", f"{W}Hund", f"{W}beißt", "</s>"], "der Hund beißt", 0)
    second = hand_trace(MAN_BITES_DOG, ["<s>", f"{W}der", f"{W}Mann", f"{W}beißt", "</s>"], "der Mann beißt", 1)
    return first, second


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
    first = translator.trace("the dog sits on the man.", beam_size=1, max_len=6)
    second = translator.trace("the man sits on the dog.", beam_size=1, max_len=6)
    for module in first.attention:
        pair = attention_pair(first, second, module, head=0)
        assert pair.difference.shape == (len(pair.queries.first), len(pair.keys.first))
    same = attention_pair(first, first, "decoder.layers.1.cross_attn", head=3)
    assert same.keys.first == list(range(len(first.source_pieces)))
    assert not same.difference.any()


# --- figures ---


def test_side_by_side_maps_share_one_colour_scale_and_name_the_sentences(hand_pair):
    first, second = hand_pair
    pair = attention_pair(first, second, "decoder.layers.0.cross_attn", head=0)
    figure = pair_heatmaps(pair)
    assert len(figure.data) == 2
    np.testing.assert_array_equal(figure.data[0].z, pair.first)
    np.testing.assert_array_equal(figure.data[1].z, pair.second)
    assert figure.data[0].coloraxis == figure.data[1].coloraxis == "coloraxis"
    assert (figure.layout.coloraxis.cmin, figure.layout.coloraxis.cmax) == (0.0, 1.0)
    assert [a.text for a in figure.layout.annotations] == ["First sentence", "Second sentence"]  # short, not the
    # translations: a translation is as long as the model makes it, a panel half the page
    assert list(figure.layout.xaxis.ticktext)[:6] == ["the", "dog", "bit", "·es", "the", "man"]
    assert list(figure.layout.xaxis2.ticktext)[1] == "man"
    assert figure.layout.title.text == "Decoder layer 0 – cross-attention – head 0"


def test_difference_map_is_centred_at_zero_on_aligned_tokens(hand_pair):
    pair = attention_pair(*hand_pair, "encoder.layers.0.self_attn", head=1)
    figure = pair_difference_heatmap(pair)
    heatmap = figure.data[0]
    np.testing.assert_array_equal(heatmap.z, pair.difference)
    largest = np.abs(pair.difference).max()
    assert heatmap.zmid == 0.0 and heatmap.zmax == pytest.approx(largest) and heatmap.zmin == -heatmap.zmax
    assert list(figure.layout.xaxis.ticktext)[:4] == ["the", "bit", "·es", "the"]
    hidden = pair_difference_heatmap(pair, show_special=False)
    assert np.asarray(hidden.data[0].z).shape == (4, 4)  # </s> row and column hidden


def test_pair_labels_and_titles_are_escaped():
    pieces = [f"{W}<b>x</b>", f"{W}y", "</s>"]
    first = hand_trace(pieces, ["<s>", f"{W}<i>", "</s>"], "<script>alert(1)</script>", 3)
    second = hand_trace(pieces, ["<s>", f"{W}z", "</s>"], "<b>bold</b>", 4)
    pair = attention_pair(first, second, "decoder.layers.0.cross_attn", head=0)
    maps = pair_heatmaps(pair, panel_titles=("<script>alert(1)</script>", "<b>bold</b>"), title="<b>t</b>")
    assert [a.text for a in maps.layout.annotations] == [
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "&lt;b&gt;bold&lt;/b&gt;",
    ]
    assert maps.layout.title.text == "&lt;b&gt;t&lt;/b&gt;"
    assert list(maps.layout.xaxis.ticktext)[0] == "&lt;b&gt;x&lt;/b&gt;"
    assert "&lt;i&gt;" in list(maps.layout.yaxis.ticktext)[1]
    difference = pair_difference_heatmap(pair)
    assert difference.layout.title.text == "Difference: first − second sentence"
    assert pair_difference_heatmap(pair, title="<i>d</i>").layout.title.text == "&lt;i&gt;d&lt;/i&gt;"
    assert list(difference.layout.xaxis.ticktext)[0] == "&lt;b&gt;x&lt;/b&gt;"
    assert "<b>" not in "".join(str(label) for label in np.asarray(difference.data[0].customdata).ravel())
