"""The class store's tables, as migrations: each a list of statements in the SQL both SQLite and PostgreSQL read.

A store opened on an older schema applies the migrations after its version (explorer.classes.database.migrate); add
a migration at the end, never edit one a store may have applied. Times are seconds since the epoch (DOUBLE
PRECISION: PostgreSQL's REAL would round them to minutes); JSON is stored as text.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1: classes, seats, questions, answers
        """CREATE TABLE classes (
            code TEXT PRIMARY KEY,
            teacher_key_hash TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            state TEXT NOT NULL,
            version INTEGER NOT NULL
        )""",
        """CREATE TABLE seats (
            class_code TEXT NOT NULL,
            seat TEXT NOT NULL,
            nickname TEXT NOT NULL,
            joined_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (class_code, seat)
        )""",
        """CREATE TABLE questions (
            id TEXT PRIMARY KEY,
            class_code TEXT NOT NULL,
            asked_at DOUBLE PRECISION NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            view_state TEXT NOT NULL,
            revealed INTEGER NOT NULL,
            closed INTEGER NOT NULL
        )""",
        "CREATE INDEX questions_of_class ON questions (class_code, asked_at)",
        """CREATE TABLE answers (
            question_id TEXT NOT NULL,
            seat TEXT NOT NULL,
            choice INTEGER NOT NULL,
            answered_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (question_id, seat)
        )""",
    ),
)
