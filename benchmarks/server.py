"""Starting a real `streamlit run app.py` server (a free port, waiting for /_stcore/health), or several behind nginx
(``python -m deploy.launch``).

Shared by the server benchmarks and the browser test suite (tests/browser_helpers.py, tests/browser/test_replicas.py).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_health(url: str, server: subprocess.Popen, log: Path, limit_s: float) -> None:
    """Return once the server answers /_stcore/health; raise with the end of its log if it dies or never answers."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {server.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"streamlit did not answer /_stcore/health within {limit_s} s:\n{log.read_text()[-4000:]}")


def stop(server: subprocess.Popen, grace_s: float = 20.0) -> None:
    """End a server process: ask it to stop, and kill it if it has not stopped within ``grace_s``."""
    server.terminate()
    try:
        server.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@contextmanager
def lecture_hall(replicas: int, run_dir: Path, env: dict[str, str], limit_s: float = 180.0) -> Iterator[str]:
    """``python -m deploy.launch``: ``replicas`` Streamlit replicas behind nginx on loopback ports, with ``env`` as
    their environment; yields nginx's URL once the launcher says it is serving (every replica answered its health
    check, and nginx its own), stops them all after (SIGTERM, as an operator would) and raises if the launcher did
    not exit cleanly."""
    port = free_port()
    first_replica = free_port()
    log = run_dir / "launcher.log"
    run_dir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "deploy.launch",
        "--replicas", str(replicas),
        "--port", str(port),
        "--address", "127.0.0.1",
        "--first-replica-port", str(first_replica),
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    with log.open("w") as output:
        launcher = subprocess.Popen(command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + limit_s
        while "serving at" not in log.read_text():
            if launcher.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"deploy.launch did not start (code {launcher.poll()}):\n{log.read_text()[-4000:]}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        launcher.send_signal(signal.SIGTERM)
        try:
            code = launcher.wait(timeout=60)
        except subprocess.TimeoutExpired:
            launcher.kill()
            raise RuntimeError(f"deploy.launch did not stop within 60 s:\n{log.read_text()[-4000:]}") from None
    if code != 0:
        raise RuntimeError(f"deploy.launch exited with code {code}:\n{log.read_text()[-4000:]}")
