"""The head statistics figures and table (viz.head_stats): a layers-by-heads panel per kind with the table's
values, escaped labels, one row per head. The statistics themselves are tested in tests/model/test_head_stats.py."""

from __future__ import annotations

import html

import numpy as np
import pytest

from model.analysis.head_stats import STATISTIC_DESCRIPTIONS, mean_head_statistics, trace_head_statistics
from model.heads import KIND_LABELS
from viz.head_stats import STATISTIC_LABELS, head_stats_frame, head_stats_heatmap, statistic_grid

# The traces fixture (tests/conftest.py): greedy traces of three toy sentences on the tiny checkpoint.


def test_heatmap_has_a_layers_by_heads_panel_per_kind_with_the_table_values(traces):
    table = trace_head_statistics(traces[0])
    for statistic in ("entropy", "diagonality"):
        figure = head_stats_heatmap(table, statistic)
        assert [annotation.text for annotation in figure.layout.annotations] == [
            "Encoder self-attention",
            "Decoder self-attention",
            "Cross-attention",
        ]
        for panel, kind in zip(figure.data, KIND_LABELS.values(), strict=True):
            z = np.asarray(panel.z)
            rows = [row for row in table if row["kind"] == kind]
            assert z.shape == (max(r["layer"] for r in rows) + 1, max(r["head"] for r in rows) + 1)
            for row in rows:
                assert z[row["layer"], row["head"]] == row[statistic]
            assert panel.coloraxis == "coloraxis"  # one colour scale for the three panels
        assert list(figure.layout.xaxis.ticktext) == [f"head {h + 1}" for h in range(z.shape[1])]  # counted from 1
        assert list(figure.layout.yaxis.ticktext) == [f"layer {layer + 1}" for layer in range(z.shape[0])]
        assert figure.data[0].customdata[0][1] == "layer 1, head 2"  # and the hover says so
        assert figure.layout.title.text == f"{STATISTIC_LABELS[statistic].capitalize()} – this sentence"
    entropy = head_stats_heatmap(table, "entropy").layout.coloraxis
    assert (entropy.cmin, entropy.cmax) == (0.0, max(row["entropy"] for row in table))  # the largest of any panel
    stacked = head_stats_heatmap(table, "entropy", stacked=True)  # presenter mode: one panel under another
    assert [panel.xaxis for panel in stacked.data] == ["x", "x2", "x3"]
    assert stacked.layout.yaxis3.domain[1] < stacked.layout.yaxis2.domain[0] < stacked.layout.yaxis.domain[0]
    assert stacked.layout.height > head_stats_heatmap(table, "entropy").layout.height
    bounded = head_stats_heatmap(table, "same", ["cross"])
    assert (bounded.layout.coloraxis.cmin, bounded.layout.coloraxis.cmax) == (0.0, 1.0)
    assert len(bounded.data) == 1
    np.testing.assert_array_equal(statistic_grid(table, "same", "cross"), bounded.data[0].z)


def test_heatmap_labels_and_titles_are_escaped(traces):
    table = trace_head_statistics(traces[0])
    figure = head_stats_heatmap(table, "bos", ["encoder self"])
    assert figure.layout.title.text.startswith(html.escape("On <s>"))
    assert "<s>" not in figure.layout.title.text and "<s>" not in figure.data[0].hovertemplate
    assert html.escape(STATISTIC_DESCRIPTIONS["bos"]) in figure.data[0].hovertemplate
    custom = head_stats_heatmap(table, "eos", ["cross"], title="<b>my file</b>")
    assert custom.layout.title.text == "&lt;b&gt;my file&lt;/b&gt;"
    batch = head_stats_heatmap(mean_head_statistics([table, table]), "entropy", ["cross"])
    assert batch.layout.title.text == "Entropy (bits) – mean over 2 sentences"


def test_bad_statistic_or_kind_is_refused(traces):
    table = trace_head_statistics(traces[0])
    with pytest.raises(ValueError, match="statistic"):
        head_stats_heatmap(table, "sharpness")
    with pytest.raises(ValueError, match="kind"):
        head_stats_heatmap(table, "entropy", ["encoder"])
    with pytest.raises(ValueError, match="kind"):
        head_stats_frame(table, kinds=["self"])


def test_frame_has_one_row_per_head_and_sorts(traces):
    table = trace_head_statistics(traces[0])
    frame = head_stats_frame(table)
    assert len(frame) == len(table)
    assert list(frame.columns) == ["kind", "layer", "head", *STATISTIC_LABELS.values(), "query rows", "sentences"]
    np.testing.assert_array_equal(frame[STATISTIC_LABELS["entropy"]], [row["entropy"] for row in table])
    counted_from_one = [(row["layer"] + 1, row["head"] + 1) for row in table]
    assert list(zip(frame["layer"], frame["head"], strict=True)) == counted_from_one
    cross = head_stats_frame(table, kinds=["cross"])
    assert set(cross["kind"]) == {"cross"} and len(cross) == sum(row["kind"] == "cross" for row in table)
    ordered = frame.sort_values(STATISTIC_LABELS["diagonality"], ascending=False)
    assert ordered.iloc[0][STATISTIC_LABELS["diagonality"]] == max(row["diagonality"] for row in table)
