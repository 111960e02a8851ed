"""The import rules of docs/architecture.md, read from the source: each layer imports only what lies below it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

# The thin `python -m model.X` entry points run a part of model/ that lies above them (model.train runs training).
ENTRY_POINTS = {"model/train.py", "model/evaluate.py", "model/import_marian.py", "model/translate.py"}


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function, TYPE_CHECKING blocks left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    checking_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for statement in block.body
        for node in ast.walk(statement)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in checking_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def breaches(folder: str, forbidden: tuple[str, ...], skip: set[str] = frozenset()) -> dict[str, list[str]]:
    """Files under ``folder`` that import a module in (or under) ``forbidden``, with what they import."""
    found = {}
    for path in sorted((REPO / folder).rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        if name in skip:
            continue
        bad = sorted(m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in forbidden))
        if bad:
            found[name] = bad
    return found


def test_the_model_never_imports_the_page_or_the_figures():
    assert breaches("model", ("streamlit", "plotly", "viz", "explorer")) == {}


def test_viz_never_imports_streamlit_the_page_or_torch():
    assert breaches("viz", ("streamlit", "explorer", "torch", "model.checkpoint", "model.translator")) == {}


def test_the_model_core_never_imports_the_analyses_or_training():
    core = {p.relative_to(REPO).as_posix() for p in (REPO / "model").glob("*.py")} - ENTRY_POINTS
    interop = {p.relative_to(REPO).as_posix() for p in (REPO / "model" / "interop").glob("*.py")}
    every = {p.relative_to(REPO).as_posix() for p in (REPO / "model").rglob("*.py")}
    assert breaches("model", ("model.analysis", "model.training"), skip=every - core - interop) == {}


def test_the_launcher_runs_the_app_without_importing_it():
    assert breaches("deploy", ("model", "explorer", "viz", "app", "torch", "streamlit", "plotly")) == {}


def test_analyses_never_import_training():
    assert breaches("model/analysis", ("model.training",)) == {}


def test_the_translator_has_no_analysis_methods():
    """Analyses take the translator (docs/architecture.md, "One pattern for an analysis")."""
    tree = ast.parse((REPO / "model" / "translator.py").read_text(encoding="utf-8"))
    translator = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Translator")
    methods = {n.name for n in translator.body if isinstance(n, ast.FunctionDef)}
    assert not methods & {"attribute", "attention_stages", "head_importance", "compare_ablation"}


def test_the_check_sees_imports_inside_functions_and_not_type_checking_blocks(tmp_path):
    source = tmp_path / "pkg" / "module.py"
    source.parent.mkdir()
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from model.training import train\n"
        "def late():\n    from model.training.data import read_lines\n"
        "import streamlit as st\n"
    )
    assert imported_modules(source) == {"typing", "model.training.data", "streamlit"}
