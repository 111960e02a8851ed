"""benchmarks.tree_comparison times every workload in both trees and reports their ratio (not the timing)."""

from __future__ import annotations

import pytest

from benchmarks import tree_comparison
from tests.helpers import REPO


@pytest.mark.slow
def test_a_tree_against_itself_reports_every_workload_with_both_medians(tiny_checkpoint):
    records = tree_comparison.compare(REPO, tiny_checkpoint, turns=1, repeats=1)
    assert [record["name"] for record in records] == [
        "trace_greedy_s",
        "trace_beam5_s",
        "translate_batch_beam5_s",
        "figures_s",
        "attribution_s",
    ]
    for record in records:
        assert record["candidate_s"] > 0 and record["baseline_s"] > 0
        assert record["ratio"] == pytest.approx(record["candidate_s"] / record["baseline_s"])


def test_a_folder_that_is_no_source_tree_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        tree_comparison.main(["--baseline-tree", str(tmp_path)])


def test_a_failing_workload_names_the_tree_and_shows_its_error(tmp_path):
    (tmp_path / "model").mkdir()  # a tree whose model package cannot load a checkpoint
    with pytest.raises(SystemExit, match=str(tmp_path)):
        tree_comparison.run_turn(tmp_path, tmp_path / "missing-checkpoint", repeats=1)
