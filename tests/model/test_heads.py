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
    stack_of,
)
from model.layers import MultiHeadAttention
from tests.helpers import small_config


def test_module_names_and_kinds_go_both_ways():
    for kind in ATTENTION_KINDS:
        assert parse_module_name(module_name(kind, 3)) == (kind, 3)
        assert module_kind(module_name(kind, 0)) == kind
    assert module_name("cross", 1) == "decoder.layers.1.cross_attn"
    assert module_name("encoder_self", 0) == "encoder.layers.0.self_attn"
    assert [stack_of(kind) for kind in ATTENTION_KINDS] == ["encoder", "decoder", "decoder"]
    assert parse_module_name("decoder.layers.12.self_attn") == ("decoder_self", 12)


def test_names_are_those_of_the_models_attention_modules():
    model = Transformer(small_config(40, n_encoder_layers=3, n_decoder_layers=2))
    attention = [name for name, module in model.named_modules() if isinstance(module, MultiHeadAttention)]
    layers = {kind: layer_count(model.config, kind) for kind in ATTENTION_KINDS}
    expected = [module_name(kind, layer) for kind, count in layers.items() for layer in range(count)]
    assert sorted(attention) == sorted(expected)
    assert layers == {"encoder_self": 3, "decoder_self": 2, "cross": 2}


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
        lambda: module_name("decoder", 0),  # a stack, not a kind: its self- and cross-attention both live there
        lambda: attention_modules([], "x"),
    ):
        with pytest.raises(ValueError, match="kind must be one of"):
            call()


def test_modules_of_a_kind_come_in_layer_order_and_other_names_are_left_out():
    names = ["decoder.layers.10.cross_attn", "decoder.layers.2.cross_attn", "decoder.layers.2.self_attn", "encoder"]
    assert attention_modules(names, "cross") == ["decoder.layers.2.cross_attn", "decoder.layers.10.cross_attn"]
    assert attention_modules(names, "encoder_self") == []


def test_labels_name_every_kind():
    assert KIND_LABELS == {"encoder_self": "encoder self", "decoder_self": "decoder self", "cross": "cross"}
    assert KIND_TITLES == {
        "encoder_self": "Encoder self-attention",
        "decoder_self": "Decoder self-attention",
        "cross": "Cross-attention",
    }
