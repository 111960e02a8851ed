"""A class question's answers figure: the class's counts, and the model's values only once revealed."""

from __future__ import annotations

import pytest

from model.analysis.questions import ClassQuestion
from viz.classes import choice_text, class_answers_figure, class_answers_rows

QUESTION = ClassQuestion(
    "looks_at", "Which word?", ("the", "<b>dog</b>", "runs"), (0.1, 0.7, 0.2), 1, "attention weight"
)


def test_before_the_reveal_the_figure_shows_the_class_alone():
    figure = class_answers_figure(QUESTION, [3, 0, 5], revealed=False)
    assert len(figure.data) == 1 and list(figure.data[0].x) == [3, 0, 5]
    labels = figure.layout.yaxis.ticktext
    assert labels == ("the", "&lt;b&gt;dog&lt;/b&gt;", "runs")  # escaped, and no mark of the model's answer
    assert "8 answered" in figure.layout.xaxis.title.text


def test_revealed_the_model_s_values_stand_beside_the_class_s_with_its_answer_marked():
    figure = class_answers_figure(QUESTION, [3, 0, 5], revealed=True)
    assert [trace.name for trace in figure.data] == ["the class", "the model"]
    assert list(figure.data[1].x) == pytest.approx([0.1, 0.7, 0.2])
    assert figure.layout.yaxis.ticktext[1].startswith("<b>▶ ")
    assert "attention weight" in figure.layout.xaxis2.title.text
    rows = class_answers_rows(QUESTION, [3, 0, 5], revealed=True)
    assert rows[1] == ("<b>dog</b>", "0 students; the model's attention weight: 0.700 (the model's answer)")
    assert "model" not in class_answers_rows(QUESTION, [3, 0, 5], revealed=False)[1][1]


def test_counts_must_match_the_choices():
    with pytest.raises(ValueError, match="counts"):
        class_answers_figure(QUESTION, [1, 2], revealed=False)


def test_token_choices_are_written_as_the_other_views_write_tokens():
    question = ClassQuestion("next_word", "Next?", ("▁Hund", "lärt", "</s>"), (0.5, 0.3, 0.2), 0, "probability")
    assert [choice_text(question, index) for index in range(3)] == ["Hund", "·lärt", "</s>"]
    labels = class_answers_figure(question, [1, 0, 0], revealed=True).layout.yaxis.ticktext
    assert labels[0] == "<b>▶ Hund</b>" and labels[1] == "·lärt" and "&lt;/s&gt;" in labels[2]
    words = ClassQuestion("looks_at", "Which?", ("▁odd", "dog"), (0.5, 0.5), 0, "attention weight")
    assert choice_text(words, 0) == "▁odd"  # source words are words already: left as they are
