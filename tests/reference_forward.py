"""An independent forward pass of our Transformer, written from the paper's equations and the model's weights alone
(torch.nn.functional, no module of ours called), that names every value it computes as the activation hook points
do (model.capture.activation_names). The hook points are tested against it."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from model import Transformer

ACTIVATION_FUNCTIONS = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}
# (the layer norm, the sublayer) of each residual sublayer: post-norm normalises after the sublayer, pre-norm before
SELF, CROSS = ("norm1", "self_attn"), ("norm2", "cross_attn")
ENCODER_FF, DECODER_FF = ("norm2", "feed_forward"), ("norm3", "feed_forward")


def reference_points(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every hook point of ``model(src, tgt)`` recomputed (eval mode: no dropout). Source padding
    (``config.source_pad_id``) is masked; ``tgt`` must hold no padding."""
    config = model.config
    points: dict[str, torch.Tensor] = {}
    source_allowed = (src != config.source_pad_id)[:, None, None, :]  # (B, 1, 1, S)
    length = tgt.size(1)
    causal = torch.ones(length, length, dtype=torch.bool).tril()

    def norm(module, x):
        return F.layer_norm(x, (config.d_model,), module.weight, module.bias, config.layer_norm_eps)

    def attention(module, query, key_value, allowed):
        heads, size = config.n_heads, config.d_model // config.n_heads

        def project(linear, x):
            return F.linear(x, linear.weight, linear.bias).view(x.size(0), x.size(1), heads, size).transpose(1, 2)

        q, k, v = project(module.q_proj, query), project(module.k_proj, key_value), project(module.v_proj, key_value)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(size)).masked_fill(~allowed, float("-inf"))
        merged = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(query.size(0), query.size(1), -1)
        return F.linear(merged, module.out_proj.weight, module.out_proj.bias)

    def feed_forward(module, x, prefix):
        hidden = ACTIVATION_FUNCTIONS[config.activation](F.linear(x, module.linear1.weight, module.linear1.bias))
        points[f"{prefix}.feed_forward.hook_hidden"] = hidden
        return F.linear(hidden, module.linear2.weight, module.linear2.bias)

    def residual(x, block, layer, prefix, names):
        """One sublayer: pre-norm x + block(norm(x)), post-norm norm(x + block(x)); ``names`` (the norm's, the
        sublayer's) name its points."""
        norm_name, sublayer_name = names
        norm_module = getattr(layer, norm_name)
        if config.norm_first:
            normed = points[f"{prefix}.{norm_name}.hook_out"] = norm(norm_module, x)
            out = points[f"{prefix}.{sublayer_name}.hook_out"] = block(normed)
            return x + out
        out = points[f"{prefix}.{sublayer_name}.hook_out"] = block(x)
        points[f"{prefix}.{norm_name}.hook_out"] = norm(norm_module, x + out)
        return points[f"{prefix}.{norm_name}.hook_out"]

    def embed(stack, ids, name):
        table = stack.embed.embedding.weight
        scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        embedded = points[f"{name}.hook_embed"] = F.embedding(ids, table) * scale
        offset = config.position_offset
        positions = stack.positional.encoding[offset : offset + ids.size(1)].expand_as(embedded)
        if config.positions_skip_padding:  # padding (never the decoder's start token) gets no position
            padding = ids == (config.source_pad_id if name == "encoder" else config.pad_id)
            padding[:, 0] &= name == "encoder"
            positions = positions * ~padding[..., None]
        summed = points[f"{name}.hook_embed_pos"] = embedded + positions
        if stack.embedding_norm is None:
            return summed
        points[f"{name}.embedding_norm.hook_out"] = norm(stack.embedding_norm, summed)
        return points[f"{name}.embedding_norm.hook_out"]

    def finish(stack, x, name):
        if stack.norm is not None:
            x = points[f"{name}.norm.hook_out"] = norm(stack.norm, x)
        return x

    x = embed(model.encoder, src, "encoder")
    for index, layer in enumerate(model.encoder.layers):
        prefix = f"encoder.layers.{index}"
        points[f"{prefix}.hook_resid_pre"] = x
        x = residual(x, lambda h, a=layer.self_attn: attention(a, h, h, source_allowed), layer, prefix, SELF)
        points[f"{prefix}.hook_resid_mid"] = x
        x = residual(x, lambda h, f=layer.feed_forward, p=prefix: feed_forward(f, h, p), layer, prefix, ENCODER_FF)
        points[f"{prefix}.hook_resid_post"] = x
    memory = finish(model.encoder, x, "encoder")

    x = embed(model.decoder, tgt, "decoder")
    for index, layer in enumerate(model.decoder.layers):
        prefix = f"decoder.layers.{index}"
        points[f"{prefix}.hook_resid_pre"] = x
        x = residual(x, lambda h, a=layer.self_attn: attention(a, h, h, causal), layer, prefix, SELF)
        points[f"{prefix}.hook_resid_mid"] = x
        x = residual(x, lambda h, a=layer.cross_attn: attention(a, h, memory, source_allowed), layer, prefix, CROSS)
        points[f"{prefix}.hook_resid_mid_cross"] = x
        x = residual(x, lambda h, f=layer.feed_forward, p=prefix: feed_forward(f, h, p), layer, prefix, DECODER_FF)
        points[f"{prefix}.hook_resid_post"] = x
    x = finish(model.decoder, x, "decoder")
    logits = F.linear(x, model.generator.weight, model.generator.bias)
    if model.final_logits_bias is not None:
        logits = logits + model.final_logits_bias
    points["hook_logits"] = logits
    return points
