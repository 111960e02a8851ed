"""Import a MarianMT (OPUS-MT) model into the scratch Transformer (``python -m model.import_hf``, which runs it for a
model_type marian folder; ``python -m model.import_marian`` is that command's older name).

The source folder is what ``MarianMTModel.save_pretrained`` and ``MarianTokenizer.save_pretrained``
write (config.json, model.safetensors, source.spm, target.spm, vocab.json, and target_vocab.json for
a model with separate vocabularies). It is read directly: weights with safetensors, settings with
json, pieces with sentencepiece. Nothing is downloaded, nothing is unpickled, and transformers is
not needed. This module maps the config and runs the import; the weights are model/interop/marian_weights.py.

Marian is the paper's post-norm Transformer with a few differences, each a TransformerConfig
option: swish feed-forward activation, sinusoidal positions with all sines before all cosines
(not stored in the weights file: computed here), one embedding shared by encoder, decoder and
output plus a stored ``final_logits_bias``, no ``<s>`` (decoding starts from ``<pad>``, which
is not masked), and special ids taken from vocab.json. The tc-big models keep the two sides
apart (``share_encoder_decoder_embeddings`` false): an embedding per side, an output projection
of its own, and a target_vocab.json whose ``<pad>`` (last, as in vocab.json) may be another id
than the source's: ``source_pad_id``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from model.checkpoint import CheckpointError, read_json, save_checkpoint
from model.config import TransformerConfig
from model.decoding.authors import NEUTRAL
from model.interop.marian_weights import (
    DECODER_EMBEDDING_KEY,
    EMBEDDING_KEYS,
    OUTPUT_KEY,
    load_into,
    marian_state,
    read_weights,
    weight_files,
)
from model.tokenizer import MARIAN_FILES, MARIAN_TARGET_VOCAB, SpecialIds, SpecialName, Tokenizer
from model.transformer import Transformer

SUPPORTED = "MarianMTModel (config.json model_type 'marian')"
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
# generate's settings the card records: what model.decoding.authors follows, and those it names as not followed
GENERATION_KEYS = (
    "num_beams",
    "max_length",
    "max_new_tokens",
    "length_penalty",
    "early_stopping",
    "renormalize_logits",
    "forced_eos_token_id",
    "bad_words_ids",
    "decoder_start_token_id",
    "eos_token_id",
    "pad_token_id",
    *NEUTRAL,
)

# our special ids and MarianConfig's names for them, which must agree with the target vocabulary
CONFIG_SPECIAL_IDS: tuple[tuple[SpecialName, str], ...] = (("pad_id", "pad_token_id"), ("eos_id", "eos_token_id"))
# special pieces one id serves on both sides, with our names for their ids (only <pad> may differ)
SHARED_SPECIAL_PIECES: tuple[tuple[SpecialName, str], ...] = (
    ("eos_id", "</s>"),
    ("unk_id", "<unk>"),
    ("bos_id", "<s>"),
)

REQUIRED_KEYS = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
)


def shares_embeddings(hf: dict[str, Any]) -> bool:
    """Whether encoder, decoder and (unless a stored lm_head.weight says otherwise) output use one embedding:
    MarianConfig's ``share_encoder_decoder_embeddings``, true by default."""
    return bool(hf.get("share_encoder_decoder_embeddings", True))


def marian_config(
    hf: dict[str, Any], tokenizer: Tokenizer, path: Path, untied_output: bool = False
) -> TransformerConfig:
    """Our TransformerConfig for a Hugging Face MarianConfig dict; refuses what we cannot reproduce.
    ``untied_output``: the weights hold an output projection of their own (``has_own_output_projection``)."""
    _check_model_type(hf, path)
    shared = shares_embeddings(hf)
    vocab_size, decoder_vocab_size = _vocabulary_sizes(hf, tokenizer, path, shared)
    _check_stacks(hf, path)
    activation = _activation(hf, path)
    special, source_pad = _special_ids(hf, tokenizer, path)
    start = hf.get("decoder_start_token_id")
    start = special["pad_id"] if start is None else int(start)
    try:
        return TransformerConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=decoder_vocab_size,
            d_model=int(hf["d_model"]),
            n_heads=int(hf["encoder_attention_heads"]),
            n_encoder_layers=int(hf["encoder_layers"]),
            n_decoder_layers=int(hf["decoder_layers"]),
            d_ff=int(hf["encoder_ffn_dim"]),
            dropout=float(hf.get("dropout", 0.1)),
            # MarianConfig's own defaults: no dropout on attention weights or inside the feed-forward network
            attention_dropout=float(hf.get("attention_dropout", 0.0)),
            activation_dropout=float(hf.get("activation_dropout", 0.0)),
            activation=activation,
            norm_first=False,
            final_norm=False,
            layer_norm_eps=1e-5,
            max_len=int(hf.get("max_position_embeddings", 512)),
            share_embeddings=shared,
            tie_output=not untied_output,
            output_bias=False,
            pad_id=special["pad_id"],
            unk_id=special["unk_id"],
            bos_id=special["bos_id"],
            eos_id=special["eos_id"],
            positional_layout="marian",
            scale_embedding=bool(hf.get("scale_embedding", False)),
            final_logits_bias=True,
            decoder_start_id=start,
            source_pad_id=source_pad,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: cannot build a model from it ({error})") from error


def _refusal(path: Path, reason: str) -> CheckpointError:
    return CheckpointError(f"{path}: {reason}; this importer supports the OPUS-MT layout only")


def _check_model_type(hf: dict[str, Any], path: Path) -> None:
    """Refuse a config that is not a MarianMTModel's, or one without the keys every MarianConfig names."""
    architectures = hf.get("architectures") or []
    if hf.get("model_type") != "marian" or any(a != "MarianMTModel" for a in architectures):
        found = hf.get("model_type") or "no model_type"
        if architectures:
            found += f", architectures {', '.join(map(str, architectures))}"
        raise CheckpointError(f"{path}: {found} is not supported; supported: {SUPPORTED}")
    missing = [key for key in REQUIRED_KEYS if hf.get(key) is None]
    if missing:
        raise CheckpointError(f"{path}: no {', '.join(missing)}: a MarianConfig names every one of them")


def _vocabulary_sizes(hf: dict[str, Any], tokenizer: Tokenizer, path: Path, shared: bool) -> tuple[int, int]:
    """The source and target vocabulary sizes; refuses a tokenizer without vocab.json, and a shared embedding over
    two vocabularies."""
    if tokenizer.vocab is None:
        raise _refusal(path, "no vocab.json (a Marian tokenizer's piece -> id table)")
    if shared and tokenizer.separate_vocabularies:
        raise CheckpointError(
            f"{path}: share_encoder_decoder_embeddings is true (one embedding for both sides), but the folder has "
            f"a {MARIAN_TARGET_VOCAB} of its own: the target pieces would index the source's embedding"
        )
    vocab_size = int(hf["vocab_size"])
    # MarianConfig reads a missing or null decoder_vocab_size as vocab_size
    decoder_vocab_size = int(hf.get("decoder_vocab_size") or vocab_size)
    if shared and decoder_vocab_size != vocab_size:
        raise _refusal(path, f"decoder_vocab_size {decoder_vocab_size} differs from vocab_size {vocab_size}")
    return vocab_size, decoder_vocab_size


def _check_stacks(hf: dict[str, Any], path: Path) -> None:
    """Refuse encoder and decoder stacks of different shapes, and layer norms the paper's post-norm layer lacks."""
    for ours, (encoder, decoder) in {
        "n_heads": ("encoder_attention_heads", "decoder_attention_heads"),
        "d_ff": ("encoder_ffn_dim", "decoder_ffn_dim"),
    }.items():
        if hf[encoder] != hf[decoder]:
            raise _refusal(path, f"{encoder}={hf[encoder]} but {decoder}={hf[decoder]} (one {ours} for both stacks)")
    if hf.get("normalize_before") or hf.get("add_final_layer_norm") or hf.get("normalize_embedding"):
        raise _refusal(path, "pre-norm, final or embedding layer norms")


def _activation(hf: dict[str, Any], path: Path) -> str:
    """Our name of the feed-forward activation (MarianConfig's default: swish)."""
    activation = ACTIVATIONS.get(str(hf.get("activation_function", "swish")))
    if activation is None:
        raise _refusal(
            path, f"activation_function {hf.get('activation_function')!r} (supported: {', '.join(ACTIVATIONS)})"
        )
    return activation


def _special_ids(hf: dict[str, Any], tokenizer: Tokenizer, path: Path) -> tuple[SpecialIds, int]:
    """The target's special ids (decoding's: the start, what ends it, what it may not write) and the source's pad;
    refuses ids the config contradicts, and other special pieces whose ids differ between the two sides."""
    special = tokenizer.special_ids("target")
    target_file = MARIAN_TARGET_VOCAB if tokenizer.separate_vocabularies else "vocab.json"
    for ours, theirs in CONFIG_SPECIAL_IDS:
        if theirs in hf and hf[theirs] is not None and hf[theirs] != special[ours]:
            raise _refusal(path, f"{theirs}={hf[theirs]} but {target_file} gives {special[ours]}")
    # one id of each other special piece serves both sides (sources end with eos_id too); only <pad> may differ
    source_special = tokenizer.special_ids("source")
    for ours, piece in SHARED_SPECIAL_PIECES:
        if source_special[ours] != special[ours]:
            in_source, in_target = (
                "absent" if value is None else value for value in (source_special[ours], special[ours])
            )
            raise CheckpointError(
                f"{path.parent / 'vocab.json'}: {piece} is {in_source} but {in_target} in {target_file}; "
                f"this importer needs one {piece} id for both sides"
            )
    return special, source_special["pad_id"]


def has_own_output_projection(tensors: dict[str, torch.Tensor], hf: dict[str, Any]) -> bool:
    """Whether the output projection is a matrix of its own: ``tie_word_embeddings`` false, or a stored
    ``lm_head.weight`` that differs from the shared embedding. transformers uses a stored ``lm_head.weight`` as it
    is even when the config asks for tied weights (it warns and does not tie), so this does the same.

    With separate embeddings MarianConfig ties nothing, whatever ``tie_word_embeddings`` says: ``lm_head.weight``
    must be stored (transformers would draw a missing one at random), and only one equal to the decoder's embedding
    is tied to it here (the same logits, one matrix less)."""
    head = tensors.get(OUTPUT_KEY)
    if not shares_embeddings(hf):
        if head is None:
            raise CheckpointError(
                f"no {OUTPUT_KEY}, but share_encoder_decoder_embeddings is false, so the output projection is a "
                "matrix of its own: it is missing"
            )
        embedding = tensors.get(DECODER_EMBEDDING_KEY)
        return embedding is None or head.shape != embedding.shape or not torch.equal(head, embedding)
    embeddings = [key for key in EMBEDDING_KEYS if key in tensors]
    if head is None:
        if not hf.get("tie_word_embeddings", True):
            raise CheckpointError(
                f"no {OUTPUT_KEY}, but tie_word_embeddings is false: the output projection is missing"
            )
        return False
    if not hf.get("tie_word_embeddings", True) or not embeddings:
        return True
    shared = tensors[embeddings[0]]
    return head.shape != shared.shape or not torch.equal(head, shared)


def licence_of(source: Path) -> str | None:
    """The ``license:`` line of a Hugging Face model card's front matter (README.md), when there is one."""
    readme = source / "README.md"
    if not readme.is_file():
        return None
    text = readme.read_text(encoding="utf-8", errors="replace")
    front = re.match(r"---\s*\n(.*?)\n---", text, re.DOTALL)
    found = re.search(r"^licen[cs]e:\s*(\S.*)$", front.group(1), re.MULTILINE) if front else None
    return found.group(1).strip().strip("'\"") if found else None


def generation_defaults(source: Path, hf: dict[str, Any]) -> dict[str, Any]:
    """What Hugging Face's generate would use (config.json, overridden by generation_config.json); recorded only."""
    path = source / "generation_config.json"
    settings = {**hf, **(read_json(path) if path.is_file() else {})}
    return {key: settings[key] for key in GENERATION_KEYS if key in settings}


def check_separate_vocabs(settings: dict[str, Any], source: Path) -> None:
    """MarianTokenizer reads target_vocab.json only when tokenizer_config.json says ``separate_vocabs``, and fails
    without it when it does: refuse a folder where the two disagree, whose targets it would cut otherwise than
    the file suggests. Without tokenizer_config.json the file alone decides."""
    if "separate_vocabs" not in settings:
        return
    present = (source / MARIAN_TARGET_VOCAB).is_file()
    if bool(settings["separate_vocabs"]) != present:
        found = "there is a" if present else "there is no"
        raise CheckpointError(
            f"{source / 'tokenizer_config.json'}: separate_vocabs is {str(settings['separate_vocabs']).lower()} "
            f"but {found} {MARIAN_TARGET_VOCAB}"
        )


def import_marian(source: str | Path, out: str | Path, fp16: bool = False, name: str = "") -> Path:
    """Convert a save_pretrained MarianMT folder into a checkpoint folder; returns ``out``."""
    source, out = Path(source), Path(out)
    if not source.is_dir():
        raise CheckpointError(f"{source}: not a folder")
    if out.exists():
        raise CheckpointError(f"{out}: already exists; choose a new folder")
    files = weight_files(source)
    hf = read_json(source / "config.json")
    missing = [name for name in MARIAN_FILES if not (source / name).is_file()]
    if missing:
        raise CheckpointError(
            f"{source}: tokenizer files missing: {', '.join(missing)} (save MarianTokenizer with save_pretrained too)"
        )
    tokenizer_config = source / "tokenizer_config.json"
    tokenizer_settings = read_json(tokenizer_config) if tokenizer_config.is_file() else {}
    check_separate_vocabs(tokenizer_settings, source)
    try:
        tokenizer = Tokenizer.load_marian(source)
    except (FileNotFoundError, ValueError) as error:
        raise CheckpointError(str(error)) from error
    tensors = read_weights(files)
    try:
        untied = has_own_output_projection(tensors, hf)
    except CheckpointError as error:
        raise CheckpointError(f"{files[0]}: {error}") from error
    config = marian_config(hf, tokenizer, source / "config.json", untied_output=untied)
    target_file = MARIAN_TARGET_VOCAB if tokenizer.separate_vocabularies else "vocab.json"
    sizes = (
        ("source", "vocab.json", "vocab_size", config.src_vocab_size),
        ("target", target_file, "decoder_vocab_size", config.tgt_vocab_size),
    )
    for side, file, key, size in sizes:
        if tokenizer.vocab_size(side) != size:
            raise CheckpointError(
                f"{source / file}: {tokenizer.vocab_size(side)} pieces but config.json says {key} {size}"
            )
    model = Transformer(config)
    try:
        load_into(model, marian_state(tensors, config))
    except CheckpointError as error:
        raise CheckpointError(f"{files[0]}: {error}") from error
    model.eval().requires_grad_(False)
    source_model = name or str(hf.get("_name_or_path") or source.name)
    if untied:
        output_projection = "lm_head.weight, its own matrix"
    elif config.share_embeddings:
        output_projection = "tied to the shared embedding"
    else:
        output_projection = "tied to the decoder's embedding (lm_head.weight equals it)"
    card = {
        "name": source_model,
        "source_model": source_model,
        "architecture": "MarianMT (OPUS-MT), converted to the scratch Transformer",
        "licence": licence_of(source) or "unknown: see the source model's card",
        "source_language": tokenizer_settings.get("source_lang") or "",
        "target_language": tokenizer_settings.get("target_lang") or "",
        "domain": "broad (OPUS parallel data)",
        "conversion": {
            "tool": "python -m model.import_marian",
            "from": str(source),
            "weights": [path.name for path in files],
            "dtype": "float16" if fp16 else "float32",
            "positional_encoding": "computed (sines then cosines), not read from the weights",
            "output_projection": output_projection,
            "vocabularies": (
                f"separate: vocab.json (source, {config.src_vocab_size} pieces), "
                f"{MARIAN_TARGET_VOCAB} (target, {config.tgt_vocab_size} pieces)"
                if tokenizer.separate_vocabularies
                else f"one for both sides: vocab.json ({config.src_vocab_size} pieces)"
            ),
        },
        "generation_defaults": generation_defaults(source, hf),
        # a multi-target model reads one of these first, as ">>fr<<" (empty for a model with one target language)
        "target_language_codes": tokenizer.language_codes(),
    }
    return save_checkpoint(out, model, tokenizer, card, half=fp16)


def vocabulary_sizes(config: dict[str, Any]) -> str:
    source, target = config["src_vocab_size"], config["tgt_vocab_size"]
    return f"vocabulary {source}" if source == target else f"vocabularies {source} (source) and {target} (target)"
