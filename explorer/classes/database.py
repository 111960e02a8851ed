"""The data layer under the class store: one database, SQLite or PostgreSQL, chosen by its URL.

Plain DB-API with the same SQL for both, written with ``?`` placeholders (PostgreSQL's driver gets ``%s``): the few
statements a class needs do not call for SQLAlchemy's weight, and the two dialects differ only in the placeholder,
the connection, and how a migration locks out a second replica migrating at the same time (docs/classes.md).

- SQLite (``sqlite:///path/classes.sqlite``, the default): one file, in WAL mode, so the replicas of one machine
  read while one writes; a write waits for the file's lock up to BUSY_TIMEOUT_S.
- PostgreSQL (``postgresql://user:password@host:port/db``, needs psycopg): for replicas on several machines.
"""

from __future__ import annotations

import queue
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

POOL_SIZE = 4  # idle connections kept (a replica's page runs share them)
BUSY_TIMEOUT_S = 10
CONNECT_TIMEOUT_S = 5


class StoreUnavailable(Exception):
    """The database cannot be reached: a file that cannot be written, a server that is down or refuses us."""


class Cursor:
    """A DB-API cursor that takes ``?`` placeholders on either database."""

    def __init__(self, cursor: Any, dialect: str) -> None:
        self._cursor = cursor
        self._postgres = dialect == "postgresql"

    def execute(self, sql: str, parameters: tuple[Any, ...] = ()) -> None:
        self._cursor.execute(sql.replace("?", "%s") if self._postgres else sql, parameters)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._cursor.fetchall())

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)


class Database:
    """Short transactions on pooled connections: ``with database.transaction(write=True) as cursor: ...``."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            self.dialect = "sqlite"
            self._path = Path(url.removeprefix("sqlite:///")).expanduser()  # sqlite:///~/classes.sqlite: the home
        elif url.startswith(("postgresql://", "postgres://")):
            self.dialect = "postgresql"
            try:
                import psycopg  # noqa: F401 - only a PostgreSQL store needs the driver
            except ImportError as error:
                raise StoreUnavailable("a PostgreSQL store needs psycopg (pip install -r requirements.txt)") from error
        else:
            raise ValueError(f"a store's URL starts with sqlite:/// or postgresql://, not {url.split(':')[0]!r}")
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue(POOL_SIZE)

    def where(self) -> str:
        """The URL without its password, to show or log."""
        if self.dialect == "sqlite":
            return self.url
        scheme, _, rest = self.url.partition("://")
        credentials, at, place = rest.rpartition("@")
        return f"{scheme}://{credentials.split(':')[0]}{at}{place}" if at else self.url

    def _connect(self) -> Any:
        if self.dialect == "sqlite":
            self._path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(
                self._path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA journal_mode=WAL")  # readers never wait for a writer: replicas share the file
            return connection
        import psycopg

        return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)

    def _driver_errors(self) -> tuple[type[BaseException], ...]:
        if self.dialect == "postgresql":
            import psycopg

            return (psycopg.Error, OSError)
        return (sqlite3.Error, OSError)

    @contextmanager
    def transaction(self, write: bool = False) -> Iterator[Cursor]:
        """A cursor in one transaction (SQLite: ``write`` takes the file's write lock at once, so two writers never
        deadlock upgrading). A driver error closes the connection and becomes StoreUnavailable; any other error
        raised inside rolls back and keeps the connection."""
        try:
            connection = self._idle.get_nowait()
        except queue.Empty:
            connection = None
        try:
            if connection is None:
                connection = self._connect()
            cursor = connection.cursor()
            cursor.execute("BEGIN IMMEDIATE" if write and self.dialect == "sqlite" else "BEGIN")
            try:
                yield Cursor(cursor, self.dialect)
            except self._driver_errors():
                raise
            except Exception:
                cursor.execute("ROLLBACK")
                self._give_back(connection)
                raise
            cursor.execute("COMMIT")
        except self._driver_errors() as error:
            if connection is not None:
                connection.close()
            raise StoreUnavailable(f"the class store ({self.where()}) cannot be reached: {error}") from error
        self._give_back(connection)

    def _give_back(self, connection: Any) -> None:
        try:
            self._idle.put_nowait(connection)
        except queue.Full:
            connection.close()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    def migrate(self, migrations: Sequence[Sequence[str]]) -> None:
        """Bring the schema to ``len(migrations)``, each migration a list of statements applied in order, all in one
        transaction; a database newer than the code is refused."""
        with self.transaction(write=True) as cursor:
            cursor.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            if self.dialect == "postgresql":  # two replicas starting at once: the second waits, then sees it done
                cursor.execute("LOCK TABLE schema_version IN EXCLUSIVE MODE")
            cursor.execute("SELECT version FROM schema_version")
            row = cursor.fetchone()
            current = 0 if row is None else int(row[0])
            if current > len(migrations):
                raise StoreUnavailable(
                    f"the class store ({self.where()}) has schema version {current}, newer than this explorer's "
                    f"{len(migrations)}: update the explorer"
                )
            for statements in migrations[current:]:
                for statement in statements:
                    cursor.execute(statement)
            if row is None:
                cursor.execute("INSERT INTO schema_version (version) VALUES (?)", (len(migrations),))
            elif current < len(migrations):
                cursor.execute("UPDATE schema_version SET version = ?", (len(migrations),))
