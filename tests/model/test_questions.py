"""Class questions (model.analysis.questions) on hand-built traces whose answers are known by construction, and on a
real model's trace."""

from __future__ import annotations

import numpy as np
import pytest

from model.analysis.head_stats import trace_head_statistics
from model.analysis.questions import MAX_CHOICES, ClassQuestion, alignment_head, looks_at, next_word
from model.analysis.quiz import step_truth
from tests.model.test_quiz import SOURCE, WORDS, make_trace, uniform_cross


def test_looks_at_offers_the_source_words_and_the_model_reads_the_heaviest():
    cross = uniform_cross()
    cross[1, 2, 1] = [0.05, 0.1, 0.6, 0.2, 0.05]  # layer 1, head 2, step 1: "runs" (two pieces: 0.8)
    question = looks_at(make_trace(cross), step=1, layer=1, head=2)
    assert question.choices == tuple(WORDS)
    assert question.choices[question.answer] == "runs"
    assert question.model_values == pytest.approx([0.05, 0.1, 0.8, 0.05])
    assert (
        "“Hund”" in question.prompt
    )  # written as words, not pieces and "step 2" in question.prompt and "layer 2" in question.prompt
    assert "head 3" in question.prompt
    mean = looks_at(make_trace(cross), step=1, layer=1)
    assert "mean of its heads" in mean.prompt


def test_next_word_offers_the_top_tokens_with_their_probabilities_and_the_one_written():
    trace = make_trace(uniform_cross(), topk=[["▁der", "▁die"], ["▁Katze", "▁Maus"], ["</s>", "."]])
    question = next_word(trace, step=1)  # the model wrote ▁Hund, outside its top 2 (teacher forcing)
    assert set(question.choices) == {"▁Katze", "▁Maus", "▁Hund"}
    assert question.choices[question.answer] == "▁Hund"
    assert question.model_values[question.answer] == pytest.approx(0.5)  # its step probability
    assert "written: der." in question.prompt  # what it has written so far, as words


def test_alignment_head_is_the_head_nearest_the_diagonal(traces):
    trace = traces[0]
    table = [row for row in trace_head_statistics(trace) if row["kind"] == "cross" and row["layer"] == 1]
    question = alignment_head(trace, layer=1)
    best = max(table, key=lambda row: row["diagonality"])
    assert question.choices[question.answer] == f"head {best['head'] + 1}"
    assert question.model_values == pytest.approx([row["diagonality"] for row in table])


def test_long_sentences_offer_the_likeliest_choices_in_sentence_order():
    source = [f"▁w{i}" for i in range(20)] + ["</s>"]
    cross = np.full((1, 1, 3, len(source)), 0.01)
    cross[0, 0, 0, 15] = 0.5
    trace = make_trace(uniform_cross())
    trace.source_pieces = source
    trace.attention = {"decoder.layers.0.cross_attn": cross[0]}
    question = looks_at(trace, step=0, layer=0, head=0)
    assert len(question.choices) == MAX_CHOICES
    assert question.choices[question.answer] == "w15"
    positions = [int(choice[1:]) for choice in question.choices if choice != "</s>"]
    assert positions == sorted(positions)
    assert step_truth(trace, 0, 0, 0).words[step_truth(trace, 0, 0, 0).looked_at] == "w15"


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "essay"},
        {"choices": ("only",), "model_values": (1.0,), "answer": 0},
        {"model_values": (0.5,)},
        {"answer": 2},
    ],
)
def test_a_question_must_be_multiple_choice_with_an_answer_among_them(fields):
    base = {
        "kind": "next_word",
        "prompt": "?",
        "choices": ("a", "b"),
        "model_values": (0.4, 0.6),
        "answer": 1,
        "value_label": "probability",
    }
    with pytest.raises(ValueError):
        ClassQuestion(**{**base, **fields})


def test_steps_outside_the_translation_are_refused():
    with pytest.raises(ValueError, match="step"):
        looks_at(make_trace(uniform_cross()), step=len(SOURCE), layer=0)
