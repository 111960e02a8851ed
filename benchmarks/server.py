"""Starting a real `streamlit run app.py` server: a free port and waiting for /_stcore/health.

Shared by the server-memory benchmark and the browser test suite (tests/helpers.py).
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


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
