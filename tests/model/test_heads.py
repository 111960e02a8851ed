"""model.heads: every attention module name maps to its kind and layer and back, and other names are refused."""

from __future__ import annotations

import pytest

from model import Transformer
from model.heads import (
    ATTENTION_KINDS,
    KIND_LABELS,
    KIND_TITLES,
    attention_modules,
    check_kind,
    layer_count,
    module_kind,
    module_name,
    parse_module_name,
)
from model.layers import MultiHeadAttention
from tests.helpers import small_config


def test_module_names_and_kinds_go_both_ways():
    for kind in ATTENTION_KINDS:
        assert parse_module_name(module_name(kind, 3)) == (kind, 3)
        assert module_kind(module_name(kind, 0)) == kind
    assert module_name("cross", 1) == "decoder.layers.1.cross_attn"
    assert module_name("encoder", 0) == "encoder.layers.0.self_attn"
    assert parse_module_name("decoder.layers.12.self_attn") == ("decoder", 12)


def test_names_are_those_of_the_models_attention_modules():
    model = Transformer(small_config(40, n_encoder_layers=3, n_decoder_layers=2))
    attention = [name for name, module in model.named_modules() if isinstance(module, MultiHeadAttention)]
    layers = {kind: layer_count(model.config, kind) for kind in ATTENTION_KINDS}
    expected = [module_name(kind, layer) for kind, count in layers.items() for layer in range(count)]
    assert sorted(attention) == sorted(expected)
    assert layers == {"encoder": 3, "decoder": 2, "cross": 2}


@pytest.mark.parametrize(
    "name",
    [
        "decoder.layers.0.ffn",
        "encoder.layers.0.cross_attn",
        "decoder.layers.x.self_attn",
        "encoder.layers.0.self_attn.x",
    ],
)
def test_a_name_that_is_no_attention_module_is_refused(name):
    with pytest.raises(ValueError, match="not an attention module"):
        parse_module_name(name)


def test_an_unknown_kind_is_refused():
    for call in (
        lambda: check_kind("self"),
        lambda: module_name("encoder self", 0),
        lambda: attention_modules([], "x"),
    ):
        with pytest.raises(ValueError, match="kind must be one of"):
            call()


def test_modules_of_a_kind_come_in_layer_order_and_other_names_are_left_out():
    names = ["decoder.layers.10.cross_attn", "decoder.layers.2.cross_attn", "decoder.layers.2.self_attn", "encoder"]
    assert attention_modules(names, "cross") == ["decoder.layers.2.cross_attn", "decoder.layers.10.cross_attn"]
    assert attention_modules(names, "encoder") == []


def test_labels_name_every_kind():
    assert KIND_LABELS == {"encoder": "encoder self", "decoder": "decoder self", "cross": "cross"}
    assert KIND_TITLES == {
        "encoder": "Encoder self-attention",
        "decoder": "Decoder self-attention",
        "cross": "Cross-attention",
    }
