"""Quiz scoring (model.analysis.quiz) on hand-built traces whose right answers are known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from model.analysis.quiz import Guess, QuizScore, StepScore, score_step, step_truth, total_score
from model.trace import Trace

SOURCE = ["▁the", "▁dog", "▁run", "s", "</s>"]  # words: the, dog, runs, </s>
WORDS = ["the", "dog", "runs", "</s>"]
TARGET = ["<s>", "▁der", "▁Hund", "</s>"]


def make_trace(cross: np.ndarray, topk: list[list[str]] | None = None) -> Trace:
    """A Trace with the given cross-attention, (layers, heads, steps, source pieces); other fields only filled in."""
    n_layers, n_heads, n_steps, n_source = cross.shape
    assert n_source == len(SOURCE) and n_steps == len(TARGET) - 1
    topk = topk or [["▁der", "▁die"], ["▁Hund", "▁Katze"], ["</s>", "."]]
    decoder_self = np.tril(np.ones((n_heads, n_steps, n_steps))) / np.arange(1, n_steps + 1)[:, None]
    attention = {}
    for layer in range(n_layers):
        attention[f"decoder.layers.{layer}.cross_attn"] = cross[layer]
        attention[f"decoder.layers.{layer}.self_attn"] = decoder_self
        attention[f"encoder.layers.{layer}.self_attn"] = np.full((n_heads, n_source, n_source), 1 / n_source)
    return Trace(
        source_text="the dog runs",
        source_ids=list(range(len(SOURCE))),
        source_pieces=SOURCE,
        target_ids=[1, 10, 11, 2],
        target_pieces=TARGET,
        translation="der Hund",
        step_probs=np.full(n_steps, 0.5, dtype=np.float32),
        topk_ids=np.zeros((n_steps, 2), dtype=np.int64),
        topk_probs=np.full((n_steps, 2), 0.4, dtype=np.float32),
        topk_pieces=topk,
        attention=attention,
        positional={},
        embedding_norms={},
    )


def uniform_cross(n_layers: int = 2, n_heads: int = 3) -> np.ndarray:
    return np.full((n_layers, n_heads, len(TARGET) - 1, len(SOURCE)), 1 / len(SOURCE))


def test_one_head_looks_where_its_largest_weight_is():
    cross = uniform_cross()
    cross[1, 2, 0] = [0.05, 0.7, 0.1, 0.1, 0.05]  # layer 1, head 2, step 0: "dog"
    truth = step_truth(make_trace(cross), step=0, layer=1, head=2)
    assert truth.words == WORDS
    assert truth.looked_at == WORDS.index("dog")
    assert truth.weights == pytest.approx([0.05, 0.7, 0.2, 0.05])
    uniform = step_truth(make_trace(cross), step=0, layer=0, head=2)  # other layer: the same weight on every piece
    assert uniform.looked_at == WORDS.index("runs")  # two pieces, so twice the weight of any other word


def test_mean_over_heads_can_pick_a_word_no_single_head_prefers():
    cross = uniform_cross(n_layers=1, n_heads=3)
    cross[0, :, 1] = [
        [0.5, 0.4, 0.05, 0.05, 0.0],  # head 0 prefers "the"
        [0.0, 0.45, 0.0, 0.0, 0.55],  # head 1 prefers "</s>"
        [0.5, 0.4, 0.05, 0.05, 0.0],  # head 2 prefers "the"
    ]
    trace = make_trace(cross)
    assert [step_truth(trace, 1, 0, head).looked_at for head in range(3)] == [0, 3, 0]
    mean = step_truth(trace, 1, 0, head=None)
    assert mean.looked_at == WORDS.index("dog")  # mean: the 0.333, dog 0.417, runs 0.067, </s> 0.183
    assert mean.weights == pytest.approx([1.0 / 3, 1.25 / 3, 0.2 / 3, 0.55 / 3])


def test_a_word_of_several_pieces_competes_with_its_summed_weight():
    cross = uniform_cross(n_layers=1, n_heads=1)
    cross[0, 0, 2] = [0.1, 0.4, 0.25, 0.25, 0.0]  # "dog" is the largest piece, "runs" the largest word
    truth = step_truth(make_trace(cross), 2, 0, 0)
    assert truth.looked_at == WORDS.index("runs")
    assert truth.weights[WORDS.index("runs")] == pytest.approx(0.5)


def test_a_tie_goes_to_the_earlier_word_and_end_of_sentence_can_win():
    cross = uniform_cross(n_layers=1, n_heads=1)
    cross[0, 0, 0] = [0.1, 0.4, 0.0, 0.0, 0.5]
    cross[0, 0, 1] = [0.1, 0.4, 0.1, 0.0, 0.4]
    trace = make_trace(cross)
    assert step_truth(trace, 0, 0, 0).looked_at == WORDS.index("</s>")
    assert step_truth(trace, 1, 0, 0).looked_at == WORDS.index("dog")  # dog and </s> both 0.4


def test_token_guess_is_right_only_for_the_token_the_model_wrote():
    cross = uniform_cross(n_layers=1, n_heads=1)
    trace = make_trace(cross, topk=[["▁die", "▁das"], ["▁Hund", "▁Katze"], ["</s>", "."]])
    first = step_truth(trace, 0, 0, 0)
    assert first.produced == "▁der"
    assert first.candidates == sorted(["▁die", "▁das", "▁der"])  # the output is offered even outside the top k
    assert score_step(first, Guess(what="▁der")).what_right is True
    assert score_step(first, Guess(what="▁die")).what_right is False
    assert step_truth(trace, 2, 0, 0).produced == "</s>"


def test_score_step_marks_right_wrong_and_unanswered():
    cross = uniform_cross(n_layers=1, n_heads=1)
    cross[0, 0, 0] = [0.1, 0.6, 0.2, 0.05, 0.05]
    truth = step_truth(make_trace(cross), 0, 0, 0)
    right = score_step(truth, Guess(where=1, what="▁der"))
    assert right == StepScore(where_right=True, what_right=True, weight_on_guess=pytest.approx(0.6))
    wrong = score_step(truth, Guess(where=2, what="▁die"))
    assert (wrong.where_right, wrong.what_right) == (False, False)
    assert wrong.weight_on_guess == pytest.approx(0.25)  # "runs": both of its pieces
    assert score_step(truth, Guess()) == StepScore(None, None, None)
    assert score_step(truth, Guess(what="▁der")).where_right is None
    with pytest.raises(ValueError, match="source words"):
        score_step(truth, Guess(where=len(WORDS)))


def test_total_score_adds_up_the_answered_questions():
    scores = [
        StepScore(where_right=True, what_right=False, weight_on_guess=0.5),
        StepScore(where_right=False, what_right=None, weight_on_guess=0.1),
        StepScore(where_right=None, what_right=True, weight_on_guess=None),
        StepScore(where_right=None, what_right=None, weight_on_guess=None),
    ]
    total = total_score(scores)
    assert total == QuizScore(where_right=1, where_asked=2, what_right=1, what_asked=2)
    assert (total.right, total.asked) == (2, 4)
    assert total_score([]) == QuizScore()
    assert total_score(iter(scores[:1])).right == 1  # any iterable, read once


def test_steps_outside_the_translation_are_refused():
    trace = make_trace(uniform_cross())
    with pytest.raises(ValueError, match="step must be in 0..2"):
        step_truth(trace, 3, 0)
