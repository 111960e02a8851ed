"""The inside-one-head figures (viz.internals): each stage with its shape, labels escaped. The stages themselves
are tested in tests/model/test_internals.py; the trace is the internals_trace fixture (tests/conftest.py)."""

from __future__ import annotations

import dataclasses

import numpy as np

from model.analysis.internals import attention_stages
from viz.internals import attention_stage_figures


def test_stage_figures_carry_the_stages_with_their_shapes(translator, internals_trace):
    stages = attention_stages(translator, internals_trace, "decoder.layers.1.self_attn", 3, 4)
    figures = attention_stage_figures(stages)
    keys, d_k = internals_trace.n_steps, stages.d_k  # every decoder input is a key; step 4 may use the first 5
    assert keys > 5
    titles = {name: figure.layout.title.text for name, figure in figures.items()}
    assert titles["scores"] == f"Q·Kᵀ (1 × {keys})"
    assert titles["q"] == f"Q: query (1 × {d_k})"
    assert titles["k"] == f"K: keys ({keys} × {d_k})" and titles["v"] == f"V: values ({keys} × {d_k})"
    assert titles["scaled"] == f"scaled by 1/√{d_k} (1 × {keys})"
    assert titles["mask"] == f"mask (1 × {keys})"
    assert titles["output"] == f"output (1 × {d_k})" and titles["contributions"] == f"‖p_j v_j‖ (1 × {keys})"
    for name, array in (("scores", stages.scores), ("softmax", stages.probs), ("output", stages.output)):
        np.testing.assert_allclose(np.asarray(figures[name].data[0].z, dtype=float), array, rtol=1e-6)
    masked = np.asarray(figures["masked"].data[0].z, dtype=float)
    assert np.all(np.isnan(masked[0, 5:])) and np.all(np.isfinite(masked[0, :5]))  # keys after step 4 are hidden
    assert list(figures["masked"].data[0].text[0, 5:]) == ["−∞"] * (keys - 5)
    assert list(figures["mask"].data[0].text[0]) == ["allowed"] * 5 + ["hidden: future"] * (keys - 5)


def test_stage_figure_labels_are_escaped(translator, internals_trace):
    stages = attention_stages(translator, internals_trace, "decoder.layers.0.cross_attn", 0, 2)
    hostile = dataclasses.replace(
        stages, query_pieces=["<b>q</b>"], key_pieces=["\u2581<script>x</script>"] * len(stages.key_pieces)
    )
    for figure in attention_stage_figures(hostile).values():
        labels = list(figure.layout.yaxis.ticktext) + list(figure.layout.xaxis.ticktext or [])
        assert labels and not any("<b>" in label or "<script>" in label for label in labels)
        assert any("&lt;" in label for label in labels)
