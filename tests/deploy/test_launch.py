"""The lecture-hall launcher (deploy/launch.py): bad requests refused before anything starts, the nginx
configuration it writes accepted by nginx, and its health checks restarting a replica that exited or stopped
answering. Quick: no Streamlit starts here (a stand-in answers /_stcore/health); the real replicas behind a real
nginx, with browsers, are tests/browser/test_replicas.py (slow)."""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks.server import free_port
from deploy import launch
from tests.browser_helpers import need_nginx
from tests.helpers import REPO


def run_launcher(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deploy.launch", *arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_fewer_than_one_replica_is_refused_before_anything_starts(tmp_path):
    run_dir = tmp_path / "run"
    result = run_launcher("--replicas", "0", "--port", str(free_port()), "--run-dir", str(run_dir))
    assert result.returncode == 2
    assert "--replicas 0: at least one replica is needed" in result.stderr
    assert not run_dir.exists()


def test_each_replica_runs_its_page_runs_on_the_threads_asked(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    arguments = ["--port", str(free_port()), "--run-dir", str(tmp_path), "--nginx", "/bin/true"]
    default = launch.make_plan(launch.build_parser().parse_args(arguments))
    assert launch.replica_environment(default)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # an operator's setting is the default
    assert launch.make_plan(launch.build_parser().parse_args(arguments)).threads == 3
    asked = launch.make_plan(launch.build_parser().parse_args([*arguments, "--threads", "2"]))
    environment = launch.replica_environment(asked)
    assert environment["OMP_NUM_THREADS"] == "2" and environment[launch.COOKIE_SECRET_ENV]
    result = run_launcher("--threads", "0", "--port", str(free_port()), "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and "--threads 0" in result.stderr


def test_a_busy_port_is_named_and_nothing_starts(tmp_path):
    need_nginx()
    run_dir = tmp_path / "run"
    first_replica = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        result = run_launcher(
            "--port", str(busy), "--address", "127.0.0.1", "--first-replica-port", str(first_replica),
            "--run-dir", str(run_dir),
        )  # fmt: skip
        assert result.returncode == 2
        assert f"port {busy} on 127.0.0.1 is already in use: choose another with --port" in result.stderr
        assert not run_dir.exists() and not listening(first_replica)

        # the same for a replica's port
        result = run_launcher(
            "--replicas", "2", "--port", str(free_port()), "--first-replica-port", str(busy - 1),
            "--run-dir", str(run_dir),
        )  # fmt: skip
    assert result.returncode == 2
    assert f"replica port {busy} already in use" in result.stderr and "--first-replica-port" in result.stderr
    assert not run_dir.exists()


def test_the_nginx_port_may_not_be_a_replica_port(tmp_path):
    port = free_port()
    result = run_launcher("--port", str(port), "--first-replica-port", str(port - 1), "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 2 and f"--port {port} is also a replica's port" in result.stderr


def test_a_missing_nginx_is_named_with_how_to_install_it(tmp_path, monkeypatch):
    result = run_launcher("--nginx", str(tmp_path / "no-nginx"), "--port", str(free_port()))
    assert result.returncode == 2
    assert (
        f"--nginx {tmp_path / 'no-nginx'}: no such program" in result.stderr
        and "apt-get install nginx" in result.stderr
    )

    monkeypatch.setattr(launch.shutil, "which", lambda name: None)  # nothing on PATH, nor /usr/sbin/nginx
    with pytest.raises(launch.LaunchError, match=r"nginx was not found .* or name it with --nginx PATH"):
        launch.find_nginx(None)


def test_the_written_configuration_is_accepted_by_nginx_and_names_every_replica(tmp_path):
    nginx = need_nginx()
    ports = (free_port(), free_port(), free_port())
    plan = launch.Plan(3, "127.0.0.1", free_port(), ports, tmp_path, nginx)
    (tmp_path / "temp").mkdir()
    config = launch.plan_config(plan, tmp_path / "temp")
    (tmp_path / "nginx.conf").write_text(config)
    assert "@@" not in config
    addresses = [f"127.0.0.1:{port}" for port in ports]
    groups = dict(re.findall(r"upstream (\w+) \{(.*?)\}", config, re.S))
    servers = {name: re.findall(r"server (\S+)( backup)?", body) for name, body in groups.items()}
    assert servers["explorer"] == [(address, "") for address in addresses]  # a new browser: any replica
    for index, address in enumerate(addresses, start=1):  # a known browser: its replica, the others if it is down
        assert servers[f"replica_{index}"][0] == (address, "")
        assert sorted(servers[f"replica_{index}"][1:]) == sorted(
            (other, " backup") for other in addresses if other != address
        )
        assert f'"{address}" replica_{index};' in config  # the cookie that names it leads to its group
    assert f"listen 127.0.0.1:{plan.port};" in config
    tested = subprocess.run(launch.nginx_command(plan, "-t"), capture_output=True, text=True)
    assert tested.returncode == 0, tested.stderr


# --- health checks, against a stand-in that answers /_stcore/health as a replica does ---


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        self.send_response(200 if self.path == "/_stcore/health" else 404)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def answering(port: int):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def sleeper(tmp_path: Path, port: int) -> launch.Replica:
    """A replica whose process is a sleep (its health is answered, or not, by the stand-in server)."""
    replica = launch.Replica(
        port, tmp_path / f"replica-{port}.log", [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ)
    )
    replica.start()
    return replica


def test_a_replica_that_exited_is_restarted(tmp_path, capsys):
    replica = sleeper(tmp_path, free_port())
    try:
        first = replica.process
        first.kill()
        first.wait()
        assert launch.check_replicas([replica]) is True
        assert replica.restarts == 1 and replica.process is not first and replica.process.poll() is None
        assert (
            f"replica on port {replica.port} exited with code -9: restarting it (restart 1)" in capsys.readouterr().err
        )
    finally:
        replica.stop()


def test_a_replica_that_stops_answering_is_restarted_on_the_third_missed_check(tmp_path, capsys):
    port = free_port()
    replica = sleeper(tmp_path, port)
    try:
        with answering(port):
            assert launch.check_replicas([replica]) is False
        assert replica.answered and replica.missed == 0
        process = replica.process
        for missed in range(1, launch.MISSED_CHECKS_LIMIT):
            assert launch.check_replicas([replica]) is False
            assert replica.missed == missed and replica.process is process  # not yet: a busy moment is not death
        assert launch.check_replicas([replica]) is True
        assert replica.process is not process and process.poll() is not None  # the old one stopped
        assert f"missed {launch.MISSED_CHECKS_LIMIT} health checks in a row: restarting it" in capsys.readouterr().err
    finally:
        replica.stop()


def test_a_starting_replica_gets_its_start_limit_before_it_is_restarted(tmp_path):
    replica = sleeper(tmp_path, free_port())
    try:
        process = replica.process
        for _ in range(launch.MISSED_CHECKS_LIMIT + 1):  # never answered yet: still starting, not missing checks
            assert launch.check_replicas([replica], now=lambda: replica.started_at + 1) is False
        assert replica.process is process and replica.missed == 0
        assert launch.check_replicas([replica], now=lambda: replica.started_at + launch.START_LIMIT_S + 1) is True
        assert replica.process is not process
    finally:
        replica.stop()


def test_a_replica_that_keeps_failing_before_it_answers_is_retried_less_and_less_often(tmp_path, capsys):
    replica = launch.Replica(
        free_port(), tmp_path / "broken.log", [sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ)
    )

    def check_at(moment: float) -> bool:
        replica.process.wait()  # it exits at once, every time
        return launch.check_replicas([replica], now=lambda: moment)

    replica.start()
    try:
        replica.answered = True  # as if it had run well, then died: restarted at once
        assert check_at(1000.0) is True and replica.retry_at == 0.0
        assert check_at(1000.0) is True  # died before answering: restarted, and the next try waits 2 s
        assert check_at(1001.9) is False
        assert check_at(1002.0) is True  # then 4 s
        assert check_at(1005.9) is False
        assert check_at(1006.0) is True
        assert replica.retry_at == 1014.0 and replica.restarts == 4
        replica.failed_starts = 20
        assert check_at(1014.0) is True and replica.retry_at == 1014.0 + launch.BACKOFF_LIMIT_S  # never longer
        assert "it has not answered since its last start: if it fails again, the next try waits 4 s" in (
            capsys.readouterr().err
        )
    finally:
        replica.stop()


def test_the_process_table_names_each_replicas_port_and_pid(tmp_path):
    replicas = [sleeper(tmp_path, free_port()) for _ in range(2)]
    try:
        launch.record_processes(tmp_path, replicas)
        assert json.loads((tmp_path / "replicas.json").read_text()) == {
            str(replica.port): replica.process.pid for replica in replicas
        }
    finally:
        for replica in replicas:
            replica.stop()
