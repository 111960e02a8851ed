"""Head statistics: every statistic equals a direct loop computation on hand-made attention; tables of one trace
and of many sentences (their figures: tests/viz/test_head_stats.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from model.analysis.head_stats import (
    SHARE_STATISTICS,
    STATISTICS,
    batch_head_statistics,
    head_statistics,
    is_punctuation,
    mean_head_statistics,
    module_axes,
    read_sentences,
    readable_cross_head,
    sentences_from_text,
    trace_head_statistics,
)
from model.heads import KIND_LABELS, parse_module_name
from tests.helpers import STATISTICS_SENTENCES

PUNCTUATION_PIECES = {"\u2581.", ",", "?!"}  # the punctuation pieces of the hand-made lists below
TOY_PUNCTUATION = {".", "\u2581."}  # the only punctuation in the toy tokenizer's sentences
SELF_PIECES = ["<s>", "\u2581the", "\u2581dog", ",", "\u2581bit", "es", "\u2581.", "</s>"]
SOURCE_PIECES = ["\u2581a", "\u2581man", "?!", "\u2581rides", "\u2581", "\u2581bike", "</s>"]
TARGET_PIECES = ["<s>", "\u2581ein", "\u2581Mann", "\u2581fährt", "\u2581."]


def random_attention(rng: np.random.Generator, heads: int, queries: int, keys: int) -> np.ndarray:
    """Rows drawn from a Dirichlet with small concentration, so some weights are near 0 and some near 1."""
    return rng.dirichlet(np.full(keys, 0.4), size=(heads, queries))


def reference_sums(
    matrix, query_pieces, key_pieces, band: float = 1.0, punctuation=PUNCTUATION_PIECES
) -> tuple[dict[str, float], int]:
    """Per-row quantities summed over the real query rows of one head, with plain loops, and the row count.

    Padding is dropped and rows renormalised; positions count real tokens; the diagonal is
    d(i) = i (K - 1) / (Q - 1) and c(i) the key nearest it, half rounded up.
    """
    queries = [i for i, piece in enumerate(query_pieces) if piece != "<pad>"]
    keys = [j for j, piece in enumerate(key_pieces) if piece != "<pad>"]
    sums = dict.fromkeys(STATISTICS, 0.0)
    for row, q in enumerate(queries):
        weights = [float(matrix[q][k]) for k in keys]
        total = sum(weights)
        weights = [w / total for w in weights]
        centre = row * (len(keys) - 1) / (len(queries) - 1) if len(queries) > 1 else 0.0
        nearest = math.floor(centre + 0.5)
        for column, weight in enumerate(weights):
            piece = key_pieces[keys[column]]
            if weight > 0:
                sums["entropy"] -= weight * math.log2(weight)
            sums["distance"] += weight * abs(column - centre)
            sums["same"] += weight if column == nearest else 0.0
            sums["previous"] += weight if column == nearest - 1 else 0.0
            sums["next"] += weight if column == nearest + 1 else 0.0
            sums["bos"] += weight if piece == "<s>" else 0.0
            sums["eos"] += weight if piece == "</s>" else 0.0
            sums["punctuation"] += weight if piece in punctuation else 0.0
            sums["diagonality"] += weight if abs(column - centre) <= band + 1e-12 else 0.0
    return sums, len(queries)


def reference_statistics(
    matrix, query_pieces, key_pieces, band: float = 1.0, punctuation=PUNCTUATION_PIECES
) -> dict[str, float]:
    sums, rows = reference_sums(matrix, query_pieces, key_pieces, band, punctuation)
    return {name: value / rows for name, value in sums.items()}


def assert_matches_reference(weights, query_pieces, key_pieces, band: float = 1.0) -> None:
    stats = head_statistics(weights, query_pieces, key_pieces, band=band)
    for head in range(weights.shape[0]):
        expected = reference_statistics(weights[head], query_pieces, key_pieces, band)
        for name in STATISTICS:
            assert stats[name][head] == pytest.approx(expected[name], abs=1e-9), (name, head)


# --- every statistic against loops ---


def test_self_attention_statistics_equal_loops():
    weights = random_attention(np.random.default_rng(0), 3, len(SELF_PIECES), len(SELF_PIECES))
    assert_matches_reference(weights, SELF_PIECES, SELF_PIECES)


def test_causal_self_attention_statistics_equal_loops_and_next_is_zero():
    weights = np.tril(random_attention(np.random.default_rng(1), 2, len(TARGET_PIECES), len(TARGET_PIECES)))
    weights /= weights.sum(axis=-1, keepdims=True)
    assert_matches_reference(weights, TARGET_PIECES, TARGET_PIECES)
    assert np.all(head_statistics(weights, TARGET_PIECES, TARGET_PIECES)["next"] == 0)


@pytest.mark.parametrize("band", [0.5, 1.0, 2.0])
def test_cross_attention_statistics_equal_loops_on_a_length_scaled_diagonal(band):
    # 5 queries, 7 keys: d(i) = 1.5 i, so the nearest keys are 0, 2, 3, 5, 6 (halves round up).
    weights = random_attention(np.random.default_rng(2), 4, len(TARGET_PIECES), len(SOURCE_PIECES))
    assert_matches_reference(weights, TARGET_PIECES, SOURCE_PIECES, band)


def test_more_queries_than_keys_and_a_single_query_equal_loops():
    rng = np.random.default_rng(3)
    assert_matches_reference(random_attention(rng, 2, len(SOURCE_PIECES), 3), SOURCE_PIECES, SOURCE_PIECES[:3])
    assert_matches_reference(random_attention(rng, 2, 1, len(SOURCE_PIECES)), ["<s>"], SOURCE_PIECES)


def test_padding_rows_and_keys_do_not_count():
    rng = np.random.default_rng(4)
    query_pieces = [*TARGET_PIECES, "<pad>", "<pad>"]
    key_pieces = [*SOURCE_PIECES, "<pad>"]
    real = random_attention(rng, 2, len(TARGET_PIECES), len(SOURCE_PIECES))
    padded = rng.random((2, len(query_pieces), len(key_pieces)))  # padding rows hold garbage
    padded[:, : len(TARGET_PIECES), : len(SOURCE_PIECES)] = real
    padded[:, : len(TARGET_PIECES), -1] = 0.0  # the model gives padding keys exactly 0
    with_padding = head_statistics(padded, query_pieces, key_pieces)
    without = head_statistics(real, TARGET_PIECES, SOURCE_PIECES)
    for name in STATISTICS:
        np.testing.assert_allclose(with_padding[name], without[name], atol=1e-12)
    assert list(with_padding["queries"]) == [len(TARGET_PIECES)] * 2
    padded[:, : len(TARGET_PIECES), : len(SOURCE_PIECES)] = 0.7 * real
    padded[:, : len(TARGET_PIECES), -1] = 0.3  # weight on padding is dropped and the row renormalised
    assert_matches_reference(padded, query_pieces, key_pieces)


# --- matrices whose statistics are known ---


def test_identity_is_perfectly_diagonal():
    pieces = SELF_PIECES
    stats = head_statistics(np.eye(len(pieces))[None], pieces, pieces)
    assert stats["diagonality"][0] == pytest.approx(1.0)
    assert stats["same"][0] == pytest.approx(1.0)
    assert stats["distance"][0] == pytest.approx(0.0)
    assert stats["entropy"][0] == pytest.approx(0.0)
    assert stats["previous"][0] == stats["next"][0] == 0.0
    assert stats["bos"][0] == stats["eos"][0] == pytest.approx(1 / len(pieces))


def test_length_scaled_diagonal_cross_attention_is_perfectly_diagonal():
    weights = np.zeros((1, 3, 5))
    for query, key in enumerate([0, 2, 4]):  # the straight line from (0, 0) to (2, 4)
        weights[0, query, key] = 1.0
    stats = head_statistics(
        weights, ["<s>", "\u2581x", "\u2581y"], ["\u2581a", "\u2581b", "\u2581c", "\u2581d", "</s>"]
    )
    assert stats["diagonality"][0] == pytest.approx(1.0)
    assert stats["distance"][0] == pytest.approx(0.0)
    assert stats["same"][0] == pytest.approx(1.0)


def test_previous_token_head_uniform_head_and_bos_sink():
    n = 6
    pieces = ["<s>"] + [f"\u2581w{i}" for i in range(n - 1)]
    previous = np.zeros((n, n))
    previous[0, 0] = 1.0
    for query in range(1, n):
        previous[query, query - 1] = 1.0
    uniform = np.full((n, n), 1 / n)
    sink = np.zeros((n, n))
    sink[:, 0] = 1.0
    stats = head_statistics(np.stack([previous, uniform, sink]), pieces, pieces)
    assert stats["previous"][0] == pytest.approx((n - 1) / n)
    assert stats["distance"][0] == pytest.approx((n - 1) / n)
    assert stats["entropy"][1] == pytest.approx(math.log2(n))
    assert stats["bos"][2] == pytest.approx(1.0)
    assert stats["distance"][2] == pytest.approx(sum(range(n)) / n)


def test_self_attention_diagonality_is_previous_same_and_next():
    weights = random_attention(np.random.default_rng(5), 3, len(SELF_PIECES), len(SELF_PIECES))
    stats = head_statistics(weights, SELF_PIECES, SELF_PIECES)
    np.testing.assert_allclose(stats["diagonality"], stats["previous"] + stats["same"] + stats["next"])


def test_punctuation_pieces():
    assert all(is_punctuation(piece) for piece in ["\u2581.", ",", "?!", "\u00bb", "\u2581\u2014"])
    assert not any(is_punctuation(piece) for piece in ["\u2581", "\u2581a", "a.", "<s>", "</s>", "<pad>", "+"])


def test_bad_shapes_and_all_padding_are_refused():
    with pytest.raises(ValueError, match="heads"):
        head_statistics(np.ones((2, 3)), ["a", "b"], ["a", "b", "c"])
    with pytest.raises(ValueError, match="padding"):
        head_statistics(np.ones((1, 2, 2)), ["<pad>", "<pad>"], ["a", "b"])
    with pytest.raises(ValueError, match="no weight"):
        head_statistics(np.array([[[0.0, 1.0]]]), ["a"], ["a", "<pad>"])


# --- one trace, many sentences (the traces fixture: tests/conftest.py) ---


def test_trace_table_has_every_head_and_equals_loops(traces):
    trace = traces[0]
    assert TOY_PUNCTUATION & set(trace.source_pieces)  # so the punctuation share is really checked
    table = trace_head_statistics(trace)
    info = trace.model_info
    layers = {"encoder self": info["n_encoder_layers"], "decoder self": info["n_decoder_layers"]}
    layers["cross"] = info["n_decoder_layers"]
    assert len(table) == sum(layers.values()) * info["n_heads"]
    for row in table:
        kind, layer = parse_module_name(row["module"])
        assert (KIND_LABELS[kind], layer) == (row["kind"], row["layer"])
        query_pieces, key_pieces = module_axes(trace, row["module"])
        matrix = trace.attention[row["module"]][row["head"]]
        assert matrix.shape == (len(query_pieces), len(key_pieces))
        assert row["queries"] == len(query_pieces) and row["sentences"] == 1
        expected = reference_statistics(matrix, query_pieces, key_pieces, punctuation=TOY_PUNCTUATION)
        for name in STATISTICS:
            assert row[name] == pytest.approx(expected[name], abs=1e-6), (row["module"], row["head"], name)
        assert all(-1e-6 <= row[name] <= 1 + 1e-6 for name in SHARE_STATISTICS)
    decoder = [row for row in table if row["kind"] == "decoder self"]
    assert all(row["next"] == 0.0 for row in decoder)  # causal mask


def test_batch_is_the_statistic_over_all_query_rows_pooled(translator, traces):
    calls = []
    lines = ["", STATISTICS_SENTENCES[0], "   ", STATISTICS_SENTENCES[1], STATISTICS_SENTENCES[2], ""]
    table = batch_head_statistics(
        translator, lines, beam_size=1, max_new_tokens=6, progress=lambda done, total: calls.append((done, total))
    )
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert len(table) == len(trace_head_statistics(traces[0]))
    for row in table:
        totals = dict.fromkeys(STATISTICS, 0.0)
        rows = 0
        for trace in traces:
            query_pieces, key_pieces = module_axes(trace, row["module"])
            matrix = trace.attention[row["module"]][row["head"]]
            sums, count = reference_sums(matrix, query_pieces, key_pieces, punctuation=TOY_PUNCTUATION)
            rows += count
            for name in STATISTICS:
                totals[name] += sums[name]
        assert row["queries"] == rows and row["sentences"] == 3
        for name in STATISTICS:
            assert row[name] == pytest.approx(totals[name] / rows, abs=1e-6), (row["module"], row["head"], name)


def test_mean_of_one_table_is_itself_and_mismatched_tables_are_refused(traces):
    table = trace_head_statistics(traces[1])
    assert mean_head_statistics([table]) == table
    with pytest.raises(ValueError, match="different"):
        mean_head_statistics([table, table[:-1]])
    with pytest.raises(ValueError, match="no tables"):
        mean_head_statistics([])


def test_batch_without_sentences_is_refused(translator):
    with pytest.raises(ValueError, match="no sentences"):
        batch_head_statistics(translator, ["", "  \n"])


def test_sentences_are_read_one_per_line_and_an_empty_file_is_a_clear_error(tmp_path):
    path = tmp_path / "sentences.txt"
    path.write_text("a dog runs.\n\n  two cats sit.  \r\n\n", encoding="utf-8")
    assert read_sentences(path) == ["a dog runs.", "two cats sit."]
    assert sentences_from_text("Straße\n\n café ".encode()) == ["Straße", "café"]
    empty = tmp_path / "empty.txt"
    for text in ("", "\n  \n\t\n"):
        empty.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match="no sentences") as error:
            read_sentences(empty)
        assert str(empty) in str(error.value)


def test_the_readable_cross_head_is_the_most_alignment_like_and_near_ties_go_to_the_more_focused():
    def row(kind: str, layer: int, head: int, diagonality: float, entropy: float) -> dict:
        return {"kind": kind, "layer": layer, "head": head, "diagonality": diagonality, "entropy": entropy}

    table = [
        row("encoder self", 0, 0, 0.99, 0.1),  # not cross-attention: never chosen
        row("cross", 0, 0, 0.20, 3.0),
        row("cross", 1, 0, 0.551, 1.9),
        row("cross", 1, 1, 0.548, 1.2),  # ties 0.55 at two decimals and is more focused
        row("cross", 1, 2, 0.50, 0.1),
    ]
    assert readable_cross_head(table) == (1, 1)
    table[3]["diagonality"] = 0.54
    assert readable_cross_head(table) == (1, 0)
    with pytest.raises(ValueError, match="no cross-attention"):
        readable_cross_head(table[:1])
