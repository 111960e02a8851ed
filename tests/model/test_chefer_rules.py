"""Chefer, Gur & Wolf's relevancy rules (model.analysis.attribution.chefer.relevancy) with non-identity relevance.

Identity relevance hides the row normalisation R̄ and the transpose of R̄^tt, and one layer hides the order of the
products, so every rule is checked here on inputs where it changes the numbers: hand computations, closed forms and a
step-by-step implementation written from the paper's equations, not from the module's helpers.
"""

from __future__ import annotations

import numpy as np
import pytest

from model.analysis.attribution.chefer import NORMALISING_EPSILON, normalised, relevancy, weighted_attention

# --- the paper, step by step (for the random case; loops rather than the module's vectorised helpers) ---


def paper_weighted_attention(attention: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """Ā = E_h[(∇A ⊙ A)⁺]: each head's product clipped at 0, then the mean over heads."""
    heads, queries, keys = attention.shape
    result = np.zeros((queries, keys))
    for i in range(queries):
        for j in range(keys):
            result[i, j] = sum(max(gradient[h, i, j] * attention[h, i, j], 0.0) for h in range(heads)) / heads
    return result


def paper_normalised(relevance: np.ndarray) -> np.ndarray:
    """R̄ = R̂ + I with R̂ = R − I, each row divided by its sum; a row of R − I that is all 0 stays 0."""
    size = len(relevance)
    result = np.eye(size)
    for i in range(size):
        row = [relevance[i, j] - (1.0 if i == j else 0.0) for j in range(size)]
        total = sum(row)
        if total != 0.0:
            for j in range(size):
                result[i, j] += row[j] / total
    return result


def paper_relevancy(encoder, decoder, n_source: int, n_target: int):
    """R^ss, R^tt, R^ts after every layer, in the paper's order."""
    source_self, target_self = np.eye(n_source), np.eye(n_target)
    target_source = np.zeros((n_target, n_source))
    for attention, gradient in encoder:  # R^ss += Ā R^ss
        source_self = source_self + paper_weighted_attention(attention, gradient) @ source_self
    for (self_attention, self_gradient), (cross_attention, cross_gradient) in decoder:
        mixed = paper_weighted_attention(self_attention, self_gradient)
        target_self = target_self + mixed @ target_self  # R^tt += Ā R^tt
        target_source = target_source + mixed @ target_source  # R^ts += Ā R^ts
        cross = paper_weighted_attention(cross_attention, cross_gradient)
        bar_target, bar_source = paper_normalised(target_self), paper_normalised(source_self)
        target_source = target_source + bar_target.T @ cross @ bar_source  # R^ts += (R̄^tt)ᵀ Ā R̄^ss
    return source_self, target_self, target_source


def one_head(matrix) -> np.ndarray:
    return np.asarray(matrix, dtype=np.float64)[None]


def causal_attention(rng: np.random.Generator, heads: int, size: int) -> np.ndarray:
    """(heads, size, size), rows summing to 1 over the keys up to the query."""
    scores = np.where(np.tril(np.ones((size, size), dtype=bool)), rng.normal(size=(heads, size, size)), -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


# --- R̄: the row normalisation ---


def test_normalised_matches_a_hand_computation():
    relevance = np.array([[2.0, 1.0, 1.0], [0.0, 1.0, 0.0], [1.0, 3.0, 4.0]])
    # R − I = [[1, 1, 1], [0, 0, 0], [1, 3, 3]], row sums 3, 0, 7:
    # row 0: [1, 1, 1] / 3 + [1, 0, 0] = [4/3, 1/3, 1/3]
    # row 1: sums to 0, divided by the epsilon: stays [0, 0, 0], + I's row = [0, 1, 0]
    # row 2: [1, 3, 3] / 7 + [0, 0, 1] = [1/7, 3/7, 10/7]
    expected = np.array([[4 / 3, 1 / 3, 1 / 3], [0.0, 1.0, 0.0], [1 / 7, 3 / 7, 10 / 7]])
    np.testing.assert_allclose(normalised(relevance), expected)


def test_normalised_rows_of_r_minus_i_sum_to_one_and_zero_rows_stay_the_identity():
    rng = np.random.default_rng(0)
    extra = rng.uniform(0.0, 3.0, size=(5, 5))
    extra[2] = 0.0  # a row that no layer has updated yet
    relevance = np.eye(5) + extra
    bar = normalised(relevance)
    assert np.all(np.isfinite(bar))
    np.testing.assert_allclose((bar - np.eye(5)).sum(axis=1), [1.0, 1.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(bar[2], np.eye(5)[2])
    np.testing.assert_allclose(bar - np.eye(5), extra / np.maximum(extra.sum(axis=1, keepdims=True), 1e-300))
    np.testing.assert_array_equal(normalised(np.eye(4)), np.eye(4))


def test_normalised_floors_only_row_sums_smaller_than_the_epsilon():
    """A row of R − I summing to exactly ±NORMALISING_EPSILON is not below the floor: it is divided by its own sum,
    so its R − I part sums to 1 (the floor, +ε, would turn the −ε row's sign)."""
    for total in (NORMALISING_EPSILON, -NORMALISING_EPSILON):
        relevance = np.eye(2)
        relevance[0, 1] = total  # R − I = [[0, total], [0, 0]]
        np.testing.assert_array_equal(normalised(relevance), [[1.0, 1.0], [0.0, 1.0]])


# --- Ā: the positive part per head, then the mean ---


def test_weighted_attention_clips_each_head_before_the_mean():
    attention = np.array([[[0.5, 0.5], [1.0, 0.0]], [[0.25, 0.75], [0.5, 0.5]]])  # (heads, queries, keys)
    gradient = np.array([[[2.0, -2.0], [1.0, 3.0]], [[-4.0, 2.0], [-1.0, 1.0]]])
    # ∇A ⊙ A: head 0 [[1, -1], [1, 0]], head 1 [[-1, 1.5], [-0.5, 0.5]]
    # clipped: head 0 [[1, 0], [1, 0]], head 1 [[0, 1.5], [0, 0.5]]; mean [[0.5, 0.75], [0.5, 0.25]]
    # (the mean before the clip would give [[0, 0.25], [0.25, 0.25]])
    expected = np.array([[0.5, 0.75], [0.5, 0.25]])
    np.testing.assert_allclose(weighted_attention(attention, gradient), expected)
    # through an encoder layer: R^ss = I + Ā
    source_self, _, _ = relevancy(
        [(attention, gradient)],
        [((one_head([[1.0]]), one_head([[0.0]])), (one_head([[0.5, 0.5]]), one_head([[0.0, 0.0]])))],
    )
    np.testing.assert_allclose(source_self, np.eye(2) + expected)


def test_negative_gradients_add_no_relevance():
    rng = np.random.default_rng(1)
    encoder = rng.dirichlet(np.ones(3), size=(2, 3))
    decoder, cross = causal_attention(rng, 2, 2), rng.dirichlet(np.ones(3), size=(2, 2))
    negative = [-rng.uniform(0.1, 1.0, size=shape) for shape in (encoder.shape, decoder.shape, cross.shape)]
    source_self, target_self, target_source = relevancy(
        [(encoder, negative[0])], [((decoder, negative[1]), (cross, negative[2]))]
    )
    np.testing.assert_array_equal(source_self, np.eye(3))
    np.testing.assert_array_equal(target_self, np.eye(2))
    np.testing.assert_array_equal(target_source, 0.0)


# --- the self-attention updates: R^ss += Ā R^ss, R^tt += Ā R^tt, R^ts += Ā R^ts ---


def test_two_encoder_layers_compose_in_order():
    first, second = [[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]
    ones = one_head(np.ones((2, 2)))
    source_self, _, _ = relevancy(
        [(one_head(first), ones), (one_head(second), ones)],
        [((one_head([[1.0]]), one_head([[0.0]])), (one_head([[0.5, 0.5]]), one_head([[0.0, 0.0]])))],
    )
    # R^ss = (I + Ā2)(I + Ā1) = I + Ā1 + Ā2 + Ā2 Ā1, Ā2 Ā1 = [[0, 1], [0, 1]]:
    # [[1, 0], [0, 1]] + [[0, 1], [1, 0]] + [[1, 0], [1, 0]] + [[0, 1], [0, 1]] = [[2, 2], [2, 2]]
    # (R^ss Ā instead of Ā R^ss: Ā1 Ā2 = [[1, 0], [1, 0]] in its place, [[3, 1], [3, 1]])
    np.testing.assert_allclose(source_self, [[2.0, 2.0], [2.0, 2.0]])


def test_two_decoder_self_attention_layers_compose_in_order():
    rng = np.random.default_rng(2)
    first, second = causal_attention(rng, 1, 3), causal_attention(rng, 1, 3)
    assert not np.allclose(second[0] @ first[0], first[0] @ second[0])  # the order shows
    cross = rng.dirichlet(np.ones(4), size=(1, 3))
    unit, none = np.ones_like, np.zeros_like
    _, target_self, target_source = relevancy(
        [], [((first, unit(first)), (cross, none(cross))), ((second, unit(second)), (cross, none(cross)))]
    )
    identity = np.eye(3)
    np.testing.assert_allclose(target_self, (identity + second[0]) @ (identity + first[0]))
    np.testing.assert_array_equal(target_source, 0.0)


def test_decoder_self_attention_carries_the_cross_relevance_of_earlier_layers():
    cross = [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]  # (targets, sources)
    self_attention = [[1.0, 0.0], [0.5, 0.5]]
    _, target_self, target_source = relevancy(
        [],
        [
            # layer 1: no gradient on the self-attention (R^tt stays I), unit gradient on the cross: R^ts = Ā_c
            ((one_head(np.eye(2)), one_head(np.zeros((2, 2)))), (one_head(cross), one_head(np.ones((2, 3))))),
            # layer 2: unit gradient on the self-attention, none on the cross: R^ts = (I + Ā_d) R^ts
            ((one_head(self_attention), one_head(np.ones((2, 2)))), (one_head(cross), one_head(np.zeros((2, 3))))),
        ],
    )
    # (I + Ā_d) Ā_c = [[2, 0], [0.5, 1.5]] @ [[1, 0, 0], [0, 0.5, 0.5]] = [[2, 0, 0], [0.5, 0.75, 0.75]]
    np.testing.assert_allclose(target_source, [[2.0, 0.0, 0.0], [0.5, 0.75, 0.75]])
    np.testing.assert_allclose(target_self, [[2.0, 0.0], [0.5, 1.5]])


# --- the cross-attention update: R^ts += (R̄^tt)ᵀ Ā R̄^ss ---


def test_cross_update_matches_a_hand_computation():
    # one head each; the gradients scale the rows differently, so R and R̄ differ
    encoder = (one_head([[0.5, 0.5], [0.25, 0.75]]), one_head([[2.0, 2.0], [4.0, 4.0]]))
    decoder_self = (one_head([[1.0, 0.0], [0.5, 0.5]]), one_head([[4.0, 4.0], [2.0, 2.0]]))
    cross = (one_head([[0.75, 0.25], [0.5, 0.5]]), one_head(np.ones((2, 2))))
    source_self, target_self, target_source = relevancy([encoder], [(decoder_self, cross)])
    # Ā_e = [[1, 1], [1, 3]]: R^ss = [[2, 1], [1, 4]]; R − I row sums 2, 4: R̄^ss = [[1.5, 0.5], [0.25, 1.75]]
    np.testing.assert_allclose(source_self, [[2.0, 1.0], [1.0, 4.0]])
    # Ā_d = [[4, 0], [1, 1]]: R^tt = [[5, 0], [1, 2]]; R − I row sums 4, 2: R̄^tt = [[2, 0], [0.5, 1.5]]
    np.testing.assert_allclose(target_self, [[5.0, 0.0], [1.0, 2.0]])
    # R^ts = 0 (Ā_d · 0) + (R̄^tt)ᵀ Ā_c R̄^ss:
    # (R̄^tt)ᵀ Ā_c = [[2, 0.5], [0, 1.5]] @ [[0.75, 0.25], [0.5, 0.5]] = [[1.75, 0.75], [0.75, 0.75]]
    # @ R̄^ss: [[1.75·1.5 + 0.75·0.25, 1.75·0.5 + 0.75·1.75], [0.75·1.5 + 0.75·0.25, 0.75·0.5 + 0.75·1.75]]
    #        = [[2.8125, 2.1875], [1.3125, 1.6875]]
    np.testing.assert_allclose(target_source, [[2.8125, 2.1875], [1.3125, 1.6875]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relevancy_matches_the_paper_step_by_step(seed):
    rng = np.random.default_rng(seed)
    heads, n_source, n_target = 2, 4, 3
    encoder = [
        (rng.dirichlet(np.ones(n_source), size=(heads, n_source)), rng.normal(size=(heads, n_source, n_source)))
        for _ in range(2)
    ]
    decoder = [
        (
            (causal_attention(rng, heads, n_target), rng.normal(size=(heads, n_target, n_target))),
            (rng.dirichlet(np.ones(n_source), size=(heads, n_target)), rng.normal(size=(heads, n_target, n_source))),
        )
        for _ in range(2)
    ]
    expected = paper_relevancy(encoder, decoder, n_source, n_target)
    # the inputs exercise every rule: R^ss and R^tt are neither I nor symmetric, and R̄ is not R
    source_self, target_self, _ = expected
    for matrix in (source_self, target_self):
        assert not np.allclose(matrix, np.eye(len(matrix)))
        assert not np.allclose(paper_normalised(matrix), paper_normalised(matrix).T)
        assert not np.allclose(paper_normalised(matrix), matrix)
    for found, wanted in zip(relevancy(encoder, decoder), expected, strict=True):
        np.testing.assert_allclose(found, wanted, rtol=1e-12, atol=1e-12)
