"""The scratch Transformer against the paper and against torch.nn.Transformer."""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from model import Transformer, TransformerConfig, capture_attention
from model.checkpoint import architecture
from model.interop import Seq2SeqTransformer, export_torch, import_torch
from model.interop.torch_transformer import tutorial_logits
from model.layers import Dropout, PositionalEncoding, TokenEmbedding, sinusoidal_encoding
from tests.helpers import REPO, small_config

VARIANTS = {
    "paper": {},
    "tied": dict(share_embeddings=True, tie_output=True, output_bias=False),
    "prenorm-gelu-finalnorm": dict(norm_first=True, activation="gelu", final_norm=True),
}


def random_batch(vocab: int, pad: bool, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (3, 9), generator=generator)
    tgt = torch.randint(4, vocab, (3, 7), generator=generator)
    if pad:
        src[0, 6:] = 0
        src[2, 8:] = 0
        tgt[1, 4:] = 0
    return src, tgt


def test_positional_encoding_is_the_papers_formula():
    d_model, length = 10, 17
    encoding = sinusoidal_encoding(length, d_model)
    for pos in range(length):
        for i in range(d_model):
            angle = pos / 10000 ** (2 * (i // 2) / d_model)
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert encoding[pos, i].item() == pytest.approx(expected, abs=1e-6)
    module = PositionalEncoding(d_model, length, dropout=0.0)
    x = torch.zeros(2, 5, d_model)
    assert torch.equal(module(x, start=3), encoding[3:8].expand(2, 5, d_model))
    with pytest.raises(ValueError, match="max_len"):
        module(torch.zeros(1, length + 1, d_model))


def test_token_embedding_scaled_by_sqrt_d_model():
    embed = TokenEmbedding(11, 16)
    ids = torch.tensor([[1, 5, 7]])
    assert torch.allclose(embed(ids), embed.embedding.weight[ids] * 4.0)


def relative_position_spread(states: torch.Tensor) -> float:
    """How far a sentence's positions are apart, relative to their size (0: one vector for every position)."""
    return float((states - states.mean(1, keepdim=True)).norm(dim=-1).mean() / states.norm(dim=-1).mean())


def test_fresh_token_embeddings_outweigh_the_positional_encoding_and_the_encoder_keeps_positions_apart():
    """fairseq's N(0, 1/d_model) embedding init: Xavier's (std 0.016 for 8,000 x 128) left the positional
    encoding four times the token at the input, so that every sentence started out looking alike."""
    torch.manual_seed(0)
    # the size English->German first shipped at (4+4, d_model 128, tied), in the post-norm layout that collapsed
    config = TransformerConfig(
        src_vocab_size=8000,
        tgt_vocab_size=8000,
        d_model=128,
        n_heads=4,
        n_encoder_layers=4,
        n_decoder_layers=4,
        d_ff=256,
        dropout=0.25,
        share_embeddings=True,
        tie_output=True,
        output_bias=False,
    )
    model = Transformer(config).eval()
    ids = torch.randint(4, 8000, (8, 14))
    tokens = model.encoder.embed(ids)
    assert tokens.std().item() == pytest.approx(1.0, abs=0.05)  # unit variance after the sqrt(d_model) scale
    assert tokens.norm(dim=-1).mean() > 1.3 * model.encoder.positional.encoding[:14].norm(dim=-1).mean()
    assert model.generator.weight is model.encoder.embed.embedding.weight  # tying survives the init
    with torch.no_grad():
        states = model.encoder(ids, None)
    assert relative_position_spread(states) > 0.25  # Xavier-initialised embeddings: 0.14


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-9)])
def test_matches_torch_transformer_both_ways(variant, pad, dtype, tolerance):
    torch.manual_seed(0)
    ours = Transformer(small_config(40, **VARIANTS[variant])).to(dtype).eval()
    theirs = export_torch(ours).to(dtype).eval()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    src, tgt = random_batch(40, pad)
    real = tgt != 0  # logits at padded target positions are not defined by either model
    expected = tutorial_logits(theirs, src, tgt, pad_id=0)
    logits = ours(src, tgt)
    assert logits.shape == expected.shape == (3, 7, 40)
    assert (logits - expected)[real].abs().max().item() < tolerance

    torch.manual_seed(1)
    fresh_torch = Seq2SeqTransformer(ours.config).to(dtype).eval()  # the other way: torch -> ours
    imported = import_torch(fresh_torch, pad_id=0, bos_id=2, eos_id=3).eval()
    difference = imported(src, tgt) - tutorial_logits(fresh_torch, src, tgt, pad_id=0)
    assert difference[real].abs().max().item() < tolerance


def test_gradients_match_torch_transformer():
    torch.manual_seed(0)
    ours = Transformer(small_config(40, final_norm=True)).double()
    theirs = export_torch(ours).double()
    src, tgt = random_batch(40, pad=True)
    target = torch.randint(4, 40, tgt.shape)
    loss_ours = nn.functional.cross_entropy(ours(src, tgt).flatten(0, 1), target.flatten())
    loss_theirs = nn.functional.cross_entropy(tutorial_logits(theirs, src, tgt, 0).flatten(0, 1), target.flatten())
    loss_ours.backward()
    loss_theirs.backward()
    # Map torch's gradients into our layout by importing a copy whose parameters are the gradients.
    gradients_as_module = copy.deepcopy(theirs)
    with torch.no_grad():
        for parameter, source in zip(gradients_as_module.parameters(), theirs.parameters(), strict=True):
            parameter.copy_(source.grad)
    mapped = dict(import_torch(gradients_as_module, 0, 2, 3).named_parameters())
    for name, parameter in ours.named_parameters():
        assert torch.allclose(parameter.grad, mapped[name], atol=1e-10), name


def test_per_head_attention_equals_torch_multihead_attention_weights():
    torch.manual_seed(0)
    ours = Transformer(small_config(40)).eval()
    theirs = export_torch(ours).eval()
    src, tgt = random_batch(40, pad=True)
    with capture_attention(ours) as capture:
        ours(src, tgt)
    x = ours.encoder.positional(ours.encoder.embed(src)).transpose(0, 1)  # (S, B, d) seq-first
    attention = theirs.transformer.encoder.layers[0].self_attn
    _, weights = attention(x, x, x, key_padding_mask=src == 0, need_weights=True, average_attn_weights=False)
    assert torch.allclose(capture.attention["encoder.layers.0.self_attn"], weights, atol=1e-6)


def test_captured_attention_properties():
    torch.manual_seed(0)
    model = Transformer(small_config(40)).eval()
    src, tgt = random_batch(40, pad=True)
    plain = model(src, tgt)
    with capture_attention(model) as capture:
        explicit = model(src, tgt)
    assert torch.allclose(plain, explicit, atol=1e-5), "fused and explicit attention paths disagree"
    expected_names = {f"encoder.layers.{i}.self_attn" for i in range(2)}
    expected_names |= {f"decoder.layers.{i}.{kind}" for i in range(2) for kind in ("self_attn", "cross_attn")}
    assert set(capture.attention) == expected_names
    for name, weights in capture.attention.items():
        assert weights.device.type == "cpu"
        assert weights.shape[:2] == (3, 4)
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-6), name
        if name.startswith("encoder") or "cross" in name:
            assert torch.all(weights[0, :, :, 6:] == 0), "padded source keys must get exactly zero"
    for i in range(2):
        decoder_self = capture.attention[f"decoder.layers.{i}.self_attn"]
        assert torch.all(decoder_self.triu(diagonal=1) == 0), "future positions must get exactly zero"
        assert torch.all(decoder_self[1, :, :, 4:] == 0), "padded target keys must get exactly zero"
    assert torch.equal(capture.positional["encoder.positional"], sinusoidal_encoding(64, 32)[:9])
    assert capture.positional["decoder.positional"].shape == (7, 32)


def test_capture_is_scoped_to_its_block_and_leaves_model_untouched():
    model = Transformer(small_config(40)).eval()
    hooks_before = {name: len(m._forward_hooks) for name, m in model.named_modules()}
    src, tgt = random_batch(40, pad=False)
    with capture_attention(model) as capture:
        model(src, tgt)
    count = len(capture.attention)
    model(src, tgt)  # outside the block: nothing more is recorded
    assert len(capture.calls["encoder.layers.0.self_attn"]) == 1 and len(capture.attention) == count
    assert hooks_before == {name: len(m._forward_hooks) for name, m in model.named_modules()}
    assert not model.training


def test_config_validation_and_round_trip():
    config = small_config(40, share_embeddings=True)
    assert TransformerConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="divisible"):
        small_config(40, n_heads=5)
    with pytest.raises(ValueError, match="unknown config keys"):
        TransformerConfig.from_dict({**config.to_dict(), "colour": "blue"})
    with pytest.raises(ValueError, match="share_embeddings"):
        small_config(40, share_embeddings=True, tgt_vocab_size=41)


def test_tied_weights_are_one_tensor():
    model = Transformer(small_config(40, share_embeddings=True, tie_output=True, output_bias=False))
    assert model.encoder.embed is model.decoder.embed
    assert model.generator.weight is model.decoder.embed.embedding.weight


def test_captured_internals_recompute_the_attention_and_output():
    """Per-head queries, keys, values and outputs are what the module computed, in both paths."""
    torch.manual_seed(0)
    model = Transformer(small_config(40)).eval()
    src, tgt = random_batch(40, pad=True)
    with capture_attention(model) as plain_capture:
        model(src, tgt)
    assert plain_capture.internals == {}, "internals are recorded only when asked for"
    with capture_attention(model, internals=True) as capture:
        model(src, tgt)
    name = "decoder.layers.1.cross_attn"
    parts = capture.internals[name]
    assert set(parts) == {"query", "key", "value", "head_output"}
    q, k, v = parts["query"], parts["key"], parts["value"]  # (B, H, T, dk)
    assert q.shape == (3, 4, 7, 8) and k.shape == v.shape == (3, 4, 9, 8)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill((src == 0)[:, None, None, :], float("-inf"))
    assert torch.allclose(scores.softmax(-1), capture.attention[name], atol=1e-6)
    assert torch.allclose(capture.attention[name] @ v, parts["head_output"], atol=1e-6)


def test_an_identity_edit_changes_nothing_and_edits_are_scoped():
    from model import intervene

    torch.manual_seed(0)
    model = Transformer(small_config(40)).eval()
    src, tgt = random_batch(40, pad=True)
    with capture_attention(model):
        reference = model(src, tgt)
    seen: set[tuple[str, str]] = set()

    def identity(name: str, kind: str, value: torch.Tensor) -> torch.Tensor:
        seen.add((name, kind))
        return value

    with intervene(model, identity):
        assert torch.equal(model(src, tgt), reference)
    kinds = {kind for _, kind in seen}
    assert kinds == {"attention", "positional", "query", "key", "value", "head_output"}
    assert ("decoder.layers.0.cross_attn", "head_output") in seen and ("encoder.positional", "positional") in seen

    def silence_head_0(name: str, kind: str, value: torch.Tensor) -> torch.Tensor:
        if name == "encoder.layers.0.self_attn" and kind == "head_output":
            value = value.clone()
            value[:, 0] = 0
        return value

    with intervene(model, silence_head_0), capture_attention(model, internals=True) as capture:
        edited = model(src, tgt)
    assert torch.all(capture.internals["encoder.layers.0.self_attn"]["head_output"][:, 0] == 0)
    assert not torch.allclose(edited, reference)
    assert torch.allclose(model(src, tgt), reference, atol=1e-5), "the edit must end with its block"


def test_nested_edits_compose_outer_first():
    from model import intervene

    model = Transformer(small_config(40)).eval()
    src, tgt = random_batch(40, pad=False)
    order: list[str] = []

    def tag(label: str):
        def edit(name: str, kind: str, value: torch.Tensor) -> torch.Tensor:
            if name == "encoder.positional":
                order.append(label)
            return value

        return edit

    with intervene(model, tag("outer")), intervene(model, tag("inner")):
        model.encode(src)
    assert order == ["outer", "inner"]


# Options for imported models (MarianMT): each defaults to the paper's behaviour.


def test_new_options_default_to_the_papers_model():
    config = small_config(40)
    assert (config.activation, config.positional_layout, config.scale_embedding) == ("relu", "interleaved", True)
    assert (config.final_logits_bias, config.decoder_start_id, config.start_id) == (False, None, config.bos_id)
    assert not {
        "positional_layout",
        "scale_embedding",
        "final_logits_bias",
        "decoder_start_id",
        "attention_dropout",
        "activation_dropout",
    } & set(config.to_dict()), "a paper config writes the same config.json as before"
    model = Transformer(config)
    assert model.final_logits_bias is None and "final_logits_bias" not in model.state_dict()
    assert isinstance(model.encoder.layers[0].feed_forward.activation, nn.ReLU)
    assert model.encoder.embed.scale == math.sqrt(config.d_model)
    torch.testing.assert_close(model.encoder.positional.encoding, sinusoidal_encoding(config.max_len, config.d_model))
    marian = TransformerConfig.from_dict(
        {**config.to_dict(), "positional_layout": "marian", "bos_id": None, "decoder_start_id": config.pad_id}
    )
    assert TransformerConfig.from_dict(marian.to_dict()) == marian


def test_attention_and_activation_dropout_default_to_dropout_and_can_be_set_apart():
    def rates(model: Transformer) -> dict[str, set[float]]:
        found: dict[str, set[float]] = {"attention": set(), "activation": set(), "residual": set()}
        for name, module in model.named_modules():
            if isinstance(module, nn.Dropout):
                where = "attention" if "attn." in name else "activation" if "feed_forward." in name else "residual"
                found[where].add(module.p)
        return found

    assert rates(Transformer(small_config(40, dropout=0.3))) == {
        "attention": {0.3},
        "activation": {0.3},
        "residual": {0.3},
    }
    apart = small_config(40, dropout=0.3, attention_dropout=0.0, activation_dropout=0.1)
    assert rates(Transformer(apart)) == {"attention": {0.0}, "activation": {0.1}, "residual": {0.3}}
    assert TransformerConfig.from_dict(apart.to_dict()) == apart
    with pytest.raises(ValueError, match="attention_dropout must be in"):
        small_config(40, attention_dropout=1.0)


def test_dropout_keeps_each_element_with_probability_one_minus_p_and_scales_it():
    torch.manual_seed(0)
    dropout = Dropout(0.25).train()
    x = torch.full((400, 500), 2.0, requires_grad=True)
    y = dropout(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.005  # 200,000 draws: the standard error is 0.001
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 2.0 / 0.75))
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / 0.75)  # the gradient flows through kept elements only
    assert torch.equal(dropout.eval()(x), x)  # evaluation: the identity
    assert torch.equal(Dropout(0.0).train()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))


def test_dropout_rate_is_rounded_to_sixteen_bits_and_the_kept_scaled_by_the_exact_inverse():
    """p = 0.3 drops round(0.3 * 2^16) = 19,661 of 65,536 equally likely values: 0.30001, and the kept elements are
    scaled by 65,536 / 45,875, so that the expectation of the output is the input exactly; the seed fixes the mask."""
    torch.manual_seed(1)
    x = torch.ones(1000, 1000)
    y = Dropout(0.3).train()(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - 19661 / 65536)) < 0.002  # 10^6 draws: the standard error is 0.0005
    assert torch.equal(y[kept], torch.full_like(y[kept], 65536 / 45875))
    torch.manual_seed(1)
    assert torch.equal(Dropout(0.3).train()(x), y)
    assert not torch.equal(Dropout(0.3).train()(x), y)  # the next draw differs


def test_swish_activation_is_silu():
    model = Transformer(small_config(40, activation="swish"))
    layer = model.decoder.layers[0].feed_forward
    x = torch.randn(2, 3, model.config.d_model)
    torch.testing.assert_close(layer(x), layer.linear2(torch.nn.functional.silu(layer.linear1(x))))
    with pytest.raises(ValueError, match="activation"):
        small_config(40, activation="tanh")


def test_marian_positions_put_sines_first_then_cosines():
    d_model, length = 10, 17
    encoding = sinusoidal_encoding(length, d_model, "marian")
    for pos in range(length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert encoding[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert encoding[pos, d_model // 2 + i].item() == pytest.approx(math.cos(angle), abs=1e-6)
    paper = sinusoidal_encoding(length, d_model)
    torch.testing.assert_close(encoding, torch.cat([paper[:, 0::2], paper[:, 1::2]], dim=1))
    with pytest.raises(ValueError, match="positional_layout"):
        small_config(40, positional_layout="rotary")


def test_embeddings_unscaled_when_asked():
    model = Transformer(small_config(40, scale_embedding=False))
    ids = torch.tensor([[4, 5, 6]])
    torch.testing.assert_close(model.encoder.embed(ids), model.encoder.embed.embedding(ids))


def test_final_logits_bias_is_stored_and_added_to_the_logits():
    torch.manual_seed(0)
    model = Transformer(small_config(40, final_logits_bias=True)).eval()
    assert model.state_dict()["final_logits_bias"].shape == (1, model.config.tgt_vocab_size)
    src, tgt = random_batch(model.config.src_vocab_size, pad=False)
    before = model(src, tgt)
    bias = torch.randn(1, model.config.tgt_vocab_size)
    with torch.no_grad():
        model.final_logits_bias.copy_(bias)
    torch.testing.assert_close(model(src, tgt), before + bias)


def test_a_start_token_equal_to_pad_is_not_masked():
    config = small_config(40, bos_id=None, decoder_start_id=0)  # pad_id 0, as MarianMT decodes from <pad>
    torch.manual_seed(0)
    model = Transformer(config).eval()
    src, tgt = random_batch(config.src_vocab_size, pad=False)
    tgt[:, 0] = config.pad_id
    with torch.inference_mode(), capture_attention(model) as capture:
        logits = model(src, tgt)
    assert torch.isfinite(logits).all()
    first = capture.attention["decoder.layers.0.self_attn"][:, :, 0, 0]
    torch.testing.assert_close(first, torch.ones_like(first))
    with torch.inference_mode():  # the fused path agrees, and incremental decoding sees the same start token
        torch.testing.assert_close(model(src, tgt), logits)
        memory, allowed = model.encode(src)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, i : i + 1], memory, allowed, cache=cache, start=i) for i in range(tgt.size(1))]
        torch.testing.assert_close(torch.cat(steps, dim=1), logits, atol=1e-5, rtol=1e-5)
    later = tgt.clone()
    later[0, 3:] = config.pad_id  # later pad positions are still padding
    with torch.inference_mode(), capture_attention(model) as capture:
        model(src, later)
    assert (capture.attention["decoder.layers.0.self_attn"][0, :, 5, 3:] == 0).all()
    with pytest.raises(ValueError, match="decoder_start_id"):
        small_config(40, bos_id=None)


def test_a_model_converted_to_bf16_runs_in_bf16_on_the_cpu():
    """Only CPU autocast (--cpu-bf16 training) takes attention to fp32; a model converted with .to(bfloat16) keeps
    bf16 throughout and agrees with its fp32 original to bf16 precision."""
    torch.manual_seed(0)
    model = Transformer(small_config(40, norm_first=True, final_norm=True)).eval()
    src, tgt = torch.randint(4, 40, (2, 7)), torch.randint(4, 40, (2, 5))
    with torch.no_grad():
        expected = model(src, tgt)
        logits = model.to(torch.bfloat16)(src, tgt)
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits.float(), expected, rtol=0.05, atol=0.05)


def test_attention_is_captured_before_its_dropout_in_training_mode():
    """The probe sits between the softmax and the attention dropout: in train mode, with half of the weights
    dropped and the rest doubled on their way to the values, the captured rows are still probabilities, and a first
    layer's (whose input no dropout touched) are exactly what eval mode captures."""
    torch.manual_seed(0)
    model = Transformer(small_config(40, dropout=0.0, attention_dropout=0.5)).train()
    src, tgt = random_batch(40, pad=True)
    with capture_attention(model) as evaluated:
        model.eval()(src, tgt)
    torch.manual_seed(1)
    with capture_attention(model) as training:
        first = model.train()(src, tgt)
    assert not torch.allclose(first, model(src, tgt)), "the attention dropout must be active in train mode"
    for name, weights in training.attention.items():
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5), name
    for name in ("encoder.layers.0.self_attn", "decoder.layers.0.self_attn"):
        assert torch.allclose(training.attention[name], evaluated.attention[name], atol=1e-6), name


def test_the_positional_encoding_is_the_papers_formula_to_float32_precision():
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), computed in float64 and stored in float32:
    within float32's rounding of the exact values at every position of a 256-position table (a float32
    computation is off by about 1e-5 at the far positions)."""
    length, d = 256, 128
    angles = [[position / 10000 ** (2 * (i // 2) / d) for i in range(d)] for position in range(length)]
    exact = torch.tensor(
        [[math.sin(a) if i % 2 == 0 else math.cos(a) for i, a in enumerate(row)] for row in angles], dtype=torch.float64
    )
    interleaved = sinusoidal_encoding(length, d)
    assert interleaved.dtype == torch.float32
    assert (interleaved.double() - exact).abs().max() < 1e-6
    with pytest.raises(ValueError, match="unknown positional layout 'sideways'"):
        sinusoidal_encoding(4, 4, "sideways")


def test_the_positional_encoding_follows_the_input_dtype_and_refuses_positions_it_has_not():
    positional = PositionalEncoding(16, 8, 0.0)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        assert positional(torch.zeros(1, 3, 16, dtype=dtype)).dtype == dtype
    with pytest.raises(ValueError, match=r"sequence of 9 positions exceeds max_len=8"):
        positional(torch.zeros(1, 9, 16))
    with pytest.raises(ValueError, match=r"sequence of 10 positions exceeds max_len=8"):
        positional(torch.zeros(1, 3, 16), start=7)


def test_attention_dropout_acts_in_training_only_on_the_fused_path_too():
    """Without capture attention takes the fused kernel, which applies the attention dropout itself: in train mode
    two passes differ (nothing else drops), in eval mode they are equal and match the explicit path's."""
    torch.manual_seed(0)
    model = Transformer(small_config(40, dropout=0.0, attention_dropout=0.5))
    src, tgt = random_batch(40, pad=True)
    model.train()
    assert not torch.allclose(model(src, tgt), model(src, tgt))
    model.eval()
    fused = model(src, tgt)
    assert torch.equal(model(src, tgt), fused)
    with capture_attention(model):
        explicit = model(src, tgt)
    assert torch.allclose(fused, explicit, atol=1e-5)
    without = Transformer(small_config(40, dropout=0.0, attention_dropout=0.0)).train()
    assert torch.equal(without(src, tgt), without(src, tgt))


# Padding masks, defaults and options that the mutation run of model/transformer.py found untested.

MARIAN_START = dict(bos_id=None, decoder_start_id=0)  # decoding starts from <pad> (pad_id 0), as MarianMT's does


def test_target_padding_spares_only_a_start_token_that_is_the_pad_id():
    from model.transformer import target_padding

    paper, marian = small_config(40), small_config(40, **MARIAN_START)
    ids = torch.tensor([[0, 5, 0, 7], [0, 0, 6, 0]])
    spared = (ids == 0).index_fill(1, torch.tensor([0]), False)  # position 0 unmasked, later pads still masked
    # a start token that is not the pad id: a pad at position 0 is padding like any other
    assert torch.equal(target_padding(ids, paper), ids == 0)
    assert torch.equal(target_padding(ids, marian), spared)  # positions start at 0 by default
    assert torch.equal(target_padding(ids, marian, start=2), ids == 0)  # position 2 holds no start token
    assert torch.equal(target_padding(torch.tensor([[0]]), marian), torch.tensor([[False]]))  # the first step alone
    # any leading shape (..., T): one sequence, and sequences of no positions yet
    assert torch.equal(target_padding(torch.tensor([0, 5, 0]), marian), torch.tensor([False, False, True]))
    for config in (paper, marian):
        assert target_padding(torch.zeros(2, 0, dtype=torch.long), config).shape == (2, 0)


def test_source_and_target_padding_masks_differ_only_at_a_start_token_that_is_the_pad_id():
    """The source's pad tokens are padding wherever they stand (here one at position 0: a left-padded source); the
    target's first position holds the start token, which is never padding, at position 0 only."""
    model = Transformer(small_config(40, **MARIAN_START)).eval()
    src = torch.tensor([[0, 5, 6, 3], [7, 8, 3, 0]])
    tgt = torch.tensor([[0, 9, 0], [0, 4, 5]])
    source_pads = src == 0
    target_pads = (tgt == 0).index_fill(1, torch.tensor([0]), False)
    assert torch.equal(model.padded(src), source_pads)
    assert torch.equal(model.padded(tgt, target=True), target_pads)
    assert torch.equal(model.padded(tgt, target=True, start=1), tgt == 0)
    assert torch.equal(model.padding_allowed(src), ~source_pads[:, None, None, :])
    assert torch.equal(model.encode(src)[1], ~source_pads[:, None, None, :])
    unpadded = tgt[1:]  # only its start token is the pad id: nothing to mask at position 0, a pad from position 1
    assert model.padding_allowed(unpadded, target=True) is None
    assert torch.equal(model.padding_allowed(unpadded, target=True, start=1), ~(unpadded == 0)[:, None, None, :])
    masks = model.attention_masks(src, tgt)
    assert torch.equal(masks["encoder_self"].keys, ~source_pads) and masks["encoder_self"].causal is None
    assert torch.equal(masks["cross"].keys, ~source_pads) and masks["cross"].causal is None
    assert torch.equal(masks["decoder_self"].keys, ~target_pads)
    assert torch.equal(masks["decoder_self"].causal, torch.ones(3, 3, dtype=torch.bool).tril())


def test_attention_masks_are_built_on_the_device_of_the_ids():
    """Tensors on the "meta" device stand in for an accelerator's: a mask left on the CPU could not be combined with
    them."""
    model = Transformer(small_config(40))
    src, tgt = random_batch(40, pad=True)
    masks = model.attention_masks(src.to("meta"), tgt.to("meta"))
    for kind, mask in masks.items():
        assert mask.keys.device.type == "meta", kind
    assert masks["decoder_self"].causal.device.type == "meta"


def test_a_full_pass_from_a_later_position_treats_a_pad_at_its_first_position_as_padding():
    """Without a cache, tgt_ids at positions start.. (start > 0) hold no start token: a pad id first is a padded key,
    so the later positions come out as if it were not there. One decoder layer: the padded query's own row, whose
    every key is masked, is undefined and must not reach the other positions through a second layer's keys."""
    torch.manual_seed(0)
    model = Transformer(small_config(40, n_decoder_layers=1, **MARIAN_START)).eval()
    src = torch.randint(4, 40, (2, 6))
    tgt = torch.tensor([[0, 9, 11, 4], [0, 5, 6, 7]])
    with torch.no_grad():
        memory, src_allowed = model.encode(src)
        with_pad = model.decode_states(tgt, memory, src_allowed, start=3)
        without = model.decode_states(tgt[:, 1:], memory, src_allowed, start=4)
    torch.testing.assert_close(with_pad[:, 1:], without)


def test_the_decoder_stack_starts_at_position_zero_by_default():
    torch.manual_seed(0)
    model = Transformer(small_config(40)).eval()
    src, tgt = random_batch(40, pad=False)
    with torch.no_grad():
        memory, src_allowed = model.encode(src)
        logits = model.logits(model.decoder(tgt, memory, None, src_allowed))
        torch.testing.assert_close(logits, model(src, tgt))


def test_every_layer_norm_uses_the_configured_epsilon():
    config = small_config(40, layer_norm_eps=1e-3, final_norm=True)
    norms = [module for module in Transformer(config).modules() if isinstance(module, nn.LayerNorm)]
    # two per encoder layer, three per decoder layer, one after each stack
    assert len(norms) == 2 * config.n_encoder_layers + 3 * config.n_decoder_layers + 2
    assert {norm.eps for norm in norms} == {1e-3}


def test_unscaled_embeddings_apply_to_a_separate_target_embedding_too():
    model = Transformer(small_config(40, scale_embedding=False))
    assert model.decoder.embed is not model.encoder.embed
    ids = torch.tensor([[4, 5, 6]])
    torch.testing.assert_close(model.decoder.embed(ids), model.decoder.embed.embedding(ids))


def test_a_learned_positional_encoding_starts_at_the_papers_sinusoids():
    """reset_parameters draws every other matrix (Xavier) but leaves a learned encoding where 3.5 puts it."""
    config = small_config(40, positional_encoding="learned")
    model = Transformer(config)
    for stack in (model.encoder, model.decoder):
        assert isinstance(stack.positional.encoding, nn.Parameter)
        assert torch.equal(stack.positional.encoding.detach(), sinusoidal_encoding(config.max_len, config.d_model))


def test_final_logits_bias_is_added_in_the_logits_dtype_under_cpu_autocast():
    """Under CPU autocast (--cpu-bf16) the output projection gives bf16 logits; the float32 bias is added in bf16,
    so the logits stay bf16 rather than being promoted to float32."""
    torch.manual_seed(0)
    model = Transformer(small_config(40, final_logits_bias=True)).eval()
    with torch.no_grad():
        model.final_logits_bias.copy_(torch.randn(1, 40))
        hidden = torch.randn(2, 3, model.config.d_model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model.logits(hidden)
            projected = model.generator(hidden)
    assert projected.dtype == logits.dtype == torch.bfloat16
    assert torch.equal(logits, projected + model.final_logits_bias.to(torch.bfloat16))


META_VARIANTS = {
    "paper": {},
    "learned, unshared": dict(positional_encoding="learned", share_embeddings=False),
    "fairseq, offset, tied": dict(
        positional_layout="fairseq", position_offset=2, share_embeddings=True, tie_output=True, output_bias=False
    ),
    "marian, no encoding": dict(positional_layout="marian", positional_encoding="none", final_logits_bias=True),
}


def tensor_shapes(model: nn.Module) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {name: (tuple(t.shape), t.dtype) for name, t in [*model.named_parameters(), *model.named_buffers()]}


@pytest.mark.parametrize("changes", META_VARIANTS.values(), ids=META_VARIANTS.keys())
def test_a_model_built_on_the_meta_device_has_the_real_ones_tensors(changes):
    """The explorer knows a checkpoint's size before loading it from a model built on the "meta" device
    (model.checkpoint.architecture): every parameter and buffer must be there with its shape and dtype, though
    nothing is drawn or computed for it."""
    config = small_config(40, **changes)
    shapes = architecture(config)
    real = Transformer(config)
    assert tensor_shapes(shapes) == tensor_shapes(real)
    assert all(t.is_meta for t in [*shapes.parameters(), *shapes.buffers()])


def test_a_model_built_on_the_meta_device_does_not_import_the_compiler():
    """A random draw or the sinusoid table computed for meta tensors imports torch._dynamo, a second of CPU at every
    server start that nothing else the explorer does needs; building the model there draws and computes nothing."""
    code = (
        "import sys, torch\n"
        "from model import TransformerConfig\n"
        "from model.checkpoint import architecture\n"
        "architecture(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]
