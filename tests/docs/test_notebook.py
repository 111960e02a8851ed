"""docs/notebook.ipynb: committed without outputs, run by the docs build (test_docs.py checks what it drew)."""

from __future__ import annotations

import nbformat

from tests.helpers import REPO

NOTEBOOK = REPO / "docs" / "notebook.ipynb"


def test_the_notebook_is_committed_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "commit the notebook without outputs: the docs build runs it"
    )
