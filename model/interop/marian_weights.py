"""MarianMT's weights as the scratch Transformer's: read from safetensors (pickles refused unread), renamed layer
by layer, embeddings shared or kept per side, and the sinusoidal positions Marian computes checked rather than
loaded. model/interop/marian.py maps the config and runs the import."""

from __future__ import annotations

from pathlib import Path

import safetensors
import torch

from model.checkpoint import PICKLE_SUFFIXES, CheckpointError, read_json
from model.config import TransformerConfig
from model.layers import sinusoidal_encoding
from model.transformer import Transformer

SAFETENSORS_HINT = (
    "only pickled weights (pytorch_model.bin) were found, and pickles can run code, so they are not read; "
    "write safetensors once with your own transformers install: "
    "MarianMTModel.from_pretrained(SRC).save_pretrained(SRC, safe_serialization=True)"
)
# Hugging Face's names inside one layer -> ours, per stack.
ENCODER_LAYER_NAMES = {
    "self_attn.q_proj": "self_attn.q_proj",
    "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj",
    "self_attn.out_proj": "self_attn.out_proj",
    "self_attn_layer_norm": "norm1",
    "fc1": "feed_forward.linear1",
    "fc2": "feed_forward.linear2",
    "final_layer_norm": "norm2",
}
DECODER_LAYER_NAMES = {
    "self_attn.q_proj": "self_attn.q_proj",
    "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj",
    "self_attn.out_proj": "self_attn.out_proj",
    "self_attn_layer_norm": "norm1",
    "encoder_attn.q_proj": "cross_attn.q_proj",
    "encoder_attn.k_proj": "cross_attn.k_proj",
    "encoder_attn.v_proj": "cross_attn.v_proj",
    "encoder_attn.out_proj": "cross_attn.out_proj",
    "encoder_attn_layer_norm": "norm2",
    "fc1": "feed_forward.linear1",
    "fc2": "feed_forward.linear2",
    "final_layer_norm": "norm3",
}
EMBEDDING_KEYS = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
# With separate vocabularies each stack has its own embedding, and no model.shared.
SEPARATE_EMBEDDINGS = {
    "model.encoder.embed_tokens.weight": "encoder.embed.embedding.weight",
    "model.decoder.embed_tokens.weight": "decoder.embed.embedding.weight",
}
DECODER_EMBEDDING_KEY = "model.decoder.embed_tokens.weight"
OUTPUT_KEY = "lm_head.weight"
# Stored by older transformers versions; Marian computes them, so they are compared with our table, not loaded.
POSITION_KEYS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
POSITION_TOLERANCE = 1e-4  # float32 sines computed two ways (and fp16-saved tables) differ by less


def weight_files(source: Path) -> list[Path]:
    """model.safetensors, or the shards a model.safetensors.index.json names; pickles are refused unread."""
    single = source / "model.safetensors"
    if single.is_file():
        return [single]
    index = source / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: no weight_map")
        return [source / name for name in sorted(set(weight_map.values()))]
    pickles = sorted(p.name for p in source.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise CheckpointError(f"{source / pickles[0]}: {SAFETENSORS_HINT}")
    raise CheckpointError(f"{source}: no model.safetensors")


def read_weights(files: list[Path]) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            with safetensors.safe_open(str(path), framework="pt") as handle:
                for key in handle.keys():
                    tensors[key] = handle.get_tensor(key)
        except Exception as error:  # safetensors raises its own error types for truncated or corrupt files
            raise CheckpointError(f"{path}: cannot be read as safetensors ({error})") from error
    return tensors


def embedding_state(tensors: dict[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """The token embeddings under our names: the shared one once (under the encoder's name), or one per stack."""
    if not config.share_embeddings:
        missing = [key for key in SEPARATE_EMBEDDINGS if key not in tensors]
        if missing:
            raise CheckpointError(
                f"no {', '.join(missing)}: share_encoder_decoder_embeddings is false, so each stack has its own"
            )
        return {ours: tensors[theirs] for theirs, ours in SEPARATE_EMBEDDINGS.items()}
    embeddings = [key for key in EMBEDDING_KEYS if key in tensors]
    if not embeddings:
        raise CheckpointError(f"no shared embedding: expected one of {', '.join(EMBEDDING_KEYS)}")
    shared = tensors[embeddings[0]]
    for key in embeddings[1:]:
        if tensors[key].shape != shared.shape or not torch.equal(tensors[key], shared):
            raise CheckpointError(
                f"{key} differs from {embeddings[0]}, but share_encoder_decoder_embeddings is true (one embedding)"
            )
    return {"encoder.embed.embedding.weight": shared}


def marian_state(tensors: dict[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Hugging Face's tensor names -> ours."""
    state = embedding_state(tensors, config)
    if not config.tie_output:
        state["generator.weight"] = tensors[OUTPUT_KEY]
    state["final_logits_bias"] = tensors.get("final_logits_bias", torch.zeros(1, config.tgt_vocab_size))
    stacks = (
        ("encoder", config.n_encoder_layers, ENCODER_LAYER_NAMES),
        ("decoder", config.n_decoder_layers, DECODER_LAYER_NAMES),
    )
    check_positions(tensors, config)
    embeddings = EMBEDDING_KEYS if config.share_embeddings else tuple(SEPARATE_EMBEDDINGS)
    used = set(embeddings) | {"final_logits_bias", OUTPUT_KEY} | set(POSITION_KEYS)
    for stack, layers, names in stacks:
        for index in range(layers):
            for theirs, ours in names.items():
                for kind in ("weight", "bias"):
                    key = f"model.{stack}.layers.{index}.{theirs}.{kind}"
                    if key not in tensors:
                        raise CheckpointError(f"missing tensor {key} (config.json says {layers} {stack} layers)")
                    state[f"{stack}.layers.{index}.{ours}.{kind}"] = tensors[key]
                    used.add(key)
    unexpected = sorted(set(tensors) - used)
    if unexpected:
        shown = ", ".join(unexpected[:5]) + (" ..." if len(unexpected) > 5 else "")
        raise CheckpointError(f"tensors this importer does not know (another layout?): {shown}")
    return state


def check_positions(tensors: dict[str, torch.Tensor], config: TransformerConfig) -> None:
    """A stored positional table must be the one we compute (Marian's sines, then cosines): refuse any other, which
    this model would silently not use."""
    expected = sinusoidal_encoding(config.max_len, config.d_model, layout="marian")
    for key in POSITION_KEYS:
        if key not in tensors:
            continue
        stored = tensors[key].float()
        if stored.shape != expected.shape:
            raise CheckpointError(f"{key}: shape {tuple(stored.shape)}, but the config gives {tuple(expected.shape)}")
        worst = float((stored - expected).abs().max())
        if worst > POSITION_TOLERANCE:
            raise CheckpointError(
                f"{key} differs from the sinusoidal table this model computes (largest difference {worst:.3g}): "
                "learned or differently laid out positions are not supported"
            )


def load_into(model: Transformer, state: dict[str, torch.Tensor]) -> None:
    """Copy tensors into the model, refusing any whose shape disagrees with the config."""
    targets = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    problems = [
        f"{name}: file {tuple(value.shape)}, config {tuple(targets[name].shape)}"
        for name, value in state.items()
        if tuple(value.shape) != tuple(targets[name].shape)
    ]
    if problems:
        raise CheckpointError("shapes disagree with config.json: " + "; ".join(problems[:5]))
    with torch.no_grad():
        for name, value in state.items():
            targets[name].copy_(value.to(torch.float32))
