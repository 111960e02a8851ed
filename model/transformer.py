"""The encoder-decoder Transformer of section 3.1, with residual + dropout + LayerNorm sublayers.

Each sublayer is ``LayerNorm(x + Dropout(Sublayer(x)))`` (post-norm, the paper) or, with
``norm_first``, ``x + Dropout(Sublayer(LayerNorm(x)))`` (pre-norm).

Masks: source padding (src == source_pad_id: pad_id, unless the source vocabulary has a pad of its own) hides
padded keys from encoder self-attention and from cross-attention; target padding (pad_id) hides padded keys from
decoder self-attention, which is also causal (a position sees itself and earlier positions only). Rows of padded
queries are computed but meaningless; the loss ignores them. The decoder's start token at
position 0 is never padding, even when it is the pad id (MarianMT starts from <pad>).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from model.capture import ACTIVATION, Probe, attach_probes, observes_activations
from model.config import TransformerConfig
from model.layers import (
    Dropout,
    FeedForward,
    KVCache,
    LayerNorm,
    MultiHeadAttention,
    PositionalEncoding,
    TokenEmbedding,
    causal_mask,
)

# One entry per decoder layer: {"self": KVCache, "cross": KVCache}. Lives with the request, never on the model.
DecoderCache = list[dict[str, KVCache]]


class AttentionMask(NamedTuple):
    """What one kind of attention may look at: both masks together give the keys each query may use."""

    keys: torch.Tensor  # (B, Tk) bool: False on padded keys
    causal: torch.Tensor | None  # (Tq, Tk) bool: key position <= query position; decoder self-attention only


def target_padding(ids: torch.Tensor, config: TransformerConfig, start: int = 0) -> torch.Tensor:
    """ids (..., T), decoder inputs at positions start.. -> bool (..., T), True on padding.

    Position 0 holds the start token, which is never padding even when it is the pad id
    (MarianMT decodes from <pad>; masking it would leave its attention rows all -inf).
    """
    padded = ids == config.pad_id
    if start == 0 and config.start_id == config.pad_id and ids.size(-1) > 0:
        padded[..., 0] = False
    return padded


def sublayer(
    x: torch.Tensor,
    block: Callable[[torch.Tensor], torch.Tensor],
    norm: LayerNorm,
    dropout: Dropout,
    norm_first: bool,
) -> torch.Tensor:
    """One residual sublayer (3.1): ``LayerNorm(x + Dropout(block(x)))`` post-norm, as in the paper, or
    ``x + Dropout(block(LayerNorm(x)))`` pre-norm."""
    if norm_first:
        return x + dropout(block(norm(x)))
    return norm(x + dropout(block(x)))


class EncoderLayer(nn.Module):
    """3.1 encoder layer: self-attention, then feed-forward."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.self_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout_p)
        self.feed_forward = FeedForward(config.d_model, config.d_ff, config.activation_dropout_p, config.activation)
        self.norm1 = LayerNorm(config.d_model, config.layer_norm_eps)
        self.norm2 = LayerNorm(config.d_model, config.layer_norm_eps)
        self.dropout1 = Dropout(config.dropout)
        self.dropout2 = Dropout(config.dropout)
        self.hook_resid_pre = Probe(ACTIVATION)
        self.hook_resid_mid = Probe(ACTIVATION)
        self.hook_resid_post = Probe(ACTIVATION)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        watched = observes_activations()
        x = self.hook_resid_pre(x) if watched else x
        x = sublayer(x, lambda h: self.self_attn(h, h, allowed), self.norm1, self.dropout1, self.norm_first)
        x = self.hook_resid_mid(x) if watched else x
        x = sublayer(x, self.feed_forward, self.norm2, self.dropout2, self.norm_first)
        return self.hook_resid_post(x) if watched else x


class DecoderLayer(nn.Module):
    """3.1 decoder layer: masked self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.self_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout_p)
        self.cross_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout_p)
        self.feed_forward = FeedForward(config.d_model, config.d_ff, config.activation_dropout_p, config.activation)
        self.norm1 = LayerNorm(config.d_model, config.layer_norm_eps)
        self.norm2 = LayerNorm(config.d_model, config.layer_norm_eps)
        self.norm3 = LayerNorm(config.d_model, config.layer_norm_eps)
        self.dropout1 = Dropout(config.dropout)
        self.dropout2 = Dropout(config.dropout)
        self.dropout3 = Dropout(config.dropout)
        self.hook_resid_pre = Probe(ACTIVATION)
        self.hook_resid_mid = Probe(ACTIVATION)
        self.hook_resid_mid_cross = Probe(ACTIVATION)
        self.hook_resid_post = Probe(ACTIVATION)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_allowed: torch.Tensor | None,
        memory_allowed: torch.Tensor | None,
        cache: dict[str, KVCache] | None = None,
    ) -> torch.Tensor:
        self_cache = cache["self"] if cache is not None else None
        cross_cache = cache["cross"] if cache is not None else None
        causal = self_allowed is None

        def self_block(h: torch.Tensor) -> torch.Tensor:
            return self.self_attn(h, h, self_allowed, cache=self_cache, is_causal=causal)

        def cross_block(h: torch.Tensor) -> torch.Tensor:
            return self.cross_attn(h, memory, memory_allowed, cache=cross_cache, static_kv=True)

        watched = observes_activations()
        x = self.hook_resid_pre(x) if watched else x
        x = sublayer(x, self_block, self.norm1, self.dropout1, self.norm_first)
        x = self.hook_resid_mid(x) if watched else x
        x = sublayer(x, cross_block, self.norm2, self.dropout2, self.norm_first)
        x = self.hook_resid_mid_cross(x) if watched else x
        x = sublayer(x, self.feed_forward, self.norm3, self.dropout3, self.norm_first)
        return self.hook_resid_post(x) if watched else x


class Stack(nn.Module):
    """3.1: embeddings + positional encoding, then N identical layers, and the optional final LayerNorm."""

    def __init__(self, config: TransformerConfig, embed: TokenEmbedding, layers: list[nn.Module]) -> None:
        super().__init__()
        self.embed = embed
        self.positional = PositionalEncoding(
            config.d_model,
            config.max_len,
            config.dropout,
            config.positional_layout,
            config.positional_encoding,
            config.position_offset,
        )
        # mBART's layernorm_embedding: the embedding sum normalised before the first layer
        self.embedding_norm = LayerNorm(config.d_model, config.layer_norm_eps) if config.embedding_norm else None
        self.config = config
        self.layers = nn.ModuleList(layers)
        self.norm = LayerNorm(config.d_model, config.layer_norm_eps) if config.final_norm else None
        self.hook_embed = Probe(ACTIVATION)
        self.hook_embed_pos = Probe(ACTIVATION)

    def embed_positions(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """ids (B, T) at positions start.. -> the first layer's input (B, T, d): scaled embeddings plus positions (and
        the embedding norm, when the model has one)."""
        padding = self.padding(ids, start) if self.config.positions_skip_padding else None
        if not observes_activations():
            return self.positional(self.embed(ids), start, padding, self.embedding_norm)
        embedded = self.hook_embed(self.embed(ids))
        if self.embedding_norm is None:
            return self.hook_embed_pos(self.positional(embedded, start, padding))
        norm = self.embedding_norm
        return self.positional(embedded, start, padding, lambda summed: norm(self.hook_embed_pos(summed)))

    def padding(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        """ids (B, T) at positions start.. -> (B, T) True on padding (each stack knows its own)."""
        raise NotImplementedError


class Encoder(Stack):
    """3.1 encoder: embeddings + positional encoding, then N identical layers."""

    def __init__(self, config: TransformerConfig, embed: TokenEmbedding) -> None:
        super().__init__(config, embed, [EncoderLayer(config) for _ in range(config.n_encoder_layers)])

    def padding(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        return ids == self.config.source_pad_id

    def forward(self, src_ids: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        x = self.embed_positions(src_ids)  # (B, S, d)
        for layer in self.layers:
            x = layer(x, allowed)
        return self.norm(x) if self.norm is not None else x


class Decoder(Stack):
    """3.1 decoder: embeddings + positional encoding, then N identical layers."""

    def __init__(self, config: TransformerConfig, embed: TokenEmbedding) -> None:
        super().__init__(config, embed, [DecoderLayer(config) for _ in range(config.n_decoder_layers)])

    def padding(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        return target_padding(ids, self.config, start)

    def forward(
        self,
        tgt_ids: torch.Tensor,
        memory: torch.Tensor,
        self_allowed: torch.Tensor | None,
        memory_allowed: torch.Tensor | None,
        cache: DecoderCache | None = None,
        start: int = 0,
    ) -> torch.Tensor:
        x = self.embed_positions(tgt_ids, start)  # (B, T, d)
        for index, layer in enumerate(self.layers):
            x = layer(x, memory, self_allowed, memory_allowed, cache[index] if cache is not None else None)
        return self.norm(x) if self.norm is not None else x


class Transformer(nn.Module):
    """Encoder-decoder Transformer; ``forward(src_ids, tgt_ids) -> logits`` (batch first)."""

    final_logits_bias: torch.Tensor | None  # a buffer (MarianMT's, registered below); None when the model has none

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        src_embed = TokenEmbedding(config.src_vocab_size, config.d_model, config.scale_embedding)
        tgt_embed = (
            src_embed
            if config.share_embeddings
            else TokenEmbedding(config.tgt_vocab_size, config.d_model, config.scale_embedding)
        )
        self.encoder = Encoder(config, src_embed)
        self.decoder = Decoder(config, tgt_embed)
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size, bias=config.output_bias)
        self.reset_parameters()
        if config.tie_output:
            self.generator.weight = tgt_embed.embedding.weight
        # MarianMT's final_logits_bias: a stored constant (1, V), not a trained parameter; None leaves it out.
        bias = torch.zeros(1, config.tgt_vocab_size) if config.final_logits_bias else None
        self.register_buffer("final_logits_bias", bias)
        self.hook_logits = Probe(ACTIVATION)
        attach_probes(self)

    def reset_parameters(self) -> None:
        """Xavier-uniform for every matrix, as the PyTorch translation tutorial does, except the token embeddings:
        N(0, 1/d_model) as in fairseq and tensor2tensor, so that times sqrt(d_model) (3.4) each dimension has unit
        variance and a token outweighs the positional encoding added to it.

        Xavier's std, sqrt(2 / (vocabulary + d_model)), is small for a large vocabulary: the positional encoding
        would outweigh the token at the input and every sentence would start out looking alike. Post-norm layers
        can still collapse the encoder (one vector for all positions, uniform cross-attention); pre-norm layers
        (``norm_first``) keep the positions apart (docs/training-recipe.md).
        """
        if self.generator.weight.is_meta:
            return  # shapes alone (layers.building_on_meta): nothing to draw
        for name, parameter in self.named_parameters():
            if parameter.dim() > 1 and not name.endswith("positional.encoding"):  # a learned encoding starts at 3.5's
                nn.init.xavier_uniform_(parameter)
        # a shared table is drawn once: a second draw would change what every seeded model (the tests') gets
        for embed in dict.fromkeys((self.encoder.embed, self.decoder.embed)):
            nn.init.normal_(embed.embedding.weight, mean=0.0, std=self.config.d_model**-0.5)

    def padded(self, ids: torch.Tensor, target: bool = False, start: int = 0) -> torch.Tensor:
        """(B, T) True on padding: the keys attention hides (3.2.3).

        ``target``: ids are decoder inputs at positions start..; the start token is never padding.
        """
        return target_padding(ids, self.config, start) if target else ids == self.config.source_pad_id

    def padding_allowed(self, ids: torch.Tensor, target: bool = False, start: int = 0) -> torch.Tensor | None:
        """(B, 1, 1, T) True on real tokens, or None when nothing is padded (lets kernels skip the mask)."""
        padded = self.padded(ids, target, start)
        if not bool(padded.any()):
            return None
        return ~padded[:, None, None, :]

    def attention_masks(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> dict[str, AttentionMask]:
        """The keys each kind of attention may use in ``forward(src_ids, tgt_ids)``, by kind ("encoder_self",
        "decoder_self", "cross"): the keys that are not padding (B, Tk) and, for decoder self-attention, the causal
        mask (T, T)."""
        source_keys = ~self.padded(src_ids)
        target_keys = ~self.padded(tgt_ids, target=True)
        length = tgt_ids.size(1)
        return {
            "encoder_self": AttentionMask(source_keys, None),
            "decoder_self": AttentionMask(target_keys, causal_mask(length, length, tgt_ids.device)),
            "cross": AttentionMask(source_keys, None),
        }

    def encode(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """src_ids (B, S) -> memory (B, S, d) and the source key mask reused by cross-attention."""
        src_allowed = self.padding_allowed(src_ids)
        return self.encoder(src_ids, src_allowed), src_allowed

    def decode(
        self,
        tgt_ids: torch.Tensor,
        memory: torch.Tensor,
        src_allowed: torch.Tensor | None,
        cache: DecoderCache | None = None,
        start: int = 0,
    ) -> torch.Tensor:
        """tgt_ids (B, T) at positions start.. -> logits (B, T, V).

        Without a cache this is the full causal pass (padding in tgt_ids is masked). With a
        cache, tgt_ids are the next tokens only and earlier keys/values come from the cache.
        """
        return self.logits(self.decode_states(tgt_ids, memory, src_allowed, cache, start))

    def decode_states(
        self,
        tgt_ids: torch.Tensor,
        memory: torch.Tensor,
        src_allowed: torch.Tensor | None,
        cache: DecoderCache | None = None,
        start: int = 0,
    ) -> torch.Tensor:
        """``decode`` without the output projection: tgt_ids (B, T) at positions start.. -> the decoder's output
        (B, T, d). Training's fused loss (model.training.loss) projects it only where the target is not padding."""
        self_allowed = None
        if cache is None:
            tgt_allowed = self.padding_allowed(tgt_ids, target=True, start=start)
            if tgt_allowed is not None:
                length = tgt_ids.size(1)
                self_allowed = tgt_allowed & causal_mask(length, length, tgt_ids.device)  # (B, 1, T, T)
        return self.decoder(tgt_ids, memory, self_allowed, src_allowed, cache=cache, start=start)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder output (B, T, d) -> logits (B, T, V): the output projection, plus final_logits_bias if any."""
        logits = self.generator(hidden)
        if self.final_logits_bias is not None:
            logits = logits + self.final_logits_bias.to(logits.dtype)
        return self.hook_logits(logits) if observes_activations() else logits

    def new_cache(self) -> DecoderCache:
        return [{"self": {}, "cross": {}} for _ in range(self.config.n_decoder_layers)]

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        """src_ids (B, S), tgt_ids (B, T) -> logits (B, T, tgt_vocab_size)."""
        memory, src_allowed = self.encode(src_ids)
        return self.decode(tgt_ids, memory, src_allowed)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
