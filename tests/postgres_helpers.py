"""A real, throwaway PostgreSQL server for the class-store tests: Debian's package (``postgresql``), a fresh cluster in
a temporary folder, listening on a free local port, stopped and deleted after.

As root (CI's containers), the server runs as the ``postgres`` user the package creates: PostgreSQL refuses to run as
root. Without PostgreSQL the tests that need it skip with the reason, except in CI (CI=true), where .ci/run installs
it and its absence is a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.server import free_port

START_LIMIT_S = 60


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl): on the PATH, else Debian's versioned folder."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    folders = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda f: int(Path(f).parent.name))
    return Path(folders[-1]) if folders else None


def need_postgres() -> Path:
    import pytest

    folder = postgres_bin()
    if folder is None or not (folder / "pg_ctl").exists():
        reason = "PostgreSQL's server (Debian's postgresql package: initdb, pg_ctl) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; in CI .ci/run installs it")
        pytest.skip(reason)
    return folder


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextmanager
def running_postgres() -> Iterator[str]:
    """A new PostgreSQL cluster in a temporary folder (trust authentication, local only); yields its URL, stops and
    deletes it after. The folder is directly under the system's temporary folder: pytest's own are the invoking
    user's alone, and the server's user must reach its data."""
    programs = need_postgres()
    folder = Path(tempfile.mkdtemp(prefix="explorer-postgres-"))
    data = folder / "pgdata"
    data.mkdir(parents=True)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(data, "postgres")
    port = free_port()
    log = folder / "postgres.log"
    subprocess.run(
        _as_server_user([str(programs / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]),
        check=True,
        capture_output=True,
        timeout=START_LIMIT_S,
    )
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={data} -c fsync=off"
    start = [str(programs / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start"]
    started = subprocess.run(_as_server_user(start), capture_output=True, text=True, timeout=START_LIMIT_S)
    if started.returncode != 0:
        raise RuntimeError(f"PostgreSQL did not start: {started.stderr}\n{log.read_text() if log.exists() else ''}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        stop = [str(programs / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
        subprocess.run(_as_server_user(stop), capture_output=True, timeout=START_LIMIT_S)
        shutil.rmtree(folder, ignore_errors=True)
