"""Import and export models built on torch.nn.Transformer, laid out like PyTorch's translation tutorial.

The official tutorial ("Language Translation with nn.Transformer and torchtext") defines a
``Seq2SeqTransformer`` with attributes ``transformer`` (sequence-first nn.Transformer),
``generator`` (nn.Linear), ``src_tok_emb.embedding`` / ``tgt_tok_emb.embedding``
(nn.Embedding, scaled by sqrt(d_model)) and ``positional_encoding.pos_embedding``
(sinusoidal buffer, shape (max_len, 1, d_model)). ``import_torch`` turns such a module into
our Transformer so that a model trained with the tutorial can be explored in the app;
``export_torch`` does the reverse. The classes below reproduce that layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol, cast

import torch
from torch import nn

from model.config import TransformerConfig
from model.layers import MultiHeadAttention, sinusoidal_encoding
from model.transformer import DecoderLayer, EncoderLayer, Transformer


class TutorialPositionalEncoding(nn.Module):
    pos_embedding: torch.Tensor  # (max_len, 1, d): a buffer

    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", sinusoidal_encoding(maxlen, emb_size).unsqueeze(-2))  # (L, 1, d)

    def forward(self, token_embedding: torch.Tensor) -> torch.Tensor:
        return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(0), :])


class TutorialTokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    """The tutorial's model: sequence-first nn.Transformer between embeddings and a generator."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.transformer = nn.Transformer(
            d_model=config.d_model,
            nhead=config.n_heads,
            num_encoder_layers=config.n_encoder_layers,
            num_decoder_layers=config.n_decoder_layers,
            dim_feedforward=config.d_ff,
            dropout=config.dropout,
            activation=config.activation,
            layer_norm_eps=config.layer_norm_eps,
            norm_first=config.norm_first,
        )
        if not config.final_norm:
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size, bias=config.output_bias)
        self.src_tok_emb = TutorialTokenEmbedding(config.src_vocab_size, config.d_model)
        self.tgt_tok_emb = (
            self.src_tok_emb
            if config.share_embeddings
            else TutorialTokenEmbedding(config.tgt_vocab_size, config.d_model)
        )
        if config.tie_output:
            self.generator.weight = self.tgt_tok_emb.embedding.weight
        self.positional_encoding = TutorialPositionalEncoding(config.d_model, config.dropout, config.max_len)

    def forward(  # noqa: PLR0917 - the tutorial's signature, which tutorial_logits calls positionally
        self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, memory_key_padding_mask
    ):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(
            src_emb, tgt_emb, src_mask, tgt_mask, None, src_padding_mask, tgt_padding_mask, memory_key_padding_mask
        )
        return self.generator(outs)


class _TokenEmbeddingParts(Protocol):
    @property
    def embedding(self) -> nn.Embedding: ...


class _PositionalEncodingParts(Protocol):
    @property
    def pos_embedding(self) -> torch.Tensor: ...


class TutorialLayout(Protocol):
    """The parts of a tutorial-style module this file reads, by the tutorial's attribute names: the tutorial's own
    Seq2SeqTransformer, or the one above."""

    @property
    def transformer(self) -> nn.Transformer: ...
    @property
    def generator(self) -> nn.Linear: ...
    @property
    def src_tok_emb(self) -> _TokenEmbeddingParts: ...
    @property
    def tgt_tok_emb(self) -> _TokenEmbeddingParts: ...
    @property
    def positional_encoding(self) -> _PositionalEncodingParts: ...


def tutorial_logits(module: nn.Module, src_ids: torch.Tensor, tgt_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Batch-first logits of a tutorial-style module, with the tutorial's masks -> (B, T, V)."""
    length = tgt_ids.size(1)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(length, device=tgt_ids.device, dtype=torch.bool)
    src_padding = src_ids == pad_id
    logits = module(
        src_ids.T,
        tgt_ids.T,
        torch.zeros(src_ids.size(1), src_ids.size(1), dtype=torch.bool, device=src_ids.device),
        tgt_mask,
        src_padding,
        tgt_ids == pad_id,
        src_padding,
    )
    return logits.transpose(0, 1)


def _activation_name(layer: nn.Module) -> str:
    flag = getattr(layer, "activation_relu_or_gelu", 0)
    if flag in (1, 2):
        return "relu" if flag == 1 else "gelu"
    raise ValueError("only ReLU and GELU feed-forward activations can be imported")


def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention, to_torch: bool) -> None:
    d = ours.q_proj.in_features
    projections = (ours.q_proj, ours.k_proj, ours.v_proj)
    with torch.no_grad():
        if to_torch:
            theirs.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
            theirs.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
            theirs.out_proj.weight.copy_(ours.out_proj.weight)
            theirs.out_proj.bias.copy_(ours.out_proj.bias)
        else:
            for index, projection in enumerate(projections):
                projection.weight.copy_(theirs.in_proj_weight[index * d : (index + 1) * d])
                projection.bias.copy_(theirs.in_proj_bias[index * d : (index + 1) * d])
            ours.out_proj.weight.copy_(theirs.out_proj.weight)
            ours.out_proj.bias.copy_(theirs.out_proj.bias)


def _copy_module(ours: nn.Module, theirs: nn.Module, to_torch: bool) -> None:
    with torch.no_grad():
        for ours_p, theirs_p in zip(ours.parameters(), theirs.parameters(), strict=True):
            (theirs_p if to_torch else ours_p).copy_(ours_p if to_torch else theirs_p)


def _copy_weights(model: Transformer, module: TutorialLayout, to_torch: bool) -> None:
    """Copy parameters between our Transformer and a tutorial-style module, in either direction."""
    transformer = module.transformer
    _copy_module(model.encoder.embed.embedding, module.src_tok_emb.embedding, to_torch)
    if not model.config.share_embeddings:
        _copy_module(model.decoder.embed.embedding, module.tgt_tok_emb.embedding, to_torch)
    if not model.config.tie_output:
        _copy_module(model.generator, module.generator, to_torch)
    elif model.config.output_bias:
        _copy_module_bias(model.generator, module.generator, to_torch)
    # torch types what a ModuleList holds as Module; our stacks hold EncoderLayers and DecoderLayers
    encoder_layers = cast(Iterable[EncoderLayer], model.encoder.layers)
    for encoder_layer, theirs in zip(encoder_layers, transformer.encoder.layers, strict=True):
        _copy_attention(encoder_layer.self_attn, theirs.self_attn, to_torch)
        for name in ("linear1", "linear2"):
            _copy_module(getattr(encoder_layer.feed_forward, name), getattr(theirs, name), to_torch)
        for name in ("norm1", "norm2"):
            _copy_module(getattr(encoder_layer, name), getattr(theirs, name), to_torch)
    decoder_layers = cast(Iterable[DecoderLayer], model.decoder.layers)
    for decoder_layer, theirs in zip(decoder_layers, transformer.decoder.layers, strict=True):
        _copy_attention(decoder_layer.self_attn, theirs.self_attn, to_torch)
        _copy_attention(decoder_layer.cross_attn, theirs.multihead_attn, to_torch)
        for name in ("linear1", "linear2"):
            _copy_module(getattr(decoder_layer.feed_forward, name), getattr(theirs, name), to_torch)
        for name in ("norm1", "norm2", "norm3"):
            _copy_module(getattr(decoder_layer, name), getattr(theirs, name), to_torch)
    if model.encoder.norm is not None:  # config.final_norm, and then the decoder has one too
        _copy_module(model.encoder.norm, transformer.encoder.norm, to_torch)
    if model.decoder.norm is not None:
        _copy_module(model.decoder.norm, transformer.decoder.norm, to_torch)


def _copy_module_bias(ours: nn.Linear, theirs: nn.Linear, to_torch: bool) -> None:
    with torch.no_grad():
        (theirs.bias if to_torch else ours.bias).copy_(ours.bias if to_torch else theirs.bias)


def import_torch(
    module: nn.Module, pad_id: int, bos_id: int | None, eos_id: int, unk_id: int | None = None
) -> Transformer:
    """Build our Transformer from a tutorial-style nn.Transformer module, with identical outputs."""
    for attribute in ("transformer", "generator", "src_tok_emb", "tgt_tok_emb", "positional_encoding"):
        if not hasattr(module, attribute):
            raise ValueError(f"module has no {attribute!r}: expected the PyTorch tutorial's Seq2SeqTransformer layout")
    # torch types a submodule read by name as Tensor | Module: the check above is what makes module a TutorialLayout
    tutorial = cast(TutorialLayout, module)
    transformer = tutorial.transformer
    if getattr(transformer, "batch_first", False) or transformer.encoder.layers[0].self_attn.batch_first:
        raise ValueError("expected a sequence-first nn.Transformer, as in the tutorial")
    first = transformer.encoder.layers[0]
    src_embedding = tutorial.src_tok_emb.embedding
    tgt_embedding = tutorial.tgt_tok_emb.embedding
    positions = tutorial.positional_encoding.pos_embedding.reshape(-1, src_embedding.embedding_dim)
    if not torch.allclose(positions.float().cpu(), sinusoidal_encoding(*positions.shape), atol=1e-4):
        raise ValueError("positional_encoding.pos_embedding is not the sinusoidal encoding of the paper")
    shared = src_embedding is tgt_embedding or src_embedding.weight is tgt_embedding.weight
    unused_ids = sorted({0, 1, 2, 3} - {pad_id, bos_id, eos_id})
    config = TransformerConfig(
        src_vocab_size=src_embedding.num_embeddings,
        tgt_vocab_size=tgt_embedding.num_embeddings,
        d_model=src_embedding.embedding_dim,
        n_heads=first.self_attn.num_heads,
        n_encoder_layers=len(transformer.encoder.layers),
        n_decoder_layers=len(transformer.decoder.layers),
        d_ff=first.linear1.out_features,
        dropout=first.dropout.p,
        activation=_activation_name(first),
        norm_first=first.norm_first,
        final_norm=transformer.encoder.norm is not None,
        layer_norm_eps=first.norm1.eps,
        max_len=positions.size(0),
        share_embeddings=shared,
        tie_output=tutorial.generator.weight is tgt_embedding.weight,
        output_bias=tutorial.generator.bias is not None,
        pad_id=pad_id,
        bos_id=bos_id,
        eos_id=eos_id,
        unk_id=unk_id if unk_id is not None else unused_ids[0] if unused_ids else 0,
    )
    reference = next(module.parameters())
    model = Transformer(config).to(device=reference.device, dtype=reference.dtype)
    _copy_weights(model, tutorial, to_torch=False)
    # Keep the module's own encoding values so outputs match bit for bit (they equal ours within 1e-4).
    for positional in (model.encoder.positional, model.decoder.positional):
        positional.encoding = positions.detach().clone()
    return model


def export_torch(model: Transformer) -> Seq2SeqTransformer:
    """A tutorial-style Seq2SeqTransformer with this model's weights (same outputs)."""
    config = model.config
    if config.positional_encoding == "learned":
        raise ValueError(
            "a learned positional encoding cannot be exported: the tutorial's stacks share one fixed table"
        )
    unexportable = [
        name
        for name, value in (
            ("embedding_norm", config.embedding_norm),
            ("position_offset", config.position_offset),
            ("positions_skip_padding", config.positions_skip_padding),
        )
        if value
    ]
    if unexportable:
        raise ValueError(f"{', '.join(unexportable)} cannot be exported: the tutorial's stacks have no such option")
    module = Seq2SeqTransformer(config)
    _copy_weights(model, module, to_torch=True)
    with torch.no_grad():
        module.positional_encoding.pos_embedding.copy_(model.encoder.positional.encoding.unsqueeze(-2))
    return module.to(next(model.parameters()).device)
