"""Figure 1 drawn for a model (its boxes) and each box's live number, against what the boxes stand for."""

from __future__ import annotations

import numpy as np
import pytest

from model.analysis.activations import trace_activations
from model.analysis.figure_one import attention_entropy_bits, box_numbers, figure_boxes, position_share
from model.heads import module_name
from tests.helpers import SENTENCE, small_config


def labels(boxes, stack):
    return [box.label for box in boxes if box.stack == stack]


def test_a_post_norm_layer_adds_and_normalises_after_each_sublayer():
    boxes = figure_boxes(small_config(40))
    assert labels(boxes, "encoder") == [
        "Input Embedding",
        "Positional Encoding",
        "Multi-Head Attention",
        "Add & Norm",
        "Feed Forward",
        "Add & Norm",
    ]
    assert labels(boxes, "decoder") == [
        "Output Embedding",
        "Positional Encoding",
        "Masked Multi-Head Attention",
        "Add & Norm",
        "Multi-Head Attention over the encoder",
        "Add & Norm",
        "Feed Forward",
        "Add & Norm",
    ]
    assert [box.key for box in boxes if box.stack is None] == ["linear", "softmax"]
    assert [box.attention_kind for box in boxes if box.kind == "attention"] == ["encoder_self", "decoder_self", "cross"]
    assert len({box.key for box in boxes}) == len(boxes)


def test_a_pre_norm_layer_normalises_before_each_sublayer_and_its_stack_ends_with_a_norm():
    boxes = figure_boxes(small_config(40, norm_first=True, final_norm=True, share_embeddings=True))
    assert labels(boxes, "encoder") == [
        "Input Embedding (shared)",
        "Positional Encoding",
        "Norm",
        "Multi-Head Attention",
        "Add",
        "Norm",
        "Feed Forward",
        "Add",
        "Norm",
    ]
    final = [box for box in boxes if box.key == "decoder.norm"]
    assert len(final) == 1 and not final[0].layer_box
    assert all(box.layer_box for box in boxes if box.kind in ("attention", "add", "feed_forward"))


def test_an_embedding_norm_is_a_norm_box_between_the_embedding_sum_and_the_first_layer():
    """mBART-50's layernorm_embedding (config.embedding_norm): its own box, once per stack, under the layers."""
    boxes = figure_boxes(small_config(40, norm_first=True, final_norm=True, embedding_norm=True))
    assert labels(boxes, "decoder")[:4] == ["Output Embedding", "Positional Encoding", "Norm", "Norm"]
    norm = [box for box in boxes if box.key == "encoder.embedding_norm"]
    assert len(norm) == 1 and norm[0].kind == "norm" and not norm[0].layer_box
    assert "encoder.embedding_norm" not in {box.key for box in figure_boxes(small_config(40, norm_first=True))}


def test_entropy_is_in_bits():
    uniform = np.full((2, 3, 4), 0.25)
    one_hot = np.zeros((1, 2, 5))
    one_hot[..., 2] = 1.0
    assert attention_entropy_bits(uniform) == pytest.approx(2.0)
    assert attention_entropy_bits(one_hot) == 0.0


def test_each_number_is_what_its_box_stands_for(shipped_en_de):
    trace = shipped_en_de.trace(SENTENCE)
    read = trace_activations(shipped_en_de, trace)
    config = shipped_en_de.model.config
    numbers = box_numbers(config, trace, read)
    keys = {box.key for box in figure_boxes(config)}
    assert set(numbers) <= keys  # every number belongs to a box of the map
    assert len(numbers["encoder.self_attn"]) == config.n_encoder_layers
    weights = trace.attention[module_name("cross", 2)].astype(np.float64)  # (heads, steps, source)
    entropy = -(weights * np.log2(np.where(weights > 0, weights, 1))).sum(-1).mean()
    assert numbers["decoder.cross_attn"][2] == pytest.approx(entropy, rel=1e-6)
    out = read.point("encoder", 1, "feed_forward.hook_out")
    before = read.point("encoder", 1, "hook_resid_mid")
    ratio = (np.linalg.norm(out, axis=-1) / np.linalg.norm(before, axis=-1)).mean()
    assert numbers["encoder.add.feed_forward"][1] == pytest.approx(ratio, rel=1e-6)  # pre-norm: "Add"
    hidden = read.point("decoder", 3, "feed_forward.hook_hidden")
    assert numbers["decoder.feed_forward"][3] == pytest.approx((hidden > 0).mean(), rel=1e-6)
    token = read.point("encoder", None, "hook_embed")
    position = trace.positional["encoder.positional"]  # what was added, as the trace captured it
    share = np.linalg.norm(position, axis=-1) / (np.linalg.norm(token, axis=-1) + np.linalg.norm(position, axis=-1))
    np.testing.assert_allclose(position_share(read, "encoder"), share, rtol=1e-4)
    assert numbers["softmax"] == [pytest.approx(float(trace.step_probs.mean()))]
