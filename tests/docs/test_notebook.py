"""docs/notebook.ipynb runs from a fresh kernel and draws every figure it promises."""

from __future__ import annotations

import nbclient
import nbformat
import pytest

from tests.helpers import REPO

NOTEBOOK = REPO / "docs" / "notebook.ipynb"
FIGURES = 6  # cross-attention heatmap, encoder grid, head view, attribution maps, training curves, alignment


@pytest.mark.slow
def test_the_notebook_runs_and_draws_its_figures():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "commit the notebook without outputs: the docs build runs it"
    )
    nbclient.NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    figures = [output for output in outputs if "Plotly.newPlot" in output.get("data", {}).get("text/html", "")]
    assert len(figures) == FIGURES
    translation = outputs[0]["data"]["text/plain"]
    assert "Mann" in translation and "Hemd" in translation  # "A man in a blue shirt ..." translated to German
