"""The class store on both of its databases: SQLite (the default file) and a real PostgreSQL started for these tests
(Debian's package; tests/postgres_helpers.py). Every test runs on each; the page's tests are in test_class_page.py.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import threading
import time

import pytest

from explorer.classes.database import Database, StoreUnavailable
from explorer.classes.export import answers_csv
from explorer.classes.limits import Throttle
from explorer.classes.schema import MIGRATIONS
from explorer.classes.store import (
    CODE_ALPHABET,
    CODE_LENGTH,
    MAX_NICKNAME,
    STORE_ENV,
    AnswerRefused,
    ClassNotFound,
    NotTheTeacher,
    normalise_code,
    open_store,
)
from model.analysis.questions import ClassQuestion
from tests.helpers import HOSTILE, REPO
from tests.postgres_helpers import running_postgres

QUESTION = ClassQuestion(
    kind="next_word",
    prompt="What does the model write next?",
    choices=("Hund", "Mann", "Frau"),
    model_values=(0.1, 0.7, 0.2),
    answer=1,
    value_label="probability",
)


@pytest.fixture(scope="module")
def postgres_url():
    with running_postgres() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def store_url(request, tmp_path):
    """A fresh, empty database of each kind (PostgreSQL: a new database on the module's server)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'classes.sqlite'}"
    import psycopg

    server = request.getfixturevalue("postgres_url")
    name = f"classes_{time.monotonic_ns()}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return server.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def store(store_url):
    opened = open_store(store_url)
    yield opened
    opened.close()


def test_a_class_is_made_joined_followed_and_ended(store):
    made = store.create_class(hours=1)
    assert len(made.code) == CODE_LENGTH and set(made.code) <= set(CODE_ALPHABET)
    seat = store.join(made.code)
    assert store.info(made.code).version == 0 and store.info(made.code).seats == 1
    assert store.move(made.code, made.teacher_key, {"view": "steps", "step": "3"}) == 1
    info = store.info(made.code)
    assert (info.state, info.version, info.question) == ({"view": "steps", "step": "3"}, 1, None)
    assert store.join(made.code, seat) == seat  # a page back after a lost replica keeps its seat
    assert store.join(made.code, "not-a-seat-of-it") != seat
    assert store.info(made.code).seats == 2
    store.end(made.code, made.teacher_key)
    with pytest.raises(ClassNotFound):
        store.info(made.code)
    assert store.count_rows() == {"classes": 0, "seats": 0, "questions": 0, "answers": 0}


def test_a_question_is_asked_answered_once_per_seat_and_revealed(store):
    made = store.create_class(hours=1)
    seats = [store.join(made.code) for _ in range(4)]
    question_id = store.ask(made.code, made.teacher_key, QUESTION, {"view": "steps"})
    asked = store.info(made.code).question
    assert asked is not None and asked.question == QUESTION and not asked.revealed
    for seat, choice in zip(seats, (1, 1, 0, 2), strict=True):
        assert store.answer(made.code, seat, question_id, choice)
    assert not store.answer(made.code, seats[0], question_id, 2)  # a second answer: the first stands
    assert store.counts(question_id) == [1, 2, 1]
    assert store.info(made.code).counts == (1, 2, 1)
    assert store.answered(question_id, seats[0]) == 1
    store.reveal(made.code, made.teacher_key, question_id)
    assert store.info(made.code).question.revealed
    with pytest.raises(AnswerRefused):
        store.answer(made.code, store.join(made.code), question_id, 0)  # answers close at the reveal
    (recorded, counts), *_ = store.questions(made.code, made.teacher_key)
    assert recorded.id == question_id and counts == [1, 2, 1]
    # a new question closes the last
    second = store.ask(made.code, made.teacher_key, QUESTION, {})
    assert store.info(made.code).question.id == second
    with pytest.raises(AnswerRefused):
        store.answer(made.code, seats[3], question_id, 0)


@pytest.mark.parametrize("choice", [-1, 3, 99, True, "1", 1.0])
def test_an_answer_must_be_one_of_the_choices(store, choice):
    made = store.create_class(hours=1)
    seat = store.join(made.code)
    question_id = store.ask(made.code, made.teacher_key, QUESTION, {})
    with pytest.raises(AnswerRefused, match="not one of the question's choices"):
        store.answer(made.code, seat, question_id, choice)
    assert store.counts(question_id) == [0, 0, 0]


def test_answers_need_a_seat_of_the_class_and_an_open_question(store):
    made, other = store.create_class(hours=1), store.create_class(hours=1)
    seat_elsewhere = store.join(other.code)
    question_id = store.ask(made.code, made.teacher_key, QUESTION, {})
    with pytest.raises(AnswerRefused, match="not seated"):
        store.answer(made.code, seat_elsewhere, question_id, 0)
    with pytest.raises(AnswerRefused, match="closed"):
        store.answer(other.code, seat_elsewhere, question_id, 0)  # another class's question
    store.close_question(made.code, made.teacher_key)
    with pytest.raises(AnswerRefused, match="closed"):
        store.answer(made.code, store.join(made.code), question_id, 0)
    assert store.counts(question_id) == [0, 0, 0]


def test_teacher_actions_need_the_teacher_key_and_refusals_are_logged(store, caplog):
    made = store.create_class(hours=1)
    seat = store.join(made.code)
    question_id = store.ask(made.code, made.teacher_key, QUESTION, {})
    forged = [
        lambda key: store.move(made.code, key, {"view": "quiz"}),
        lambda key: store.ask(made.code, key, QUESTION, {}),
        lambda key: store.reveal(made.code, key, question_id),
        lambda key: store.close_question(made.code, key),
        lambda key: store.questions(made.code, key),
        lambda key: store.nicknames(made.code, key),
        lambda key: store.end(made.code, key),
    ]
    with caplog.at_level(logging.WARNING, logger="explorer.classes"):
        for action in forged:
            for key in (seat, "", made.teacher_key[:-1], made.teacher_key + "x"):
                with pytest.raises(NotTheTeacher):
                    action(key)
    refusals = [record for record in caplog.records if "refused" in record.getMessage()]
    assert len(refusals) == len(forged) * 4 and all(made.code in record.getMessage() for record in refusals)
    info = store.info(made.code)
    assert info.version == 0 and not info.question.revealed  # nothing moved
    assert not store.is_teacher(made.code, seat) and store.is_teacher(made.code, made.teacher_key)
    with store.database.transaction() as cursor:  # only the key's hash is kept
        cursor.execute("SELECT * FROM classes")
        stored = repr(cursor.fetchall())
    assert made.teacher_key not in stored and hashlib.sha256(made.teacher_key.encode()).hexdigest() in stored
    assert all(made.teacher_key not in record.getMessage() for record in caplog.records)


def test_unknown_ended_and_expired_codes_are_not_found(store):
    with pytest.raises(ClassNotFound, match="no class"):
        store.join("AAAAAAA")
    short = store.create_class(hours=1, now=time.time() - 7200)  # made two hours ago for one hour
    with pytest.raises(ClassNotFound):
        store.join(short.code)
    with pytest.raises(ClassNotFound):
        store.info(short.code)
    assert not store.is_teacher(short.code, short.teacher_key)


def test_retention_deletes_a_class_with_its_seats_questions_and_answers(store):
    kept = store.create_class(hours=5)
    made = store.create_class(hours=1)
    seat = store.join(made.code, nickname="Ana")
    question_id = store.ask(made.code, made.teacher_key, QUESTION, {})
    store.answer(made.code, seat, question_id, 0)
    store.join(kept.code)
    before = store.count_rows()
    assert before == {"classes": 2, "seats": 2, "questions": 1, "answers": 1}
    assert store.purge_expired(now=time.time() + 2 * 3600) == 1
    assert store.count_rows() == {"classes": 1, "seats": 1, "questions": 0, "answers": 0}
    store.info(kept.code)  # the class still within its time is untouched
    with pytest.raises(ClassNotFound):
        store.info(made.code)


def test_nicknames_are_bounded_plain_text(store):
    made = store.create_class(hours=1)
    store.join(made.code, nickname=HOSTILE)
    seat = store.join(made.code, nickname="x" * 500)
    store.rename(made.code, seat, "  Ana\n\t  B.  ")
    names = store.nicknames(made.code, made.teacher_key)
    assert names == [HOSTILE[:MAX_NICKNAME], "Ana B."]


def test_every_answer_from_two_replicas_at_once_is_counted_once(store_url):
    """Sixty students answering at once through two stores (two replicas' processes), each also answering twice:
    all sixty counted, none twice."""
    first, second = open_store(store_url), open_store(store_url)
    made = first.create_class(hours=1)
    seats = [(first if i % 2 else second).join(made.code) for i in range(60)]
    question_id = first.ask(made.code, made.teacher_key, QUESTION, {})
    errors: list[BaseException] = []

    def student(index: int) -> None:
        replica = first if index % 2 else second
        try:
            for _ in range(2):
                replica.answer(made.code, seats[index], question_id, index % 3)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=student, args=(i,)) for i in range(60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    assert first.counts(question_id) == [20, 20, 20]
    first.close()
    second.close()


def test_the_schema_is_created_once_and_a_newer_one_is_refused(store_url):
    open_store(store_url).close()
    again = open_store(store_url)  # a second replica: nothing to migrate
    again.create_class(hours=1)
    database = Database(store_url)
    with database.transaction(write=True) as cursor:
        cursor.execute("SELECT version FROM schema_version")
        assert cursor.fetchall() == [(len(MIGRATIONS),)]
        cursor.execute("UPDATE schema_version SET version = ?", (len(MIGRATIONS) + 1,))
    with pytest.raises(StoreUnavailable, match="newer than this explorer"):
        open_store(store_url)


def test_a_store_in_the_home_folder_is_written_as_the_docs_write_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    open_store("sqlite:///~/explorer/classes.sqlite").create_class(hours=1)
    assert (tmp_path / "explorer" / "classes.sqlite").is_file()


def test_an_unreachable_store_is_a_clear_error(tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the store's folder should be")
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        open_store(f"sqlite:///{blocked / 'classes.sqlite'}")
    with pytest.raises(StoreUnavailable, match="cannot be reached") as refused:
        open_store("postgresql://explorer:secret-password@127.0.0.1:1/classes")
    assert "secret-password" not in str(refused.value)  # the message may be shown or logged
    with pytest.raises(ValueError, match="sqlite:/// or postgresql://"):
        open_store("mysql://somewhere/classes")


def test_codes_are_read_as_typed_and_csv_is_spreadsheet_safe(store):
    assert normalise_code(" ac4f-7xy ") == "AC4F7XY"
    made = store.create_class(hours=1)
    question = ClassQuestion("next_word", "=HYPERLINK(1)", ("-2+3", "@x"), (0.4, 0.6), 1, "probability")
    question_id = store.ask(made.code, made.teacher_key, question, {})
    store.answer(made.code, store.join(made.code), question_id, 1)
    text = answers_csv(store.questions(made.code, made.teacher_key))
    lines = text.splitlines()
    assert lines[0].startswith("question,asked_at_utc,kind,prompt,choice,students")
    assert lines[1].split(",")[3:6] == ["'=HYPERLINK(1)", "'-2+3", "0"]
    assert lines[2].split(",")[3:9] == ["'=HYPERLINK(1)", "'@x", "1", "0.6000", "probability", "yes"]


def test_throttle_refuses_past_its_limit_and_forgets_after_its_window():
    throttle = Throttle(3, 10.0)
    assert [throttle.allow("a", now=t) for t in (0, 1, 2, 3)] == [True, True, True, False]
    assert throttle.full("a", now=5) and not throttle.full("b", now=5)
    assert throttle.allow("a", now=10.5)  # the first event left the window


def test_the_command_line_makes_a_class_whose_links_work(tmp_path):
    store_url = f"sqlite:///{tmp_path / 'classes.sqlite'}"

    def classes_command(*arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "explorer.classes", *arguments],
            cwd=REPO,
            env={"PATH": "/usr/bin:/bin", STORE_ENV: store_url, "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=120,
        )

    run = classes_command("new", "--url", "http://lecture:8501", "--hours", "2")
    assert run.returncode == 0, run.stderr
    join, teacher = run.stdout.splitlines()
    code = join.removeprefix("http://lecture:8501/?class=")
    assert teacher.startswith(f"{join}&teacher=")
    store = open_store(store_url)
    assert store.is_teacher(code, teacher.split("&teacher=")[1])
    assert 1.9 * 3600 < store.info(code).expires_at - time.time() <= 2 * 3600
    refused = classes_command("new", "--hours", "0")
    assert refused.returncode == 2 and "--hours" in refused.stderr
