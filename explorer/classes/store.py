"""Where classes live: the classes, their seats, questions and answers, in the database the store URL names.

``open_store()`` opens the one ATTENTION_EXPLORER_CLASS_STORE names (default: a SQLite file in the server's data
folder) and creates or migrates its schema (explorer.classes.database, the data layer). Every method is one short
transaction; a teacher's action checks the teacher key against its stored hash, and a wrong key is refused and
logged.

Nothing personal is stored: a class is its code, the teacher key's hash, the teacher's page state and its
questions; a student is a random seat and an optional nickname; an answer is a seat's choice. All of it is deleted
when the teacher ends the class or when it expires (``purge_expired``).

Streamlit-free: ``python -m explorer.classes`` and the tests use it alone.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.classes.database import Cursor, Database
from explorer.classes.schema import MIGRATIONS
from model.analysis.questions import ClassQuestion

STORE_ENV = "ATTENTION_EXPLORER_CLASS_STORE"  # sqlite:///path/classes.sqlite or postgresql://user@host/db
HOURS_ENV = "ATTENTION_EXPLORER_CLASS_HOURS"  # how long a class is kept before it and its answers are deleted
DEFAULT_HOURS = 4.0
MAX_HOURS = 24.0 * 14
DEFAULT_FOLDER = Path.home() / ".local" / "share" / "attention-explorer"
# join codes: no letters or digits one misreads on a projector (0/O, 1/I/L, 2/Z, 5/S, 8/B, U/V)
CODE_ALPHABET = "34679ACDEFGHJKMNPQRTWXY"
CODE_LENGTH = 7  # 23^7 = 3.4e9 codes: with joins rate limited, guessing one of a few classes takes years
MAX_NICKNAME = 24
log = logging.getLogger("explorer.classes")


class ClassError(Exception):
    """A class request that cannot be done; its message is for the person who made it."""


class ClassNotFound(ClassError):
    """No class has that code, or it has ended or expired."""


class NotTheTeacher(ClassError):
    """A teacher's action without the class's teacher key (refused and logged)."""


class AnswerRefused(ClassError):
    """An answer that is not one: no such question, closed, a choice it does not offer, not a seat of the class."""


@dataclass(frozen=True)
class NewClass:
    code: str
    teacher_key: str  # shown once: only its hash is stored
    expires_at: float


@dataclass(frozen=True)
class ClassInfo:
    code: str
    expires_at: float
    state: dict[str, str]  # the teacher's page, as its URL's parameters
    version: int  # grows with every move of the teacher's
    seats: int
    question: AskedQuestion | None  # the question open now, if any
    counts: tuple[int, ...] = ()  # its answers per choice


@dataclass(frozen=True)
class AskedQuestion:
    id: str
    question: ClassQuestion
    view_state: dict[str, str]  # the teacher's page when it was asked
    asked_at: float
    revealed: bool
    closed: bool


def normalise_code(text: str) -> str:
    """A join code as typed ("ac4 7-xy" -> "AC47XY"): spaces and dashes dropped, upper case."""
    return "".join(ch for ch in text.upper() if ch not in " -")


def store_url() -> str:
    """The store's URL from ATTENTION_EXPLORER_CLASS_STORE, else a SQLite file in the server's data folder."""
    return os.environ.get(STORE_ENV) or f"sqlite:///{DEFAULT_FOLDER / 'classes.sqlite'}"


def retention_hours() -> float:
    """How long a class lives (ATTENTION_EXPLORER_CLASS_HOURS, default 4, at most two weeks)."""
    raw = os.environ.get(HOURS_ENV)
    if raw is None:
        return DEFAULT_HOURS
    try:
        hours = float(raw)
    except ValueError as error:
        raise ValueError(f"{HOURS_ENV} must be a number of hours, not {raw!r}") from error
    if not 0 < hours <= MAX_HOURS:
        raise ValueError(f"{HOURS_ENV} must be more than 0 and at most {MAX_HOURS:g} hours, not {raw!r}")
    return hours


def _hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _question_json(question: ClassQuestion) -> str:
    return json.dumps(
        {
            "prompt": question.prompt,
            "choices": list(question.choices),
            "model_values": list(question.model_values),
            "answer": question.answer,
            "value_label": question.value_label,
        }
    )


def _question_from(kind: str, body: str) -> ClassQuestion:
    data = json.loads(body)
    return ClassQuestion(
        kind=kind,
        prompt=data["prompt"],
        choices=tuple(data["choices"]),
        model_values=tuple(data["model_values"]),
        answer=data["answer"],
        value_label=data["value_label"],
    )


class ClassStore:
    """Classes in one database. ``open_store(url)`` opens one; every method is one short transaction."""

    def __init__(self, url: str) -> None:
        self.database = Database(url)
        self.database.migrate(MIGRATIONS)

    def where(self) -> str:
        return self.database.where()

    def close(self) -> None:
        self.database.close()

    # --- the teacher's side ------------------------------------------------------------------------------------

    def create_class(self, hours: float | None = None, now: float | None = None) -> NewClass:
        """A new class with a fresh join code and teacher key, kept ``hours`` (default: the retention setting)."""
        now = time.time() if now is None else now
        hours = retention_hours() if hours is None else hours
        if not 0 < hours <= MAX_HOURS:
            raise ValueError(f"a class lasts more than 0 and at most {MAX_HOURS:g} hours, not {hours}")
        self.purge_expired(now)
        key = secrets.token_urlsafe(24)
        expires = now + hours * 3600
        with self.database.transaction(write=True) as cursor:
            while True:
                code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
                cursor.execute("SELECT 1 FROM classes WHERE code = ?", (code,))
                if cursor.fetchone() is None:
                    break
            cursor.execute(
                "INSERT INTO classes (code, teacher_key_hash, created_at, expires_at, state, version) "
                "VALUES (?, ?, ?, ?, ?, 0)",
                (code, _hash_key(key), now, expires, "{}"),
            )
        log.info("class %s created, kept until %s", code, time.strftime("%Y-%m-%d %H:%M", time.localtime(expires)))
        return NewClass(code, key, expires)

    def is_teacher(self, code: str, key: str) -> bool:
        with self.database.transaction() as cursor:
            stored = self._key_hash(cursor, code)
        return stored is not None and hmac.compare_digest(stored, _hash_key(key))

    @staticmethod
    def _key_hash(cursor: Cursor, code: str) -> str | None:
        """The teacher key's hash of a class still within its time, None for no such class."""
        cursor.execute("SELECT teacher_key_hash FROM classes WHERE code = ? AND expires_at > ?", (code, time.time()))
        row = cursor.fetchone()
        return None if row is None else str(row[0])

    def _check_teacher(self, cursor: Cursor, code: str, key: str, action: str) -> None:
        stored = self._key_hash(cursor, code)
        if stored is None:
            raise ClassNotFound(f"There is no class {code} (it has ended, or the code is wrong).")
        if not hmac.compare_digest(stored, _hash_key(key)):
            log.warning("refused %s on class %s: not the teacher's key", action, code)
            raise NotTheTeacher("Only the teacher's page can do that.")

    def move(self, code: str, key: str, state: dict[str, str]) -> int:
        """The teacher's page is now ``state`` (its URL's parameters): the students following it go there."""
        with self.database.transaction(write=True) as cursor:
            self._check_teacher(cursor, code, key, "move")
            cursor.execute(
                "UPDATE classes SET state = ?, version = version + 1 WHERE code = ?", (json.dumps(state), code)
            )
            cursor.execute("SELECT version FROM classes WHERE code = ?", (code,))
            return int(cursor.fetchone()[0])

    def ask(self, code: str, key: str, question: ClassQuestion, view_state: dict[str, str]) -> str:
        """Ask ``question`` (closing the one open); returns its id."""
        question_id = secrets.token_hex(8)
        with self.database.transaction(write=True) as cursor:
            self._check_teacher(cursor, code, key, "ask")
            cursor.execute("UPDATE questions SET closed = 1 WHERE class_code = ?", (code,))
            cursor.execute(
                "INSERT INTO questions (id, class_code, asked_at, kind, body, view_state, revealed, closed) "
                "VALUES (?, ?, ?, ?, ?, ?, 0, 0)",
                (question_id, code, time.time(), question.kind, _question_json(question), json.dumps(view_state)),
            )
        return question_id

    def reveal(self, code: str, key: str, question_id: str) -> None:
        """Show the class the model's answer beside theirs; answers are no longer taken."""
        with self.database.transaction(write=True) as cursor:
            self._check_teacher(cursor, code, key, "reveal")
            cursor.execute("UPDATE questions SET revealed = 1 WHERE id = ? AND class_code = ?", (question_id, code))

    def close_question(self, code: str, key: str) -> None:
        with self.database.transaction(write=True) as cursor:
            self._check_teacher(cursor, code, key, "close a question")
            cursor.execute("UPDATE questions SET closed = 1 WHERE class_code = ?", (code,))

    def end(self, code: str, key: str) -> None:
        """End the class: it, its seats, questions and answers are deleted."""
        with self.database.transaction(write=True) as cursor:
            self._check_teacher(cursor, code, key, "end")
            self._delete(cursor, [code])
        log.info("class %s ended by its teacher", code)

    def questions(self, code: str, key: str) -> list[tuple[AskedQuestion, list[int]]]:
        """Every question of the class, oldest first, with its answers counted per choice (the teacher's only)."""
        with self.database.transaction() as cursor:
            self._check_teacher(cursor, code, key, "read the answers")
            cursor.execute(
                "SELECT id, kind, body, view_state, asked_at, revealed, closed FROM questions "
                "WHERE class_code = ? ORDER BY asked_at",
                (code,),
            )
            asked = [self._asked(row) for row in cursor.fetchall()]
            return [(question, self._tally(cursor, question.id, len(question.question.choices))) for question in asked]

    # --- the students' side ------------------------------------------------------------------------------------

    def join(self, code: str, seat: str | None = None, nickname: str = "") -> str:
        """A seat in the class: ``seat`` again when it is one of the class's (a page back after a lost replica),
        else a new one. The nickname is cut to MAX_NICKNAME characters and stored as text, never markup."""
        nickname = " ".join(nickname.split())[:MAX_NICKNAME]
        with self.database.transaction(write=True) as cursor:
            if self._key_hash(cursor, code) is None:
                raise ClassNotFound(f"There is no class {code} (it has ended, or the code is wrong).")
            if seat:
                cursor.execute("SELECT 1 FROM seats WHERE class_code = ? AND seat = ?", (code, seat))
                if cursor.fetchone() is not None:
                    return seat
            seat = secrets.token_urlsafe(12)
            cursor.execute(
                "INSERT INTO seats (class_code, seat, nickname, joined_at) VALUES (?, ?, ?, ?)",
                (code, seat, nickname, time.time()),
            )
        return seat

    def info(self, code: str) -> ClassInfo:
        """What a page in the class reads each time it looks: the teacher's state and the open question."""
        with self.database.transaction() as cursor:
            cursor.execute(
                "SELECT expires_at, state, version FROM classes WHERE code = ? AND expires_at > ?", (code, time.time())
            )
            row = cursor.fetchone()
            if row is None:
                raise ClassNotFound(f"There is no class {code} (it has ended, or the code is wrong).")
            cursor.execute("SELECT COUNT(*) FROM seats WHERE class_code = ?", (code,))
            seats = int(cursor.fetchone()[0])
            cursor.execute(
                "SELECT id, kind, body, view_state, asked_at, revealed, closed FROM questions "
                "WHERE class_code = ? AND closed = 0",
                (code,),
            )
            open_row = cursor.fetchone()
            question = None if open_row is None else self._asked(open_row)
            counts = () if question is None else tuple(self._tally(cursor, question.id, len(question.question.choices)))
        return ClassInfo(code, float(row[0]), json.loads(row[1]), int(row[2]), seats, question, counts)

    def rename(self, code: str, seat: str, nickname: str) -> None:
        """A seat's nickname (optional; cut to MAX_NICKNAME characters, stored as text)."""
        with self.database.transaction(write=True) as cursor:
            cursor.execute(
                "UPDATE seats SET nickname = ? WHERE class_code = ? AND seat = ?",
                (" ".join(nickname.split())[:MAX_NICKNAME], code, seat),
            )

    def nicknames(self, code: str, key: str) -> list[str]:
        """The nicknames the class's students gave, in the order they joined (the teacher's only)."""
        with self.database.transaction() as cursor:
            self._check_teacher(cursor, code, key, "read the nicknames")
            cursor.execute(
                "SELECT nickname FROM seats WHERE class_code = ? AND nickname <> '' ORDER BY joined_at", (code,)
            )
            return [row[0] for row in cursor.fetchall()]

    def answer(self, code: str, seat: str, question_id: str, choice: int) -> bool:
        """Record a seat's answer; False when it had answered this question already (the first answer stands)."""
        with self.database.transaction(write=True) as cursor:
            cursor.execute("SELECT 1 FROM seats WHERE class_code = ? AND seat = ?", (code, seat))
            if cursor.fetchone() is None:
                raise AnswerRefused("This page is not seated in the class: join it again.")
            cursor.execute(
                "SELECT kind, body, revealed, closed FROM questions WHERE id = ? AND class_code = ?",
                (question_id, code),
            )
            row = cursor.fetchone()
            if row is None or row[3]:
                raise AnswerRefused("That question is closed.")
            if row[2]:
                raise AnswerRefused("The answer has been revealed: answers are closed.")
            question = _question_from(row[0], row[1])
            if not isinstance(choice, int) or isinstance(choice, bool) or not 0 <= choice < len(question.choices):
                raise AnswerRefused("That is not one of the question's choices.")
            cursor.execute(
                "INSERT INTO answers (question_id, seat, choice, answered_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (question_id, seat) DO NOTHING",
                (question_id, seat, choice, time.time()),
            )
            return cursor.rowcount == 1

    def counts(self, question_id: str) -> list[int]:
        """How many chose each choice of a question."""
        with self.database.transaction() as cursor:
            cursor.execute("SELECT kind, body FROM questions WHERE id = ?", (question_id,))
            row = cursor.fetchone()
            if row is None:
                raise AnswerRefused("There is no such question.")
            choices = len(_question_from(row[0], row[1]).choices)
            return self._tally(cursor, question_id, choices)

    def answered(self, question_id: str, seat: str) -> int | None:
        """The choice a seat gave, if it answered."""
        with self.database.transaction() as cursor:
            cursor.execute("SELECT choice FROM answers WHERE question_id = ? AND seat = ?", (question_id, seat))
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    # --- retention ---------------------------------------------------------------------------------------------

    def purge_expired(self, now: float | None = None) -> int:
        """Delete every class past its time, with its seats, questions and answers; returns how many."""
        now = time.time() if now is None else now
        with self.database.transaction(write=True) as cursor:
            cursor.execute("SELECT code FROM classes WHERE expires_at <= ?", (now,))
            codes = [row[0] for row in cursor.fetchall()]
            self._delete(cursor, codes)
        for code in codes:
            log.info("class %s expired: deleted", code)
        return len(codes)

    def count_rows(self) -> dict[str, int]:
        """Rows per table (what retention leaves behind: the tests, and an operator's check)."""
        with self.database.transaction() as cursor:
            counts = {}
            for table in ("classes", "seats", "questions", "answers"):
                cursor.execute(f"SELECT COUNT(*) FROM {table}")  # noqa: S608 - the table names are ours
                counts[table] = int(cursor.fetchone()[0])
            return counts

    # --- helpers -----------------------------------------------------------------------------------------------

    @staticmethod
    def _delete(cursor: Cursor, codes: list[str]) -> None:
        for code in codes:
            cursor.execute(
                "DELETE FROM answers WHERE question_id IN (SELECT id FROM questions WHERE class_code = ?)", (code,)
            )
            cursor.execute("DELETE FROM questions WHERE class_code = ?", (code,))
            cursor.execute("DELETE FROM seats WHERE class_code = ?", (code,))
            cursor.execute("DELETE FROM classes WHERE code = ?", (code,))

    @staticmethod
    def _asked(row: tuple[Any, ...]) -> AskedQuestion:
        question_id, kind, body, view_state, asked_at, revealed, closed = row
        return AskedQuestion(
            question_id,
            _question_from(kind, body),
            json.loads(view_state),
            float(asked_at),
            bool(revealed),
            bool(closed),
        )

    @staticmethod
    def _tally(cursor: Cursor, question_id: str, choices: int) -> list[int]:
        cursor.execute("SELECT choice, COUNT(*) FROM answers WHERE question_id = ? GROUP BY choice", (question_id,))
        counts = [0] * choices
        for choice, count in cursor.fetchall():
            counts[int(choice)] = int(count)
        return counts


def open_store(url: str | None = None) -> ClassStore:
    """The store at ``url`` (default: ``store_url()``), its schema created or migrated."""
    return ClassStore(url or store_url())
