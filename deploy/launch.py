"""Serve the explorer to a lecture hall: several Streamlit replicas behind nginx on one machine.

``python -m deploy.launch --replicas 2 --port 8080`` starts the replicas on loopback ports, waits until each answers
``/_stcore/health``, then runs nginx (Debian's) in front of them on ``--port``: websockets upgraded, each browser
kept on one replica by a cookie, a replica that refuses connections skipped. While it runs it checks every
replica's health and restarts one that exited or stopped answering; its browsers reconnect through nginx to a live
replica and rebuild their page from its URL. Ctrl+C (or SIGTERM) stops nginx and every replica. Logs and the
written nginx configuration are in ``--run-dir``. Why processes and not threads: docs/deploy.md.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).with_name("nginx.conf.template")
REPLICA_ADDRESS = "127.0.0.1"  # replicas answer nginx only
START_LIMIT_S = 120.0  # a replica imports torch and plotly and opens its checkpoint before it answers
CHECK_EVERY_S = 2.0
# A replica busy with a whole class answers its health check late (its sessions' Python holds the lock): only one
# that has not answered for about half a minute (6 checks of up to 5 s, 2 s apart) is taken for hung and restarted.
MISSED_CHECKS_LIMIT = 6
HEALTH_TIMEOUT_S = 5.0
# A replica that fails again before it ever answered (a broken checkpoint folder, a port taken meanwhile) is retried
# after 2, 4, 8, ... s, at most this long, instead of being started again every check.
BACKOFF_LIMIT_S = 60.0
COOKIE_SECRET_ENV = "STREAMLIT_SERVER_COOKIE_SECRET"  # one you set is kept (several machines must share one)


class LaunchError(Exception):
    """What the person launching has to change, in words; nothing is left running when it is raised."""


class StopRequested(Exception):
    """SIGTERM or Ctrl+C: stop everything and exit cleanly."""


@dataclass(frozen=True)
class Plan:
    replicas: int
    address: str  # where nginx listens for browsers
    port: int
    replica_ports: tuple[int, ...]
    run_dir: Path
    nginx: str
    threads: int = 1  # PyTorch's intra-op threads per page run in each replica (OMP_NUM_THREADS)


@dataclass
class Replica:
    port: int
    log: Path
    command: list[str]
    environment: dict[str, str]
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    answered: bool = False  # answered a health check since it was (re)started
    missed: int = 0
    restarts: int = 0
    failed_starts: int = 0  # restarts in a row of a replica that had not answered since its start
    retry_at: float = 0.0  # no restart before this time (backing off)
    output: IO[str] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{REPLICA_ADDRESS}:{self.port}"

    def start(self) -> None:
        self.output = self.log.open("a")
        self.process = subprocess.Popen(
            self.command, cwd=REPO, env=self.environment, stdout=self.output, stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl+C reaches the launcher, which stops the replicas in order
        )  # fmt: skip
        self.started_at, self.answered, self.missed = time.monotonic(), False, 0

    def stop(self, grace_s: float = 15.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.output is not None:
            self.output.close()
            self.output = None

    def log_tail(self, characters: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-characters:] if self.log.exists() else "(no log)"


def answers(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    """Whether ``url`` answers 200 within ``timeout_s``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def port_in_use(address: str, port: int) -> bool:
    """Whether something already listens on ``address:port``, tried by binding it as the servers will (a port that
    only closed connections linger on is free to them)."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return True
    return False


def find_nginx(named: str | None) -> str:
    """The nginx binary: the one named, else nginx on PATH, else Debian's /usr/sbin/nginx (not on a user's PATH)."""
    if named:
        found = shutil.which(named)
        if found is None:
            raise LaunchError(f"--nginx {named}: no such program. Install nginx (Debian: apt-get install nginx).")
        return found
    found = shutil.which("nginx") or shutil.which("/usr/sbin/nginx")
    if found is None:
        raise LaunchError(
            "nginx was not found (on PATH or as /usr/sbin/nginx). Install it (Debian: apt-get install nginx) "
            "or name it with --nginx PATH."
        )
    return found


def make_plan(args: argparse.Namespace) -> Plan:
    """Check the request before anything starts; raise LaunchError naming what to change."""
    if args.replicas < 1:
        raise LaunchError(f"--replicas {args.replicas}: at least one replica is needed.")
    threads = args.threads if args.threads is not None else int(os.environ.get("OMP_NUM_THREADS") or 1)
    if threads < 1:
        raise LaunchError(f"--threads {threads}: a page run needs at least one thread.")
    first = args.first_replica_port or args.port + 1
    replica_ports = tuple(range(first, first + args.replicas))
    if not 0 < args.port < 65536 or not 0 < first or replica_ports[-1] > 65535:
        raise LaunchError(
            f"ports must be between 1 and 65535 (--port {args.port}, replicas {first} to {replica_ports[-1]})."
        )
    if args.port in replica_ports:
        raise LaunchError(f"--port {args.port} is also a replica's port: choose --first-replica-port outside it.")
    nginx = find_nginx(args.nginx)
    if port_in_use(args.address, args.port):
        raise LaunchError(f"port {args.port} on {args.address} is already in use: choose another with --port.")
    busy = [port for port in replica_ports if port_in_use(REPLICA_ADDRESS, port)]
    if busy:
        raise LaunchError(
            f"replica port{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))} already in use: choose "
            f"another range with --first-replica-port (the replicas use {args.replicas} ports from it)."
        )
    return Plan(args.replicas, args.address, args.port, replica_ports, args.run_dir.resolve(), nginx, threads)


def nginx_config(
    run_dir: Path | str, temp_dir: Path | str, listen: str, servers: list[str], access_log: str, error_log: str
) -> str:
    """The template filled in: nginx's pid file in ``run_dir`` and its buffered bodies in ``temp_dir``, listening on
    ``listen`` (a port, or address:port), in front of ``servers`` (IP:port each, as nginx reports the address that
    answered)."""
    failover = "max_fails=1 fail_timeout=5s"
    groups = []
    for index, server in enumerate(servers, start=1):
        backups = [f"        server {other} backup;" for other in servers[index:] + servers[: index - 1]]
        groups.append(
            "\n".join([f"    upstream replica_{index} {{", f"        server {server} {failover};", *backups, "    }"])
        )
    fields = {
        "RUN_DIR": str(run_dir),
        "TEMP_DIR": str(temp_dir),
        "LISTEN": listen,
        "ROUTES": "\n".join(f'        "{server}" replica_{index};' for index, server in enumerate(servers, start=1)),
        "SERVERS": "\n".join(f"        server {server} {failover};" for server in servers),
        "REPLICA_UPSTREAMS": "\n".join(groups),
        "ACCESS_LOG": access_log,
        "ERROR_LOG": error_log,
    }
    text = TEMPLATE.read_text()
    for name, value in fields.items():
        text = text.replace(f"@@{name}@@", value)
    return text


def plan_config(plan: Plan, temp_dir: Path) -> str:
    """The configuration the launcher runs nginx with: its files in the run folder (bodies in ``temp_dir``), the
    replicas on loopback."""
    listen = f"[{plan.address}]:{plan.port}" if ":" in plan.address else f"{plan.address}:{plan.port}"
    return nginx_config(
        plan.run_dir,
        temp_dir,
        listen,
        [f"{REPLICA_ADDRESS}:{port}" for port in plan.replica_ports],
        str(plan.run_dir / "nginx-access.log"),
        str(plan.run_dir / "nginx-error.log"),
    )


# compose.yaml's replicas, by their fixed addresses there (nginx reports the address that answered, which the
# stickiness cookie records); its nginx reads COMPOSE_CONFIG, this template filled in for them
COMPOSE_SERVERS = ["172.28.0.11:8501", "172.28.0.12:8501"]
COMPOSE_CONFIG = Path(__file__).with_name("nginx-compose.conf")


def compose_config() -> str:
    """What COMPOSE_CONFIG holds: nginx in its own container, on port 80, logging to the container's output."""
    return nginx_config("/tmp", "/tmp", "80", COMPOSE_SERVERS, "/dev/stdout", "/dev/stderr")


def nginx_command(plan: Plan, *extra: str) -> list[str]:
    config = plan.run_dir / "nginx.conf"
    return [
        plan.nginx, "-p", str(plan.run_dir), "-e", str(plan.run_dir / "nginx-error.log"), "-c", str(config),
        "-g", "daemon off;", *extra,
    ]  # fmt: skip


def replica_command(port: int) -> list[str]:
    return [
        sys.executable, "-m", "streamlit", "run", str(REPO / "app.py"),
        "--server.headless", "true",
        "--server.address", REPLICA_ADDRESS,
        "--server.port", str(port),
        "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def wait_until_healthy(replicas: list[Replica], limit_s: float) -> None:
    """Return when every replica answers /_stcore/health; raise LaunchError with the log of one that died or never
    answered."""
    deadline = time.monotonic() + limit_s
    waiting = list(replicas)
    while waiting:
        for replica in list(waiting):
            if replica.process.poll() is not None:
                raise LaunchError(
                    f"the replica on port {replica.port} exited with code {replica.process.returncode} while "
                    f"starting; the end of {replica.log}:\n{replica.log_tail()}"
                )
            if answers(f"{replica.url}/_stcore/health"):
                replica.answered = True
                waiting.remove(replica)
        if waiting and time.monotonic() > deadline:
            raise LaunchError(
                f"the replica on port {waiting[0].port} did not answer /_stcore/health within {limit_s:.0f} s; "
                f"the end of {waiting[0].log}:\n{waiting[0].log_tail()}"
            )
        time.sleep(0.5)


def check_replicas(replicas: list[Replica], now: Callable[[], float] = time.monotonic) -> bool:
    """One round of health checks: restart a replica that exited, that stopped answering for MISSED_CHECKS_LIMIT
    checks in a row, or that never answered within START_LIMIT_S of its start; one that keeps failing before it
    ever answers is retried less and less often (up to BACKOFF_LIMIT_S). Returns whether one was restarted."""
    restarted = False
    for replica in replicas:
        reason = None
        if replica.process.poll() is not None:
            reason = f"exited with code {replica.process.returncode}"
        elif answers(f"{replica.url}/_stcore/health"):
            replica.answered, replica.missed = True, 0
        elif replica.answered:
            replica.missed += 1
            if replica.missed >= MISSED_CHECKS_LIMIT:
                reason = f"missed {replica.missed} health checks in a row"
        elif now() - replica.started_at > START_LIMIT_S:
            reason = f"did not answer within {START_LIMIT_S:.0f} s of its start"
        if reason is None or now() < replica.retry_at:
            continue
        replica.failed_starts = 0 if replica.answered else replica.failed_starts + 1
        replica.restarts += 1
        note = ""
        if replica.failed_starts:
            delay = min(BACKOFF_LIMIT_S, 2.0**replica.failed_starts)
            replica.retry_at = now() + delay
            note = f"; it has not answered since its last start: if it fails again, the next try waits {delay:.0f} s"
        say(f"replica on port {replica.port} {reason}: restarting it (restart {replica.restarts}){note}")
        replica.stop(grace_s=5.0)
        replica.start()
        restarted = True
    return restarted


def replica_environment(plan: Plan) -> dict[str, str]:
    """What every replica runs with: this environment, one cookie secret for all (Streamlit takes it from the
    environment only: a page that moves to another replica keeps a valid upload cookie), and the plan's threads
    per page run (app.py leaves an OMP_NUM_THREADS it is given as it is)."""
    return {COOKIE_SECRET_ENV: secrets.token_hex(32), **os.environ, "OMP_NUM_THREADS": str(plan.threads)}


def record_processes(run_dir: Path, replicas: list[Replica]) -> None:
    """replicas.json in the run folder: each replica's port and process id, for an operator (or a test) to find."""
    table = {str(replica.port): replica.process.pid for replica in replicas}
    (run_dir / "replicas.json").write_text(json.dumps(table, indent=1) + "\n")


def serve(plan: Plan) -> int:
    """Start the replicas and nginx, watch them until asked to stop, then stop them all."""
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    # enterable by anyone, listable by none: nginx makes its folders inside, owned by its workers' user
    temp_dir = Path(tempfile.mkdtemp(prefix="attention-explorer-nginx-"))
    temp_dir.chmod(0o711)
    (plan.run_dir / "nginx.conf").write_text(plan_config(plan, temp_dir))
    tested = subprocess.run(nginx_command(plan, "-t"), capture_output=True, text=True)
    if tested.returncode != 0:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise LaunchError(f"nginx refused the configuration {plan.run_dir / 'nginx.conf'}:\n{tested.stderr.strip()}")
    environment = replica_environment(plan)
    replicas = [
        Replica(port, plan.run_dir / f"replica-{port}.log", replica_command(port), environment)
        for port in plan.replica_ports
    ]
    nginx: subprocess.Popen | None = None

    def stop_requested(*_: object) -> None:
        raise StopRequested

    signal.signal(signal.SIGTERM, stop_requested)
    signal.signal(signal.SIGINT, stop_requested)
    try:
        say(
            f"starting {plan.replicas} replica(s) on ports {', '.join(map(str, plan.replica_ports))}, "
            f"{plan.threads} thread(s) per page run ..."
        )
        for replica in replicas:
            replica.start()
        record_processes(plan.run_dir, replicas)
        wait_until_healthy(replicas, START_LIMIT_S)
        with (plan.run_dir / "nginx-output.log").open("a") as nginx_output:
            nginx = subprocess.Popen(
                nginx_command(plan), stdout=nginx_output, stderr=subprocess.STDOUT, start_new_session=True
            )
        local = plan.address not in ("0.0.0.0", "::")
        host = (f"[{plan.address}]" if ":" in plan.address else plan.address) if local else "127.0.0.1"
        deadline = time.monotonic() + 10
        while not answers(f"http://{host}:{plan.port}/nginx-health"):
            if nginx.poll() is not None or time.monotonic() > deadline:
                raise LaunchError(f"nginx did not start; see {plan.run_dir / 'nginx-error.log'}")
            time.sleep(0.2)
        shown = host if local else socket.getfqdn()
        say(f"serving at http://{shown}:{plan.port}/ (logs in {plan.run_dir}); Ctrl+C stops everything")
        while True:
            time.sleep(CHECK_EVERY_S)
            if nginx.poll() is not None:
                raise LaunchError(f"nginx exited with code {nginx.returncode}; see {plan.run_dir / 'nginx-error.log'}")
            if check_replicas(replicas):
                record_processes(plan.run_dir, replicas)
    except StopRequested:
        say("stopping ...")
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl+C must not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if nginx is not None and nginx.poll() is None:
            nginx.terminate()  # nginx's fast shutdown
            try:
                nginx.wait(timeout=10)
            except subprocess.TimeoutExpired:
                nginx.kill()
        for replica in replicas:
            replica.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.launch",
        description="Serve the explorer from several Streamlit replicas behind nginx on this machine.",
    )
    parser.add_argument("--replicas", type=int, default=2, help="Streamlit processes (about one per core)")
    parser.add_argument("--port", type=int, default=8080, help="the port browsers open (nginx's)")
    parser.add_argument("--address", default="0.0.0.0", help="where nginx listens (0.0.0.0: every interface)")
    parser.add_argument(
        "--first-replica-port", type=int, help="the first of the replicas' loopback ports (default: --port + 1)"
    )
    parser.add_argument("--run-dir", type=Path, default=REPO / "runs" / "deploy", help="logs and nginx's files")
    parser.add_argument("--nginx", help="the nginx program (default: nginx on PATH, else /usr/sbin/nginx)")
    parser.add_argument(
        "--threads",
        type=int,
        help="PyTorch threads per page run in each replica (default: OMP_NUM_THREADS, else 1; docs/deploy.md)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return serve(make_plan(args))
    except LaunchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
