"""The activation hook points (every box of Figure 1) and the analyses read from them: each point against an
independent forward pass (tests/reference_forward.py), the logit lens against the model's own distribution.
The imported MarianMT model's points against Hugging Face's hidden states: tests/model/test_marian.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import Transformer, capture_attention, intervene, load_checkpoint
from model.analysis.activations import lens_distributions, logit_lens, trace_activations
from model.capture import ACTIVATION, activation_names, observes_activations
from model.decoding.passes import encode_captured, forced_pass
from tests.helpers import REPO, SENTENCE, small_config
from tests.reference_forward import reference_points

VOCAB = 40
SOURCE = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 12, 3, 0, 0]])  # the second row padded
TARGET = torch.tensor([[2, 13, 14, 15], [2, 16, 17, 18]])
ARCHITECTURES = {
    "post_norm": {},
    "pre_norm_final_norm": {"norm_first": True, "final_norm": True, "activation": "gelu"},
    # mBART-50's switches (model/interop/bart_family.py): an embedding norm, learned positions from row 2
    "mbart": {
        "norm_first": True,
        "final_norm": True,
        "embedding_norm": True,
        "positional_encoding": "learned",
        "position_offset": 2,
        "final_logits_bias": True,
    },
    # M2M100's and NLLB's: fairseq's sinusoids from row padding id + 1, padding without a position
    "m2m100": {
        "norm_first": True,
        "final_norm": True,
        "positional_layout": "fairseq",
        "position_offset": 1,
        "positions_skip_padding": True,
    },
}


@pytest.fixture(scope="module", params=sorted(ARCHITECTURES))
def model(request) -> Transformer:
    torch.manual_seed(0)
    model = Transformer(small_config(VOCAB, **ARCHITECTURES[request.param])).eval()
    with torch.no_grad():  # every norm and bias away from its initial value, so a missed one shows
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model


def captured(model: Transformer) -> dict[str, torch.Tensor]:
    with torch.inference_mode(), capture_attention(model, activations=True) as capture:
        model(SOURCE, TARGET)
    return capture.activations


def test_every_hook_point_equals_an_independent_forward_pass(model):
    points = captured(model)
    with torch.no_grad():
        expected = reference_points(model, SOURCE, TARGET)
    assert sorted(points) == sorted(activation_names(model.config)) == sorted(expected)
    for name, value in points.items():
        assert value.device.type == "cpu" and value.dim() == 3, name
        torch.testing.assert_close(value, expected[name], atol=2e-5, rtol=0, msg=name)


def test_the_points_say_what_the_figure_says(model):
    """The claims a student reads off the map, each checked from the captured points alone."""
    points = captured(model)
    config = model.config
    last = f"encoder.layers.{config.n_encoder_layers - 1}.hook_resid_post"
    with torch.inference_mode():
        memory, _ = model.encode(SOURCE)
        logits = model(SOURCE, TARGET)  # the fused path, nothing captured
    torch.testing.assert_close(points["hook_logits"], logits, atol=1e-5, rtol=0)
    with torch.inference_mode():
        encoder_output = model.encoder.norm(points[last]) if config.final_norm else points[last]
        torch.testing.assert_close(encoder_output, memory, atol=1e-5, rtol=0)
        for stack in ("encoder", "decoder"):
            layer, prefix = getattr(model, stack).layers[0], f"{stack}.layers.0"
            pre, out = points[f"{prefix}.hook_resid_pre"], points[f"{prefix}.self_attn.hook_out"]
            expected = pre + out if config.norm_first else layer.norm1(pre + out)
            torch.testing.assert_close(points[f"{prefix}.hook_resid_mid"], expected, atol=1e-5, rtol=0)
        # the feed-forward network reads the residual after cross-attention (pre-norm: normalised first)
        ff_input = points["decoder.layers.1." + ("norm3.hook_out" if config.norm_first else "hook_resid_mid_cross")]
        linear1 = model.decoder.layers[1].feed_forward.linear1
        hidden = {"relu": F.relu, "gelu": F.gelu}[config.activation](linear1(ff_input))
    torch.testing.assert_close(points["decoder.layers.1.feed_forward.hook_hidden"], hidden, atol=1e-5, rtol=0)


def count_activation_calls(model: Transformer, run) -> int:
    """How many activation probes ``run()`` called."""
    calls = []
    handles = [
        module.register_forward_hook(lambda *args: calls.append(1))
        for module in model.modules()
        if getattr(module, "kind", None) == ACTIVATION
    ]
    try:
        with torch.inference_mode():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return len(calls)


def test_only_a_capture_of_activations_calls_their_probes(model):
    def in_block(make_block):
        def run():
            with make_block():
                model(SOURCE, TARGET)

        return run

    assert not observes_activations()
    assert count_activation_calls(model, lambda: model(SOURCE, TARGET)) == 0
    assert count_activation_calls(model, in_block(lambda: capture_attention(model))) == 0
    assert count_activation_calls(model, in_block(lambda: capture_attention(model, internals=True))) == 0
    assert count_activation_calls(model, in_block(lambda: intervene(model, lambda name, kind, value: value))) == 0
    assert count_activation_calls(model, in_block(lambda: capture_attention(model, activations=True))) == len(
        activation_names(model.config)
    )


def test_an_edit_never_sees_an_activation_and_a_capture_keeps_a_copy(model):
    kinds = set()

    def edit(name, kind, value):
        kinds.add(kind)
        return value * 2 if kind == ACTIVATION else value

    with torch.inference_mode(), intervene(model, edit), capture_attention(model, activations=True) as capture:
        logits = model(SOURCE, TARGET)
    assert ACTIVATION not in kinds and "attention" in kinds
    with torch.inference_mode():
        torch.testing.assert_close(logits, model(SOURCE, TARGET), atol=1e-5, rtol=0)
    with torch.inference_mode():
        capture.activations["hook_logits"].zero_()
    assert logits.abs().sum() > 0  # the capture held a copy


@pytest.fixture(scope="module")
def toy_copy():
    return load_checkpoint(REPO / "checkpoints" / "toy-copy", device="cpu")


@pytest.mark.parametrize("which", ["shipped_en_de", "toy_copy"])
def test_the_logit_lens_last_layer_is_the_models_own_distribution(which, request):
    """At every step, the last decoder layer read through the lens is the distribution the trace shows (pre-norm
    with a final norm: the shipped default; post-norm: toy-copy)."""
    translator = request.getfixturevalue(which)
    sentence = SENTENCE if which == "shipped_en_de" else "a b c d"
    trace = translator.trace(sentence)
    model = translator.model
    lens = lens_distributions(model, trace.source_ids, trace.target_ids)
    assert lens.shape == (model.config.n_decoder_layers, trace.n_steps, model.config.tgt_vocab_size)
    expected = forced_pass(model, encode_captured(model, trace.source_ids), trace.target_ids).probs
    torch.testing.assert_close(lens[-1], expected, atol=1e-6, rtol=0)
    read = logit_lens(translator, trace, top_k=3)
    np.testing.assert_array_equal(read.topk_ids[-1], trace.topk_ids[:, :3])
    np.testing.assert_allclose(read.chosen_probs[-1], trace.step_probs, atol=1e-6)
    assert read.topk_probs.shape == (model.config.n_decoder_layers, trace.n_steps, 3)
    assert (read.chosen_ranks >= 1).all() and (read.chosen_ranks[-1] == 1).all()  # greedy: the top token
    assert read.topk_pieces[-1][0][0] == trace.topk_pieces[0][0]


def test_what_the_views_read_is_what_the_points_say(shipped_en_de):
    trace = shipped_en_de.trace(SENTENCE)
    read = trace_activations(shipped_en_de, trace)
    config = shipped_en_de.model.config
    assert "hook_logits" not in read.values
    assert read.point("encoder", 0, "hook_resid_pre").shape == (len(trace.source_ids), config.d_model)
    assert read.point("decoder", None, "hook_embed").shape == (trace.n_steps, config.d_model)
    labels, norms = read.residual_norms("decoder")
    assert labels[0] == "input" and labels[1] == "layer 1 self-attention" and labels[-1] == "layer 4 feed forward"
    assert norms.shape == (1 + 3 * config.n_decoder_layers, trace.n_steps)
    last = read.point("decoder", config.n_decoder_layers - 1, "hook_resid_post")
    np.testing.assert_allclose(norms[-1], np.linalg.norm(last, axis=-1), rtol=1e-6)
    ratios = read.sublayer_ratios("decoder")
    assert ratios.shape == (config.n_decoder_layers, 3, trace.n_steps)
    cross_out = read.point("decoder", 2, "cross_attn.hook_out")
    before = read.point("decoder", 2, "hook_resid_mid")
    np.testing.assert_allclose(ratios[2, 1], np.linalg.norm(cross_out, axis=-1) / np.linalg.norm(before, axis=-1))
    hidden = read.point("encoder", 1, "feed_forward.hook_hidden")
    assert hidden.shape == (len(trace.source_ids), config.d_ff)
    share = read.active_share("encoder", 1)
    np.testing.assert_allclose(share, (hidden > 0).sum(axis=-1) / config.d_ff)
    assert 0 < share.min() and share.max() < 1  # ReLU leaves some units off and some on
    with pytest.raises(ValueError, match="no hook point 'encoder.layers.9.hook_resid_pre'"):
        read.point("encoder", 9, "hook_resid_pre")
