"""A class session on the page (AppTest): a teacher's page and students' pages on one store, as a server's sessions.

The store itself on SQLite and PostgreSQL: test_class_store.py; a real browser on each of two replicas behind nginx:
tests/browser/test_replicas.py.
"""

from __future__ import annotations

import logging
import time

import pytest
from streamlit.testing.v1 import AppTest

from explorer.classes import limits, session
from explorer.classes.export import answers_csv
from explorer.classes.limits import WRONG_CODES_PER_SESSION
from explorer.classes.session import MEMBERSHIP
from explorer.classes.store import HOURS_ENV, STORE_ENV, open_store
from explorer.wording import escape_markdown
from model import load_checkpoint
from tests.app_helpers import assert_ok, chart_specs, chart_titles
from tests.helpers import APP, CHECKPOINTS_ENV, HOSTILE, SENTENCE

OTHER_SENTENCE = "a woman walks with a dog in the snow."


@pytest.fixture(autouse=True)
def fresh_throttles(monkeypatch):
    """Every AppTest page has the same session id: each test starts with the throttles' counts empty."""
    for throttle in vars(limits).values():
        if isinstance(throttle, limits.Throttle):
            monkeypatch.setattr(throttle, "_events", {})


@pytest.fixture
def store_url(monkeypatch, tmp_path, classroom_checkpoints) -> str:
    url = f"sqlite:///{tmp_path / 'classes.sqlite'}"
    monkeypatch.setenv(STORE_ENV, url)
    monkeypatch.setenv(CHECKPOINTS_ENV, str(classroom_checkpoints))
    return url


def page(**query: str) -> AppTest:
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params.update(query)
    return app.run()


def teacher_page() -> tuple[AppTest, str]:
    teacher = page()
    teacher.button(key="class_start").click().run()
    assert_ok(teacher)
    return teacher, teacher.session_state[MEMBERSHIP].code


def followed(app: AppTest) -> dict:
    """What a student following sees of the teacher's page."""
    state = {"sentence": app.text_input(key="sentence").value, "view": app.segmented_control(key="view").value}
    for key in ("layer", "head", "step", "step_layer"):
        state[key] = app.session_state[key] if key in app.session_state else None
    return state


def strip_text(app: AppTest) -> str:
    return " ".join(markdown.value for markdown in app.markdown)


def test_students_follow_the_teacher_stop_and_follow_again(store_url):
    teacher, code = teacher_page()
    teacher_link = [block.value for block in teacher.code if "teacher=" in block.value]
    assert len(teacher_link) == 1 and teacher_link[0].startswith(f"/?class={code}&teacher=")
    assert dict(teacher.query_params) == {"class": code}  # the key never stays in the teacher's own URL
    student = page(**{"class": code})
    assert_ok(student)
    assert "following the teacher's page" in strip_text(student)
    # the teacher's page at its defaults published an empty state: the student's page went there, and is not woken
    # again for it (the watch compares the version a page drew with the class's)
    info = open_store(store_url).info(code)
    assert (info.state, info.version) == ({}, 1) and student.session_state[MEMBERSHIP].applied_version == 1
    assert student.query_params["class"] == code and student.query_params["seat"]
    assert "teacher" not in student.query_params
    assert not [button for button in student.get("download_button") if button.key == "class_csv"]
    assert [button for button in teacher.get("download_button") if button.key == "class_csv"]

    teacher.text_input(key="sentence").input(SENTENCE).run()
    teacher.selectbox(key="layer").set_value(1).run()
    teacher.selectbox(key="head").set_value(2).run()
    student.run()
    assert followed(student) == followed(teacher)
    assert followed(student)["layer"] == 1 and followed(student)["head"] == 2
    teacher.segmented_control(key="view").set_value("steps").run()
    teacher.button(key="step_next").click().run()
    student.run()
    assert (
        followed(student) == followed(teacher)
        and followed(student)["step"] == 1
        and followed(student)["view"] == "steps"
    )
    assert chart_titles(student) == chart_titles(teacher)
    teacher.segmented_control(key="view").set_value("cross").run()  # back to the page's defaults: nothing in the URL
    student.run()
    assert followed(student)["view"] == "cross" == followed(teacher)["view"]
    teacher.segmented_control(key="view").set_value("steps").run()
    student.run()

    student.button(key="class_unfollow").click().run()
    assert "exploring on your own" in strip_text(student)
    teacher.text_input(key="sentence").input(OTHER_SENTENCE).run()
    student.run()
    assert followed(student)["sentence"] == SENTENCE  # stays where it was
    student.button(key="class_follow").click().run()
    student.run()
    assert followed(student) == followed(teacher) and followed(student)["sentence"] == OTHER_SENTENCE
    # the student's page reconnected to another replica (a new session) opens its URL: the same seat, following
    reopened = page(**student.query_params)
    assert reopened.session_state[MEMBERSHIP].seat == student.query_params["seat"]
    assert followed(reopened) == followed(teacher) and dict(reopened.query_params) == dict(student.query_params)


def test_a_question_is_asked_answered_and_revealed_with_the_counts_right(
    store_url, handout_files, classroom_checkpoints
):
    teacher, code = teacher_page()
    teacher.text_input(key="sentence").input(SENTENCE).run()
    teacher.segmented_control(key="view").set_value("steps").run()
    teacher.selectbox(key="class_question_kind").set_value("next_word").run()
    teacher.button(key="class_ask").click().run()
    assert_ok(teacher)
    students = [page(**{"class": code}) for _ in range(3)]
    asked = open_store(store_url).info(code).question
    expected = load_checkpoint(classroom_checkpoints / "tiny-en-de", device="cpu").trace(SENTENCE, beam_size=1)
    assert asked.question.choices[asked.question.answer] == expected.predicted_pieces[0]
    for student, choice in zip(students, (0, 0, 1), strict=True):
        assert f"**Question:** {escape_markdown(asked.question.prompt)}" in strip_text(student)
        student.button(key=f"class_choice_{asked.id}_{choice}").click().run()
        assert_ok(student)
        assert "Your answer:" in strip_text(student)
        assert not [b for b in student.button if b.key.startswith("class_choice_")]  # one answer per student
    # a press the store refuses (here: the teacher revealed meanwhile) says why in the strip, at once
    late = page(**{"class": code})
    teacher.button(key="class_reveal").click().run()
    late.button(key=f"class_choice_{asked.id}_0").click().run()
    assert any("answers are closed" in warning.value for warning in late.warning)
    teacher.button(key="class_close").click().run()
    teacher.button(key="class_ask").click().run()  # the same question again, for the whole class
    asked = open_store(store_url).info(code).question
    for student, choice in zip(students, (0, 0, 1), strict=True):
        student.run()
        student.button(key=f"class_choice_{asked.id}_{choice}").click().run()
    teacher.run()
    assert "3 of 4 answered" in strip_text(teacher)  # the late page did not answer this one
    assert not any(title.startswith("The class's answers") for title in chart_titles(teacher))  # not yet shown
    teacher.button(key="class_reveal").click().run()
    for app in (teacher, *students):
        app.run()
        charts = [spec for spec in chart_specs(app) if spec["layout"]["title"]["text"].startswith("The class's")]
        assert len(charts) == 1
        class_bars, model_bars = charts[0]["data"]
        expected_counts = [0] * len(asked.question.choices)
        expected_counts[0], expected_counts[1] = 2, 1
        assert class_bars["x"] == expected_counts
        assert model_bars["x"] == pytest.approx(list(asked.question.model_values))
    rows = answers_csv(open_store(store_url).questions(code, teacher.session_state[MEMBERSHIP].teacher_key))
    assert rows.count("\n") == 1 + 2 * len(asked.question.choices)  # the question asked twice, a row per choice
    teacher.run()  # the handout download registered last is the teacher's
    handout = handout_files["tiny-en-de-handout.html"]()
    assert "Class question 1: " in handout and "Class question 2: " in handout


def test_a_view_without_questions_says_so_and_the_page_refuses_one(store_url):
    teacher, code = teacher_page()
    teacher.segmented_control(key="view").set_value("positional").run()
    assert not [box for box in teacher.selectbox if box.key == "class_question_kind"]
    assert any("No class question on this view" in caption.value for caption in teacher.caption)
    from explorer.classes.strip import VIEW_QUESTIONS

    assert "positional" not in VIEW_QUESTIONS and open_store(store_url).info(code).question is None


def test_a_forged_teacher_link_is_refused_logged_and_gives_no_teacher_controls(store_url, caplog):
    _, code = teacher_page()
    with caplog.at_level(logging.WARNING, logger="explorer.classes"):
        forger = page(**{"class": code, "teacher": "guessed-key"})
    assert_ok(forger)
    assert any("does not open a class" in warning.value for warning in forger.warning)
    assert any("refused a teacher link" in record.getMessage() for record in caplog.records)
    assert MEMBERSHIP not in forger.session_state and "teacher" not in forger.query_params
    assert not [button for button in forger.button if button.key in ("class_ask", "class_reveal", "class_end")]


def test_unknown_codes_get_a_clear_message_and_wrong_codes_are_throttled(store_url):
    student = page(**{"class": "NOSUCH7"})
    assert any("There is no class NOSUCH7" in warning.value for warning in student.warning)
    assert "class" not in student.query_params and MEMBERSHIP not in student.session_state
    for attempt in range(WRONG_CODES_PER_SESSION.limit + 1):
        student.text_input(key="class_code_typed").input(f"WRONG{attempt:02d}").run()
        student.button(key="class_join").click().run()
    assert any("Too many wrong codes" in warning.value for warning in student.warning)
    _, code = teacher_page()
    student.text_input(key="class_code_typed").input(code.lower()).run()
    student.button(key="class_join").click().run()
    assert MEMBERSHIP not in student.session_state  # still throttled, even for the right code


def test_a_hostile_nickname_is_stored_as_text_and_a_class_that_ends_lets_students_go(store_url):
    teacher, code = teacher_page()
    student = page(**{"class": code})
    student.text_input(key="class_nickname").input(HOSTILE[:24]).run()  # the box takes 24 characters
    key = teacher.session_state[MEMBERSHIP].teacher_key
    assert open_store(store_url).nicknames(code, key) == [HOSTILE[:24]]
    teacher.button(key="class_end").click().run()
    assert MEMBERSHIP not in teacher.session_state and "class" not in teacher.query_params
    student.run()
    assert_ok(student)
    assert any(f"Class {code} has ended" in warning.value for warning in student.warning)
    assert MEMBERSHIP not in student.session_state
    assert open_store(store_url).count_rows() == {"classes": 0, "seats": 0, "questions": 0, "answers": 0}


def test_retention_ends_a_class_for_its_pages_and_the_server_deletes_it(store_url, monkeypatch):
    monkeypatch.setenv(HOURS_ENV, "0.0001")  # a third of a second
    monkeypatch.setattr(session, "PURGE_EVERY_S", 0.2)
    teacher, code = teacher_page()
    student = page(**{"class": code})
    assert open_store(store_url).info(code).seats == 1
    time.sleep(0.8)
    teacher.run()
    assert any(f"Class {code} has ended" in warning.value for warning in teacher.warning)
    student.run()
    assert any(f"Class {code} has ended" in warning.value for warning in student.warning)
    # deleted by the server's own purge, with its seat, without anyone asking
    assert open_store(store_url).count_rows() == {"classes": 0, "seats": 0, "questions": 0, "answers": 0}


def test_an_unreachable_store_leaves_the_page_working_alone(monkeypatch, classroom_checkpoints):
    monkeypatch.setenv(STORE_ENV, "postgresql://explorer@127.0.0.1:1/classes")
    monkeypatch.setenv(CHECKPOINTS_ENV, str(classroom_checkpoints))
    app = page()
    app.button(key="class_start").click().run()
    assert_ok(app)
    assert any("Classes are unavailable" in warning.value for warning in app.warning)
    assert chart_titles(app)  # the page still draws its view
    student = page(**{"class": "ABCDEFG"})
    assert_ok(student)
    assert chart_titles(student)
