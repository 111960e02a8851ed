"""The container files (deploy/Dockerfile, deploy/compose.yaml, deploy/nginx-compose.conf) against the repository
they package. No container runs here: this machine has Docker's client but no daemon, and podman installs but pulls
no base image and runs none (docs/deploy.md). These tests keep the files true to the code (paths, ports, the nginx
configuration the launcher writes), and tests/browser/test_replicas.py runs the same nginx set-up for real."""

from __future__ import annotations

import ipaddress
import re

import yaml

from deploy import launch
from tests.helpers import REPO

DEPLOY = REPO / "deploy"


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", dockerfile)
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_image_holds_what_the_app_imports_and_installs_the_runtime_requirements():
    steps = instructions((DEPLOY / "Dockerfile").read_text())
    copied = [arguments.split()[0] for instruction, arguments in steps if instruction == "COPY"]
    assert all((REPO / source).exists() for source in copied), copied
    # every top-level package app.py reaches, and the theme
    packages = {path.parent.name for path in REPO.glob("*/__init__.py")} - {"tests", "benchmarks", "deploy"}
    assert packages | {"app.py", ".streamlit", "checkpoints", "requirements.txt"} <= set(copied)
    runs = " ".join(arguments for instruction, arguments in steps if instruction == "RUN")
    assert "pip install" in runs and "-r requirements.txt" in runs
    assert ("USER", "explorer") in steps  # not root
    assert [i for i, _ in steps].index("USER") > max(
        i for i, (instruction, _) in enumerate(steps) if instruction == "COPY"
    )


def test_the_served_port_is_the_exposed_health_checked_and_proxied_one():
    steps = dict(instructions((DEPLOY / "Dockerfile").read_text()))
    port = steps["EXPOSE"].strip()
    assert f"--server.port={port}" in steps["CMD"]
    assert f"127.0.0.1:{port}/_stcore/health" in steps["HEALTHCHECK"]
    assert all(server.endswith(f":{port}") for server in launch.COMPOSE_SERVERS)


def test_compose_runs_a_replica_per_nginx_server_and_nginx_reads_the_rendered_configuration():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    replicas = {name: service for name, service in services.items() if name != "nginx"}
    addresses = [service["networks"]["hall"]["ipv4_address"] for service in replicas.values()]
    assert sorted(f"{address}:8501" for address in addresses) == sorted(launch.COMPOSE_SERVERS)
    subnet = compose["networks"]["hall"]["ipam"]["config"][0]["subnet"]
    assert all(ipaddress.ip_address(address) in ipaddress.ip_network(subnet) for address in addresses)
    for service in replicas.values():
        build = service["build"]
        assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()
        assert "STREAMLIT_SERVER_COOKIE_SECRET" in service["environment"]  # the same for all (uploads)
        assert service["read_only"] is True and "/tmp" in service["tmpfs"]
        # one class store for all: the same volume where the SQLite store's URL points
        assert "classes:/data" in service["volumes"]
        assert "sqlite:////data/classes.sqlite" in service["environment"]["ATTENTION_EXPLORER_CLASS_STORE"]
    assert "classes" in compose["volumes"]
    assert "mkdir /data && chown explorer /data" in (DEPLOY / "Dockerfile").read_text()
    nginx = services["nginx"]
    assert "./nginx-compose.conf:/etc/nginx/nginx.conf:ro" in nginx["volumes"]
    assert set(nginx["depends_on"]) == set(replicas) and "hall" in nginx["networks"]


def test_the_compose_nginx_configuration_is_the_launchers_template_filled_in():
    assert launch.COMPOSE_CONFIG.read_text() == launch.compose_config(), (
        "deploy/nginx-compose.conf is out of date with deploy/nginx.conf.template: rewrite it with python -c "
        "'from deploy.launch import COMPOSE_CONFIG as c, compose_config; c.write_text(compose_config())'"
    )
