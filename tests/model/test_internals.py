"""Inside one head: the staged recomputation equals the captured attention and head output exactly.

The trace is the internals_trace fixture (tests/conftest.py); the stage figures are tested in
tests/viz/test_internals.py."""

from __future__ import annotations

import numpy as np
import pytest

from model.analysis.internals import attention_stages, stages_from_ids
from model.heads import module_kind

MODULES = [
    "encoder.layers.0.self_attn",
    "encoder.layers.1.self_attn",
    "decoder.layers.0.self_attn",
    "decoder.layers.1.self_attn",
    "decoder.layers.0.cross_attn",
    "decoder.layers.1.cross_attn",
]


def assert_stages_consistent(stages) -> None:
    """Each stage follows from the previous one as section 3.2.1 says."""
    np.testing.assert_allclose(stages.scaled, stages.scores * stages.scale, rtol=1e-6, atol=1e-6)
    assert stages.scale == pytest.approx(1 / np.sqrt(stages.d_k))
    np.testing.assert_array_equal(np.isinf(stages.masked), ~stages.allowed)
    np.testing.assert_array_equal(stages.masked[stages.allowed], stages.scaled[stages.allowed])
    assert np.all(stages.probs[~stages.allowed] == 0.0)
    np.testing.assert_allclose(stages.probs.sum(axis=-1), 1.0, atol=1e-6)
    expected_norms = stages.probs * np.linalg.norm(stages.v, axis=-1)[None, :]
    np.testing.assert_allclose(stages.contribution_norms, expected_norms, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(stages.output, stages.probs.astype(np.float64) @ stages.v, atol=1e-5)


@pytest.mark.parametrize("module_name", MODULES)
def test_stages_recompute_the_captured_attention_of_the_head(translator, internals_trace, module_name):
    queries = len(internals_trace.source_ids) if module_kind(module_name) == "encoder_self" else internals_trace.n_steps
    for head in (0, 2, 3):
        for step in (0, queries // 2, queries - 1):
            stages = attention_stages(translator, internals_trace, module_name, head, step)
            np.testing.assert_allclose(stages.probs, stages.captured_probs, rtol=0, atol=1e-6)
            np.testing.assert_allclose(stages.output, stages.captured_output, rtol=0, atol=1e-6)
            # the trace's attention comes from its own teacher-forced pass
            np.testing.assert_allclose(
                stages.probs[0], internals_trace.attention[module_name][head, step], rtol=0, atol=1e-6
            )
            assert_stages_consistent(stages)


def test_causal_mask_of_decoder_self_attention(translator, internals_trace):
    stages = attention_stages(translator, internals_trace, "decoder.layers.1.self_attn", 1)
    steps = internals_trace.n_steps
    causal = np.tril(np.ones((steps, steps), dtype=bool))
    np.testing.assert_array_equal(stages.causal_allowed, causal)
    np.testing.assert_array_equal(stages.allowed, causal)
    assert np.all(stages.probs[~causal] == 0.0)
    np.testing.assert_allclose(
        stages.probs, internals_trace.attention["decoder.layers.1.self_attn"][1], rtol=0, atol=1e-6
    )
    assert stages.query_pieces == stages.key_pieces == internals_trace.decoder_input_pieces
    assert_stages_consistent(stages)
    single = attention_stages(translator, internals_trace, "decoder.layers.1.self_attn", 1, 3)
    np.testing.assert_array_equal(single.causal_allowed[0], causal[3])
    assert single.query_pieces == [internals_trace.decoder_input_pieces[3]]


@pytest.mark.parametrize("module_name", ["encoder.layers.1.self_attn", "decoder.layers.1.cross_attn"])
def test_padded_source_keys_are_masked_and_change_nothing_else(translator, internals_trace, module_name):
    pad = translator.config.pad_id
    padded_source = internals_trace.source_ids + [pad, pad, pad]
    real = len(internals_trace.source_ids)
    for head in range(translator.config.n_heads):
        plain = stages_from_ids(
            translator.model, internals_trace.source_ids, internals_trace.target_ids, module_name, head, 2
        )
        padded = stages_from_ids(translator.model, padded_source, internals_trace.target_ids, module_name, head, 2)
        np.testing.assert_array_equal(padded.padding_allowed, [True] * real + [False] * 3)
        assert padded.causal_allowed is None
        assert np.all(padded.probs[:, real:] == 0.0)
        np.testing.assert_allclose(padded.probs, padded.captured_probs, rtol=0, atol=1e-6)
        np.testing.assert_allclose(padded.probs[:, :real], plain.probs, rtol=0, atol=1e-6)
        assert_stages_consistent(padded)


def test_padded_target_keys_are_masked_together_with_the_causal_mask(translator, internals_trace):
    pad = translator.config.pad_id
    target = internals_trace.target_ids + [pad, pad]
    stages = stages_from_ids(translator.model, internals_trace.source_ids, target, "decoder.layers.0.self_attn", 2)
    steps = len(target) - 1  # the decoder reads every target id but the last: one padded key
    padding = np.array([True] * len(internals_trace.target_ids) + [False])
    np.testing.assert_array_equal(stages.padding_allowed, padding)
    np.testing.assert_array_equal(stages.allowed, np.tril(np.ones((steps, steps), dtype=bool)) & padding[None, :])
    np.testing.assert_allclose(stages.probs, stages.captured_probs, rtol=0, atol=1e-6)
    assert_stages_consistent(stages)


def test_shapes_are_stated(translator, internals_trace):
    stages = attention_stages(translator, internals_trace, "decoder.layers.0.cross_attn", 0, 1)
    keys, d_k = len(internals_trace.source_ids), translator.config.d_model // translator.config.n_heads
    shapes = stages.shapes()
    assert shapes["q"] == (1, d_k) and shapes["k"] == shapes["v"] == (keys, d_k)
    for name in ("scores", "scaled", "allowed", "masked", "probs", "contribution_norms", "captured_probs"):
        assert shapes[name] == (1, keys)
    assert shapes["output"] == shapes["captured_output"] == (1, d_k)
    assert "causal_allowed" not in shapes  # cross-attention has no causal mask


def test_bad_module_head_or_step_is_refused(translator, internals_trace):
    with pytest.raises(ValueError, match="not an attention module"):
        attention_stages(translator, internals_trace, "decoder.layers.0.feed_forward", 0, 0)
    with pytest.raises(ValueError, match="no attention module"):
        attention_stages(translator, internals_trace, "decoder.layers.7.self_attn", 0, 0)
    with pytest.raises(ValueError, match="head must be"):
        attention_stages(translator, internals_trace, "decoder.layers.0.self_attn", translator.config.n_heads, 0)
    with pytest.raises(ValueError, match="step must be"):
        attention_stages(translator, internals_trace, "decoder.layers.0.self_attn", 0, internals_trace.n_steps)
    with pytest.raises(ValueError, match="step must be"):
        attention_stages(translator, internals_trace, "encoder.layers.0.self_attn", 0, -1)
