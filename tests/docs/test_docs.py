"""The README stays a short entry, every relative link in it and in docs/ resolves, and the docs site builds."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.helpers import REPO

README_MAX_LINES = 200
# the notebook's figures: cross-attention heatmap, encoder grid, head view, attribution maps, logit lens, training
# curves, alignment
NOTEBOOK_FIGURES = 7
# [text](target) and ![alt](target), not inside code; the target up to its first space or ')'.
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s[^)]*)?\)")
FENCED_CODE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The link targets of a Markdown text that point inside the repository (no scheme, no bare anchor)."""
    prose = INLINE_CODE.sub("", FENCED_CODE.sub("", text))
    targets = [match.group(1) for match in MARKDOWN_LINK.finditer(prose)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """The relative links of ``path`` whose file is missing or lies outside ``root``."""
    broken = []
    for target in relative_links(path.read_text(encoding="utf-8")):
        resolved = (path.parent / unquote(target.split("#", 1)[0])).resolve()
        if not resolved.exists():
            broken.append(target)
        elif not resolved.is_relative_to(root):
            broken.append(f"{target} (outside the repository)")
    return broken


def test_the_readme_is_a_short_entry():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; details belong in docs/"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path):
    assert path.exists()
    assert broken_links(path) == []


def test_the_link_check_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](page.md) [gone](missing.md#part) `[code](nowhere.md)` [web](https://example.org) [here](#top)\n"
        "```\n[fenced](nowhere.md)\n```\n"
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "up.md").write_text("[outside](../../elsewhere.md) [fine](../page.md)\n")
    assert broken_links(page, root=tmp_path) == ["missing.md#part"]
    assert broken_links(tmp_path / "docs" / "up.md", root=tmp_path / "docs") == [
        "../../elsewhere.md",
        "../page.md (outside the repository)",
    ]


def test_the_readme_states_both_test_tiers():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert 'python -m pytest -m "not slow"' in readme
    assert "pip install -r requirements-dev.txt && python -m pytest" in readme


def test_ci_runs_the_readmes_test_command():
    command = "pip install -r requirements-dev.txt && python -m pytest"
    assert command in (REPO / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_docs_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: no broken link, no missing page, no docstring the API pages cannot render; and the
    notebook, which the build runs from a fresh kernel (mkdocs.yml: execute, no errors allowed), drew every figure it
    promises."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs, "mkdocs is not installed (pip install -r requirements-dev.txt)"
    built = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "index.html").exists()
    notebook = (tmp_path / "site" / "notebook" / "index.html").read_text(encoding="utf-8")
    assert notebook.count("Plotly.newPlot") == NOTEBOOK_FIGURES
    assert "Mann" in notebook and "Hemd" in notebook  # "A man in a blue shirt ..." translated to German


def test_the_readmes_python_example_runs(tmp_path, monkeypatch):
    """The README's first Python block, run as written from a folder that has the shipped checkpoints."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    example = re.search(r"^```python\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    assert example, "README.md has no Python example"
    (tmp_path / "checkpoints").symlink_to(REPO / "checkpoints")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(example.group(1), "README.md", "exec"), namespace)
    assert namespace["logits"].shape[-1] == namespace["model"].config.tgt_vocab_size
    assert (tmp_path / "trace.json").exists()
