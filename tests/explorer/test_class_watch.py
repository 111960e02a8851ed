"""The class watch (explorer.classes.watch): which pages of a process it wakes when their class changes."""

from __future__ import annotations

import pytest

from explorer.classes.store import ClassNotFound, open_store
from explorer.classes.watch import ClassWatch, can_push, mark_of
from model.analysis.questions import ClassQuestion

QUESTION = ClassQuestion("next_word", "?", ("a", "b"), (0.3, 0.7), 1, "probability")


@pytest.fixture
def store(tmp_path):
    return open_store(f"sqlite:///{tmp_path / 'classes.sqlite'}")


def test_pages_are_woken_once_for_each_change_of_what_they_show(store):
    made = store.create_class(hours=1)
    watch = ClassWatch(store.info)
    woken: list[str] = []

    def wake(session: str) -> bool:
        woken.append(session)
        return True

    info = store.info(made.code)
    watch.drew("following", made.code, True, mark_of(info, following=True))
    watch.drew("exploring", made.code, False, mark_of(info, following=False))
    assert watch.check(wake) == 0 and woken == []  # nothing changed
    store.move(made.code, made.teacher_key, {"view": "steps"})
    assert watch.check(wake) == 1 and woken == ["following"]  # a move: only the page that follows
    assert watch.check(wake) == 0  # woken once for that move, until it draws again
    store.ask(made.code, made.teacher_key, QUESTION, {})
    woken.clear()
    assert watch.check(wake) == 2 and sorted(woken) == ["exploring", "following"]  # a question: every page
    question_id = store.info(made.code).question.id
    store.reveal(made.code, made.teacher_key, question_id)
    woken.clear()
    watch.check(wake)
    assert sorted(woken) == ["exploring", "following"]  # the reveal too


def test_a_page_gone_is_forgotten_and_an_ended_class_wakes_its_pages(store):
    made = store.create_class(hours=1)
    watch = ClassWatch(store.info)
    info = store.info(made.code)
    watch.drew("gone", made.code, True, mark_of(info, following=True))
    watch.drew("here", made.code, True, mark_of(info, following=True))
    store.end(made.code, made.teacher_key)
    with pytest.raises(ClassNotFound):
        store.info(made.code)
    woken = []
    assert watch.check(lambda session: woken.append(session) or session == "here") == 1
    assert sorted(woken) == ["gone", "here"] and watch.watching() == 1  # the one whose session is gone is dropped


def test_outside_a_streamlit_server_pages_look_by_themselves():
    assert not can_push()  # no runtime here (nor under AppTest): the strip polls
