"""ALTI+ (model.analysis.attribution.alti.alti_plus) re-derived from the paper's definitions, block by block.

Ferrando et al. 2022 (docs/attribution.md; the authors' mt-upc/transformer-contributions-nmt, ``out_qv_pre_ln``).
Nothing here comes from model.analysis: hooks on the real attention modules and layer norms record what every block
really received (its input, the memory the cross-attention really read, the layer norm's input) and what it really
returned, and the terms T_ij = Σ_h α_ij^h f_h(x_j), the layer norm taken linearly, the L1 contributions, the row
normalisation and the rollout are computed again below from the modules' own weight tensors. The models are small,
random and float64, with random biases and layer-norm gains and shifts (the default γ = 1, β = 0 would hide a
scaling mistake), in post-norm and pre-norm, and once with a final layer norm after the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

from model.analysis.attribution import alti_plus
from model.transformer import Transformer
from tests.helpers import small_config

VOCAB = 24
TOLERANCE = 1e-8
# pad 0, bos 2, eos 3 (TransformerConfig's defaults): the sequences use ids from 4 up, so nothing is padding
FIRST_WORD = 4


@dataclass
class Block:
    """What one attention block really received and returned in the model's own forward pass."""

    attention: nn.Module
    norm: nn.LayerNorm
    calls: dict


def random_model(
    seed: int, d_model: int, n_heads: int, norm_first: bool, final_norm: bool, weight_scale: float
) -> Transformer:
    """A float64 small_config model with every parameter drawn at random: weights (N(0, weight_scale² / d_model)),
    biases, layer-norm γ (some negative) and β."""
    torch.manual_seed(seed)
    config = small_config(
        VOCAB, d_model=d_model, n_heads=n_heads, d_ff=2 * d_model, norm_first=norm_first, final_norm=final_norm
    )
    model = Transformer(config).double().eval()
    generator = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                signs = torch.where(torch.rand(d_model, generator=generator) < 0.15, -1.0, 1.0).double()
                module.weight.copy_(signs * (0.4 + 1.2 * torch.rand(d_model, generator=generator).double()))
                module.bias.copy_(0.5 * torch.randn(d_model, generator=generator).double())
            elif isinstance(module, nn.Linear):
                scale = weight_scale / d_model**0.5
                module.weight.copy_(scale * torch.randn(module.weight.shape, generator=generator).double())
                if module.bias is not None:
                    module.bias.copy_(0.3 * torch.randn(module.bias.shape, generator=generator).double())
    return model


def record_blocks(model: Transformer, source_ids: list[int], decoder_input: list[int]) -> dict:
    """Run the model once with hooks on every attention module and on the layer norm of its sublayer; return per
    kind ("encoder_self", "decoder_self", "cross") and layer what each really got: the attention's query and
    key/value and its output, and the layer norm's input and output; and under "memory" the encoder's output
    ("unnormed_memory": its last layer's, before a final norm)."""
    kinds = {
        "encoder_self": [(layer.self_attn, layer.norm1) for layer in model.encoder.layers],
        "decoder_self": [(layer.self_attn, layer.norm1) for layer in model.decoder.layers],
        "cross": [(layer.cross_attn, layer.norm2) for layer in model.decoder.layers],
    }
    blocks = {kind: [Block(attention, norm, {}) for attention, norm in pairs] for kind, pairs in kinds.items()}
    handles = []
    stacks: dict[str, torch.Tensor] = {}

    def encoder_out(module, args, output):
        stacks["memory"] = output[0].detach().clone()

    handles.append(model.encoder.register_forward_hook(encoder_out))
    if model.encoder.norm is not None:

        def final_norm_in(module, args):
            stacks["unnormed_memory"] = args[0][0].detach().clone()

        handles.append(model.encoder.norm.register_forward_pre_hook(final_norm_in))

    def keep(calls: dict, name: str, value: torch.Tensor) -> None:
        assert name not in calls, f"{name} recorded twice: one pass should call each module once"
        calls[name] = value.detach().clone()

    for block_list in blocks.values():
        for block in block_list:
            calls = block.calls

            def attention_in(module, args, kwargs, calls=calls):
                query, key_value = args[0], args[1]
                allowed = args[2] if len(args) > 2 else kwargs.get("allowed")
                assert allowed is None  # no padding: only the causal mask, which we apply ourselves
                keep(calls, "query", query[0])
                keep(calls, "key_value", key_value[0])

            def attention_out(module, args, output, calls=calls):
                keep(calls, "attention_output", output[0])

            def norm_in(module, args, calls=calls):
                keep(calls, "norm_input", args[0][0])

            def norm_out(module, args, output, calls=calls):
                keep(calls, "norm_output", output[0])

            handles += [
                block.attention.register_forward_pre_hook(attention_in, with_kwargs=True),
                block.attention.register_forward_hook(attention_out),
                block.norm.register_forward_pre_hook(norm_in),
                block.norm.register_forward_hook(norm_out),
            ]
    try:
        with torch.no_grad():
            model(torch.tensor([source_ids]), torch.tensor([decoder_input]))
    finally:
        for handle in handles:
            handle.remove()
    return {**blocks, **stacks}


def terms_from_weights(attention: nn.Module, query: torch.Tensor, key_value: torch.Tensor, causal: bool):
    """T_ij = Σ_h α_ij^h f_h(x_j) with f_h(x) = (x W_V^h + b_V^h) W_O^h: (queries, keys, d_model), from the
    module's weight tensors; and the attention output it implies, Σ_j T_ij + b_O."""
    n_heads = attention.n_heads
    d_model = query.shape[-1]
    head_dim = d_model // n_heads

    def heads(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:  # (positions, heads, head_dim)
        weight, bias = linear.weight.detach(), linear.bias.detach()
        return (torch.einsum("pd,ed->pe", x, weight) + bias).reshape(len(x), n_heads, head_dim)

    q, k, v = heads(attention.q_proj, query), heads(attention.k_proj, key_value), heads(attention.v_proj, key_value)
    scores = torch.einsum("qhe,khe->hqk", q, k) / head_dim**0.5
    if causal:
        later = torch.ones(len(query), len(key_value), dtype=torch.bool).triu(diagonal=1)
        scores = scores.masked_fill(later, float("-inf"))
    alpha = scores.softmax(dim=-1)  # (heads, queries, keys)
    w_o = attention.out_proj.weight.detach().reshape(d_model, n_heads, head_dim)  # (d_model out, heads, head_dim)
    sent = torch.einsum("khe,fhe->hkf", v, w_o)  # f_h(x_j): (heads, keys, d_model)
    terms = torch.einsum("hqk,hkf->qkf", alpha, sent)
    return terms, terms.sum(dim=1) + attention.out_proj.bias.detach()


def block_from_definitions(block: Block, kind: str, post_norm: bool) -> torch.Tensor:
    """One block's ALTI+ contributions, rows summing to 1: (queries, keys) for self-attention, (queries, keys + 1)
    for cross-attention, its last column the residual."""
    calls = block.calls
    query, memory = calls["query"], calls["key_value"]
    residual = query if post_norm else calls["norm_input"]  # pre-norm: the attention reads LayerNorm(residual)
    if kind != "cross":
        torch.testing.assert_close(memory, query, rtol=0, atol=0)
    if not post_norm:
        torch.testing.assert_close(query, calls["norm_output"], rtol=0, atol=0)
    terms, attention_output = terms_from_weights(block.attention, query, memory, causal=kind == "decoder_self")
    # the decomposition adds up to what the module really returned
    torch.testing.assert_close(attention_output, calls["attention_output"], rtol=0, atol=1e-11)
    n_queries = len(query)
    if kind == "cross":
        contributors = torch.cat([terms, residual[:, None, :]], dim=1)
        own = torch.zeros(contributors.shape[:2], dtype=torch.float64)
        own[:, -1] = 1.0  # a row with nothing close keeps the decoder side
    else:
        own = torch.eye(n_queries, dtype=torch.float64)
        contributors = terms + own[:, :, None] * residual[:, None, :]  # x_i joins its own key's term
    bias = block.attention.out_proj.bias.detach()
    if post_norm:
        norm = block.norm
        total = residual + attention_output
        torch.testing.assert_close(total, calls["norm_input"], rtol=0, atol=1e-11)
        d_model = total.shape[-1]
        sigma = torch.sqrt(((total - total.mean(-1, keepdim=True)) ** 2).sum(-1) / d_model + norm.eps)  # (queries,)
        gamma, beta = norm.weight.detach(), norm.bias.detach()

        def normed(part: torch.Tensor) -> torch.Tensor:  # LayerNorm's linear part with the whole sum's sigma
            return gamma * (part - part.mean(-1, keepdim=True)) / sigma.reshape(-1, *([1] * (part.dim() - 1)))

        contributors = normed(contributors)
        output = contributors.sum(dim=1) + normed(bias.expand(n_queries, d_model)) + beta
        torch.testing.assert_close(output, calls["norm_output"], rtol=0, atol=1e-11)
    else:
        output = contributors.sum(dim=1) + bias
        torch.testing.assert_close(output, residual + calls["attention_output"], rtol=0, atol=1e-11)
    l1 = output.abs().sum(-1, keepdim=True)
    raw = torch.clamp(l1 - (output[:, None, :] - contributors).abs().sum(-1), min=0.0)
    raw = torch.where(raw.sum(-1, keepdim=True) > 0, raw, own)
    return raw / raw.sum(-1, keepdim=True)


def rollout(encoder: list[torch.Tensor], decoder: list[torch.Tensor], cross: list[torch.Tensor]):
    """R^ss = C_L … C_1; per decoder layer R^tt = M R^tt, R^ts = M R^ts, then with the cross block's residual share
    r: R^tt = r ⊙ R^tt, R^ts = r ⊙ R^ts + C[:, :-1] R^ss. Returns R^ts, R^tt."""
    n_source = encoder[0].shape[0]
    n_target = decoder[0].shape[0]
    source_self = torch.eye(n_source, dtype=torch.float64)
    for contributions in encoder:
        source_self = contributions @ source_self
    target_self = torch.eye(n_target, dtype=torch.float64)
    target_source = torch.zeros(n_target, n_source, dtype=torch.float64)
    for mixing, contributions in zip(decoder, cross, strict=True):
        target_self, target_source = mixing @ target_self, mixing @ target_source
        kept = contributions[:, -1:]
        target_self = kept * target_self
        target_source = kept * target_source + contributions[:, :-1] @ source_self
    return target_source, target_self


SETTINGS = {
    # name: (seed, d_model, heads, norm_first, final_norm, weight scale, source length, decoder input length); the
    # weight scales keep the residual's share of the cross-attention blocks away from 0 and 1, so that both the
    # source and the target side of the rollout are tested
    "post-norm": (21, 24, 3, False, False, 0.7, 6, 5),
    "pre-norm": (12, 32, 4, True, False, 0.85, 7, 6),
    "pre-norm, final norm": (13, 16, 2, True, True, 1.0, 5, 4),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_alti_plus_equals_the_definitions_rederived_from_hooks(setting):
    seed, d_model, n_heads, norm_first, final_norm, weight_scale, n_source, n_target = SETTINGS[setting]
    model = random_model(seed, d_model, n_heads, norm_first, final_norm, weight_scale)
    rng = np.random.default_rng(seed)
    eos, bos = model.config.eos_id, model.config.start_id
    source_ids = [int(i) for i in rng.integers(FIRST_WORD, VOCAB, n_source - 1)] + [eos]
    target_ids = [bos] + [int(i) for i in rng.integers(FIRST_WORD, VOCAB, n_target)]  # the decoder reads [:-1]
    decoder_input = target_ids[:-1]
    blocks = record_blocks(model, source_ids, decoder_input)
    for block in blocks["cross"]:  # every cross-attention read the encoder's output (with final_norm: normed)
        torch.testing.assert_close(block.calls["key_value"], blocks["memory"], rtol=0, atol=0)
    if final_norm:
        assert not torch.allclose(blocks["memory"], blocks["unnormed_memory"])
    expected = {
        kind: [block_from_definitions(block, kind, post_norm=not norm_first) for block in blocks[kind]]
        for kind in ("encoder_self", "decoder_self", "cross")
    }
    source, target = rollout(expected["encoder_self"], expected["decoder_self"], expected["cross"])

    found = alti_plus(model, source_ids, target_ids)

    for kind, matrices in expected.items():
        want = torch.stack(matrices).numpy()
        assert found.layers[kind].shape == want.shape, kind
        np.testing.assert_allclose(found.layers[kind], want, rtol=0, atol=TOLERANCE, err_msg=kind)
    np.testing.assert_allclose(found.source, source.numpy(), rtol=0, atol=TOLERANCE, err_msg="source")
    np.testing.assert_allclose(found.target, target.numpy(), rtol=0, atol=TOLERANCE, err_msg="target")
    # the comparison means something: the blocks are far from trivial and the source share is neither 0 nor 1
    assert all((matrix > 0.02).sum() > matrix.shape[0] for matrices in expected.values() for matrix in matrices)
    assert 0.1 < source.sum(-1).min() and source.sum(-1).max() < 0.9
