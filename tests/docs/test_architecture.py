"""docs/architecture.md checked against the source: each layer imports only what lies below it (the import rules),
and its Layout block names every module (the layout is described there and nowhere else)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import REPO

# The thin `python -m model.X` entry points run a part of model/ that lies above them (model.train runs training).
ENTRY_POINTS = {
    "model/train.py",
    "model/evaluate.py",
    "model/import_hf.py",
    "model/import_marian.py",
    "model/translate.py",
}


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
    for package in ("decoding", "interop"):
        core |= {p.relative_to(REPO).as_posix() for p in (REPO / "model" / package).glob("*.py")}
    every = {p.relative_to(REPO).as_posix() for p in (REPO / "model").rglob("*.py")}
    assert breaches("model", ("model.analysis", "model.training"), skip=every - core) == {}


def test_the_model_keeps_its_top_level_short():
    """model/ groups its modules by idea (the network, decoding, the commands, analysis, training, interop), so that
    a newcomer reads its top level at a glance: the network and what runs it in at most 11 modules, beside the
    public commands (``python -m model.NAME`` needs them at the top)."""
    top_level = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "model").glob("*.py"))
    network = [name for name in top_level if name not in ENTRY_POINTS and name != "model/__init__.py"]
    assert len(network) <= 11, network


def test_plain_data_modules_load_without_torch():
    """A Trace and its settings, a beam tree and its scoring are plain data: viz and a notebook read them without
    the model's runtime (and a package's __init__ must not import torch behind their back)."""
    code = (
        "import sys; import model.trace, model.decoding.beam_tree, model.decoding.scoring, model.decoding.sampling, "
        "model.heads; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


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


# The folders whose every module the Layout block names (benchmarks/README.md describes the benchmarks instead).
LAID_OUT = ("explorer", "model", "viz", "deploy")
PY_FILE = re.compile(r"\w+\.py")
# A module named in the line that opens a folder: `name.py` or a bare `name`, not a part of a dotted or slashed name
# (`python -m model.train` does not name train.py, `views/__init__.py` does not name a module `views`).
NAMED_IN_FOLDER_LINE = re.compile(r"(?<![\w/])(?<!\w\.)(\w+)(?:\.py)?(?![\w/]|\.\w)")


@dataclass
class Layout:
    """What the Layout block lists, by folder ("" for the top level, else "model/analysis/"): ``names``, every module
    it names (without .py); ``entries``, the files its entries start with (``state.py  every URL-bound...``)."""

    names: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    entries: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


def layout_block(markdown: str) -> list[str]:
    """The lines of the code block under "## Layout"."""
    section = markdown.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert block, "docs/architecture.md has no code block under ## Layout"
    return block.group(1).splitlines()


def read_layout(lines: list[str]) -> Layout:
    """Read the block as a tree: an entry (``name/`` for a folder, else files) sits 2 columns right of the folder it is
    in, and a line indented further continues the entry above it. A folder's modules are the files its entries start
    with, and the names in the line that opens it (continuations included); a file entry's description names
    nothing, so a common word there ("tokens", "export") cannot stand in for a module of that name."""
    layout = Layout()
    folders: list[tuple[int, str]] = []  # (indent, path) of the folders the current line is in
    entry_indent = None
    opened = None  # the folder whose own line is being read; None in a file entry
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is not None and indent > entry_indent + 2:
            if opened is not None:
                layout.names[opened].update(NAMED_IN_FOLDER_LINE.findall(line))
            continue
        entry_indent = indent
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        head, _, description = line.strip().partition(" ")
        if head.endswith("/"):
            opened = parent + head
            folders.append((indent, opened))
            layout.names[opened].update(NAMED_IN_FOLDER_LINE.findall(description))
            continue
        opened = None
        for token in line.split():
            if not PY_FILE.fullmatch(token):
                break
            layout.entries[parent].add(token)
            layout.names[parent].add(token.removesuffix(".py"))
    return layout


def unnamed_modules(layout: Layout, root: Path, folders: tuple[str, ...]) -> list[str]:
    """The modules under ``folders`` (``__init__.py`` left out) that ``layout`` does not name in their folder."""
    missing = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            parent = name.rpartition("/")[0] + "/"
            if path.name != "__init__.py" and path.stem not in layout.names[parent]:
                missing.append(name)
    return missing


def missing_entries(layout: Layout, root: Path) -> list[str]:
    """The files the block's entries name that do not exist (a module renamed or removed, the block left behind)."""
    return sorted(
        f"{folder}{name}"
        for folder, names in layout.entries.items()
        for name in names
        if not (root / folder / name).is_file()
    )


def the_layout() -> Layout:
    return read_layout(layout_block((REPO / "docs" / "architecture.md").read_text(encoding="utf-8")))


def test_the_layout_names_every_module():
    missing = unnamed_modules(the_layout(), REPO, LAID_OUT)
    assert not missing, (
        f"The Layout block of docs/architecture.md does not name {', '.join(missing)}: "
        "list each in its folder's lines, as name.py with what it is for"
    )


def test_every_file_the_layout_lists_exists():
    stale = missing_entries(the_layout(), REPO)
    assert not stale, f"The Layout block of docs/architecture.md lists {', '.join(stale)}, which do not exist"


LAYOUT_SAMPLE = """\
app.py              the entry point
pkg/                the package, python -m pkg.train is its command
  core.py other.py    the core and the other part; export and tokens are words here
  sub/                parts of it: alpha, beta,
                      gamma (gamma.py: the third); see sub/__init__.py
    deep/               one more level
      leaf.py             a leaf
    delta.py            a file of sub after deep/
  last.py             a file of pkg after sub/
"""


def test_the_layout_reading_follows_folders_and_ignores_words_in_descriptions():
    layout = read_layout(LAYOUT_SAMPLE.splitlines())
    assert layout.names[""] == {"app"}
    assert layout.entries["pkg/"] == {"core.py", "other.py", "last.py"}
    assert {"core", "other", "last", "package"} <= layout.names["pkg/"]
    assert not {"export", "tokens", "train", "pkg", "leaf", "delta"} & layout.names["pkg/"]
    assert {"alpha", "beta", "gamma", "delta"} <= layout.names["pkg/sub/"]
    assert not {"__init__", "sub", "leaf", "last"} & layout.names["pkg/sub/"]
    assert layout.names["pkg/sub/deep/"] == {"one", "more", "level", "leaf"}


def test_the_layout_check_names_a_missing_module_and_a_stale_entry(tmp_path):
    for name in (
        "app.py",
        "pkg/__init__.py",
        "pkg/core.py",
        "pkg/export.py",
        "pkg/train.py",
        "pkg/sub/alpha.py",
        "pkg/sub/gamma.py",
        "pkg/sub/deep/leaf.py",
        "pkg/sub/delta.py",
        "pkg/last.py",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    layout = read_layout(LAYOUT_SAMPLE.splitlines())
    # export.py is only a word in core.py's description, train.py only a part of pkg.train
    assert unnamed_modules(layout, tmp_path, ("pkg",)) == ["pkg/export.py", "pkg/train.py"]
    assert missing_entries(layout, tmp_path) == ["pkg/other.py"]


LONGEST_MODULE = 450  # lines; a longer module holds more than one idea: split it by idea (docs/architecture.md)


def test_no_module_of_the_app_is_longer_than_one_idea():
    """Every module of the app, the model, the figures, the launcher and the benchmarks stays within LONGEST_MODULE
    lines (the tests are not counted: a test file follows the module it tests)."""
    folders = ("model", "viz", "explorer", "deploy", "benchmarks")
    paths = [REPO / "app.py", *(path for folder in folders for path in sorted((REPO / folder).rglob("*.py")))]
    lengths = {path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines()) for path in paths}
    assert {name: lines for name, lines in lengths.items() if lines > LONGEST_MODULE} == {}
