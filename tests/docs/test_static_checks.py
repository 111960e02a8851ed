"""The static checks pass: mypy over model/ and viz/ (``[tool.mypy]`` in pyproject.toml), ruff check and ruff format
over the repository (``[tool.ruff]``). The pre-commit hooks run the same checks on every commit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO


def run_module(*arguments: str) -> subprocess.CompletedProcess[str]:
    """``python -m ARGUMENTS`` in the repository root, with the interpreter running the tests."""
    return subprocess.run(
        [sys.executable, "-m", *arguments], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow  # 13-15 s from a cold cache (CI, a fresh clone); the pre-commit hook runs it on every commit
def test_mypy_finds_no_type_errors_in_the_model_and_the_figures():
    result = run_module("mypy")
    assert result.returncode == 0, f"python -m mypy:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("command", [("check",), ("format", "--check")], ids=["check", "format"])
def test_ruff_passes(command):
    result = run_module("ruff", *command, ".")
    assert result.returncode == 0, f"ruff {' '.join(command)} .:\n{result.stdout}{result.stderr}"
