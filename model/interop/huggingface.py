"""Convert a Hugging Face translation model into a checkpoint folder: ``python -m model.import_hf --help``.

FOLDER is what ``save_pretrained`` writes (model and tokenizer), or a model id on the hub
(``facebook/nllb-200-distilled-600M``), downloaded with huggingface_hub into its cache first. config.json's
``model_type`` picks the converter: ``marian`` (OPUS-MT: model/interop/marian.py), ``mbart`` (mBART-50) and
``m2m_100`` (M2M100 and NLLB, told apart by their tokenizer: model/interop/bart_family.py). Other models are refused
with the reason. Weights are read from safetensors only (a pickle can run code: it is never read), settings with
json, pieces with sentencepiece; transformers is not needed. Anything that cannot be followed is refused naming the
key and its value, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from model.checkpoint import CheckpointError, read_json, save_checkpoint
from model.interop.bart_family import Family, bart_config, bart_state, family_of, family_vocabulary
from model.interop.marian import generation_defaults, import_marian, licence_of, vocabulary_sizes
from model.interop.marian_weights import load_into, read_weights, weight_files
from model.tokenizer import Languages, Tokenizer, load_sentencepiece
from model.transformer import Transformer

SUPPORTED = "marian (OPUS-MT), mbart (mBART-50), m2m_100 (M2M100, NLLB)"
# model types people bring that this converter does not follow, with the reason
REFUSED = {
    "nllb-moe": "NLLB's mixture-of-experts layers route each token to its own feed-forward experts",
    "nllb_moe": "NLLB's mixture-of-experts layers route each token to its own feed-forward experts",
    "t5": "T5 adds relative position buckets to attention and has no positional encoding to show",
    "mt5": "mT5 adds relative position buckets to attention and has no positional encoding to show",
    "bart": "BART's tokenizer is byte-level BPE (GPT-2's), not SentencePiece",
    "fsmt": "FSMT's tokenizer is Moses and BPE codes, not SentencePiece",
    "pegasus": "Pegasus is a summariser, not a translation model",
}
# what a download fetches: the converters' files, never a pickle
DOWNLOADED = ["*.json", "*.safetensors", "*.spm", "*.model", "README.md"]
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
SENTENCEPIECE_FILE = "sentencepiece.bpe.model"
# the language pair a converted many-language model opens on, when none is asked for: English to French, in each
# family's codes (the first code of the model's when it has neither)
DEFAULT_PAIR = {"mbart50": ("en_XX", "fr_XX"), "m2m100": ("en", "fr"), "nllb": ("eng_Latn", "fra_Latn")}


def resolve(source: str | Path) -> Path:
    """A local folder as it is; a hub model id (owner/name) downloaded into huggingface_hub's cache (its progress
    bar; offline, HF_HUB_OFFLINE=1, the cached snapshot) and that snapshot's folder."""
    path = Path(source)
    if path.is_dir():
        return path
    if not MODEL_ID.fullmatch(str(source)):
        raise CheckpointError(f"{source}: neither a folder nor a model id (owner/name)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as error:
        raise CheckpointError(
            f"{source}: downloading needs huggingface_hub (pip install -r requirements.txt)"
        ) from error
    try:
        return Path(snapshot_download(str(source), allow_patterns=DOWNLOADED))
    except Exception as error:  # the hub client's errors: no network, no such model, a gated one
        raise CheckpointError(f"{source}: cannot download it ({type(error).__name__}: {error})") from error


def import_hf(
    source: str | Path,
    out: str | Path,
    fp16: bool = False,
    name: str = "",
    languages: tuple[str | None, str | None] = (None, None),
) -> Path:
    """Convert a Hugging Face folder (or model id) into the checkpoint folder ``out``; returns ``out``.
    ``languages``: the source and target language codes a many-language model opens on (default: English to
    French)."""
    out = Path(out)
    if out.exists():
        raise CheckpointError(f"{out}: already exists; choose a new folder")
    folder = resolve(source)
    hf = read_json(folder / "config.json")
    model_type = str(hf.get("model_type") or "")
    if model_type == "marian":
        if any(languages):
            raise CheckpointError(
                f"{folder}: an OPUS-MT model has one language pair (a multi-target one reads >>xx<< in the sentence): "
                "--source-language and --target-language are for mBART-50, M2M100 and NLLB"
            )
        return import_marian(folder, out, fp16=fp16, name=name or _model_id(source))
    if model_type in ("mbart", "m2m_100"):
        return import_bart_family(folder, out, hf, fp16=fp16, name=name or _model_id(source), languages=languages)
    reason = REFUSED.get(model_type, "no converter for it")
    found = model_type or "no model_type"
    raise CheckpointError(f"{folder / 'config.json'}: model_type {found!r}: {reason}; supported: {SUPPORTED}")


def _model_id(source: str | Path) -> str:
    return "" if Path(source).is_dir() else str(source)


def import_bart_family(
    source: Path,
    out: Path,
    hf: dict[str, Any],
    fp16: bool = False,
    name: str = "",
    languages: tuple[str | None, str | None] = (None, None),
) -> Path:
    """Convert an mBART-50, M2M100 or NLLB folder (model_type mbart or m2m_100)."""
    files = weight_files(source)
    settings_path = source / "tokenizer_config.json"
    settings = read_json(settings_path) if settings_path.is_file() else {}
    family = family_of(hf, source, settings)
    if not (source / SENTENCEPIECE_FILE).is_file():
        raise CheckpointError(f"{source}: no {SENTENCEPIECE_FILE} ({family.title}'s SentencePiece model)")
    if not isinstance(hf.get("vocab_size"), int):
        raise CheckpointError(f"{source / 'config.json'}: vocab_size={hf.get('vocab_size')!r}")
    vocab, code_pieces = family_vocabulary(source, family, hf["vocab_size"])
    codes = {piece.strip("_") if family.name == "m2m100" else piece: piece for piece in code_pieces}
    legacy = family.name == "nllb" and bool(settings.get("legacy_behaviour"))
    processor = load_sentencepiece(source / SENTENCEPIECE_FILE)
    try:
        tokenizer = Tokenizer(processor, processor, vocab, None, Languages(codes, "suffix" if legacy else "prefix"))
    except ValueError as error:
        raise CheckpointError(f"{source}: {error}") from error
    config = bart_config(hf, family, hf["vocab_size"], source / "config.json")
    special = tokenizer.special_ids("target")
    for theirs, given in (
        ("pad_token_id", special["pad_id"]),
        ("eos_token_id", special["eos_id"]),
        ("bos_token_id", special["bos_id"]),
    ):
        if hf.get(theirs) is not None and hf[theirs] != given:
            raise CheckpointError(f"{source / 'config.json'}: {theirs}={hf[theirs]} but the tokenizer gives {given}")
    source_language, target_language = (
        chosen or default for chosen, default in zip(languages, default_pair(family, list(codes)), strict=True)
    )
    for code in (source_language, target_language):
        try:
            tokenizer.language_id(code)
        except ValueError as error:
            raise CheckpointError(f"{source}: {error}") from error
    model = Transformer(config)
    try:
        load_into(model, bart_state(read_weights(files), config))  # the file's tensors are freed once copied in
    except CheckpointError as error:
        raise CheckpointError(f"{files[0]}: {error}") from error
    model.eval().requires_grad_(False)
    source_model = name or str(hf.get("_name_or_path") or source.name)
    card = {
        "name": source_model,
        "source_model": source_model,
        "architecture": f"{family.title}, converted to the scratch Transformer",
        "licence": licence_of(source) or "unknown: see the source model's card",
        "source_language": source_language,
        "target_language": target_language,
        "domain": "broad (many languages)",
        "conversion": {
            "tool": "python -m model.import_hf",
            "from": str(source),
            "family": family.name,
            "weights": [path.name for path in files],
            "dtype": "float16" if fp16 else "float32",
            "language_codes": len(codes),
            "source_code": "after </s>" if legacy else "before its pieces",
        },
        "generation_defaults": generation_defaults(source, hf),
    }
    return save_checkpoint(out, model, tokenizer, card, half=fp16)


def default_pair(family: Family, codes: list[str]) -> tuple[str, str]:
    source, target = DEFAULT_PAIR[family.name]
    return (source if source in codes else codes[0], target if target in codes else codes[-1])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.import_hf",
        description=(
            "Convert a Hugging Face translation model (OPUS-MT, mBART-50, M2M100, NLLB) into a checkpoint folder the "
            "app lists. Reads safetensors, JSON and SentencePiece files only: nothing is unpickled."
        ),
    )
    parser.add_argument(
        "source", help="a save_pretrained folder, or a model id such as facebook/nllb-200-distilled-600M"
    )
    parser.add_argument("out_dir", help="checkpoint folder to write (must not exist yet), e.g. checkpoints/nllb-600m")
    parser.add_argument("--fp16", action="store_true", help="store fp16 weights (half the size; loaded back as fp32)")
    parser.add_argument("--name", default="", help="source model name for card.json (default: the id or folder)")
    parser.add_argument("--source-language", help="a many-language model's source language code to open on")
    parser.add_argument("--target-language", help="a many-language model's target language code to open on")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        out = import_hf(
            args.source,
            args.out_dir,
            fp16=args.fp16,
            name=args.name,
            languages=(args.source_language, args.target_language),
        )
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    print(
        f"wrote {out}: {config['n_encoder_layers']}+{config['n_decoder_layers']} layers, d_model {config['d_model']}, "
        f"{config['n_heads']} heads, {vocabulary_sizes(config)}"
    )
    return 0
