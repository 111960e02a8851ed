"""mBART-50, M2M100 and NLLB as the scratch Transformer: BART-shaped translation models from fairseq, each the paper's
Transformer with a few switches (TransformerConfig options whose defaults are the paper's).

- mBART-50 (``model_type`` mbart): pre-norm with a final norm per stack, a layer norm on the embedding sum
  (``embedding_norm``), learned positions read from row 2 on (``position_offset``), GELU, scaled embeddings, a final
  logits bias.
- M2M100 and NLLB (``model_type`` m2m_100, told apart by their tokenizer): pre-norm with final norms, ReLU, scaled
  embeddings, fairseq's own sinusoids (``positional_layout="fairseq"``) from row padding id + 1 on, padding without a
  position (``positions_skip_padding``).

All three start decoding from ``</s>`` and write the target language's code first; the source carries its language's
code too. Keys real config.json files carry that transformers ignores for these models (``normalize_before``,
``add_final_layer_norm``, ``static_position_embeddings``, layerdrop) are not read, as transformers does not. Their
tokenizers are a SentencePiece model behind an id layout of their own (fairseq's: ``<s> <pad> </s>
<unk>`` first, the pieces shifted by one, the language codes after them; M2M100: a vocab.json, its codes after it):
the converter writes that layout out as a piece -> id table (vocab.json), read as MarianMT's is
(model.tokenizer), so the ids fed to the model are transformers' tokenizer's. This module maps the config, the
tensors and the tokenizer; model/interop/huggingface.py runs the import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from model.checkpoint import CheckpointError, read_json
from model.config import TransformerConfig
from model.interop.marian_weights import DECODER_LAYER_NAMES, ENCODER_LAYER_NAMES, OUTPUT_KEY
from model.layers import fairseq_sinusoids

# M2M100's 100 languages (transformers' FAIRSEQ_LANGUAGE_CODES["m2m100"]): code i has id len(vocab.json) + i, written
# "__code__"; eight made-up words follow them in the embedding
M2M100_CODES = (
    "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi hr ht hu "
    "hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro "
    "ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
).split()
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
PADDING_ROW = "<unused {}>"  # embedding rows no tokenizer id reaches (NLLB-200 has two): a piece no text is cut into


@dataclass(frozen=True)
class Family:
    """One family's tokenizer and model switches."""

    name: str  # "mbart50", "m2m100", "nllb"
    title: str  # as people call it
    tokenizer_classes: tuple[str, ...]  # transformers' tokenizer classes of the family (tokenizer_config.json)


FAMILIES = {
    "mbart50": Family("mbart50", "mBART-50", ("MBart50Tokenizer", "MBart50TokenizerFast")),
    "m2m100": Family("m2m100", "M2M100", ("M2M100Tokenizer",)),
    "nllb": Family("nllb", "NLLB-200", ("NllbTokenizer", "NllbTokenizerFast")),
}
# the families of each model_type, and the tokenizers of other models of that type, refused by name
MODEL_TYPES = {"mbart": ("mbart50",), "m2m_100": ("m2m100", "nllb")}
OTHER_TOKENIZERS = {
    "MBartTokenizer": "mBART-25's tokenizer writes the language code after </s>; mBART-50's tokenizer is supported",
    "MBartTokenizerFast": "mBART-25's tokenizer writes the language code after </s>; mBART-50's tokenizer is supported",
}


def family_of(hf: dict[str, Any], source: Path, settings: dict[str, Any]) -> Family:
    """The family of a model_type mbart or m2m_100 folder, from its tokenizer (tokenizer_config.json's class, or the
    files it has)."""
    model_type = hf.get("model_type")
    candidates = MODEL_TYPES[str(model_type)]
    tokenizer_class = str(settings.get("tokenizer_class") or "")
    if tokenizer_class in OTHER_TOKENIZERS:
        reason = OTHER_TOKENIZERS[tokenizer_class]
        raise CheckpointError(f"{source / 'tokenizer_config.json'}: tokenizer_class {tokenizer_class}: {reason}")
    for name in candidates:
        if tokenizer_class in FAMILIES[name].tokenizer_classes:
            return FAMILIES[name]
    if tokenizer_class:
        raise CheckpointError(
            f"{source / 'tokenizer_config.json'}: tokenizer_class {tokenizer_class} is not one of "
            f"{', '.join(c for name in candidates for c in FAMILIES[name].tokenizer_classes)}"
        )
    if len(candidates) == 1:
        return FAMILIES[candidates[0]]
    return FAMILIES["m2m100" if (source / "vocab.json").is_file() else "nllb"]


def bart_config(hf: dict[str, Any], family: Family, vocab_size: int, path: Path) -> TransformerConfig:
    """Our TransformerConfig for the family's Hugging Face config; refuses what we cannot reproduce, naming the key."""
    for ours, (encoder, decoder) in {
        "n_heads": ("encoder_attention_heads", "decoder_attention_heads"),
        "d_ff": ("encoder_ffn_dim", "decoder_ffn_dim"),
    }.items():
        if hf.get(encoder) != hf.get(decoder):
            raise CheckpointError(
                f"{path}: {encoder}={hf.get(encoder)} but {decoder}={hf.get(decoder)} (one {ours} for both stacks)"
            )
    activation = {"gelu": "gelu", "relu": "relu", "swish": "swish", "silu": "swish"}.get(
        str(hf.get("activation_function", "gelu" if family.name == "mbart50" else "relu"))
    )
    if activation is None:
        raise CheckpointError(
            f"{path}: activation_function={hf.get('activation_function')!r} (supported: gelu, relu, swish)"
        )
    if int(hf.get("vocab_size", 0)) != vocab_size:
        raise CheckpointError(f"{path}: vocab_size={hf.get('vocab_size')} but the tokenizer gives {vocab_size} ids")
    pad = int(hf.get("pad_token_id", 1))
    mbart = family.name == "mbart50"
    try:
        return TransformerConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=vocab_size,
            d_model=int(hf["d_model"]),
            n_heads=int(hf["encoder_attention_heads"]),
            n_encoder_layers=int(hf["encoder_layers"]),
            n_decoder_layers=int(hf["decoder_layers"]),
            d_ff=int(hf["encoder_ffn_dim"]),
            dropout=float(hf.get("dropout", 0.1)),
            attention_dropout=float(hf.get("attention_dropout", 0.0)),
            activation_dropout=float(hf.get("activation_dropout", 0.0)),
            activation=activation,
            norm_first=True,
            final_norm=True,
            layer_norm_eps=1e-5,
            max_len=int(hf.get("max_position_embeddings", 1024)),
            share_embeddings=True,
            tie_output=True,
            output_bias=False,
            pad_id=pad,
            unk_id=3,  # fairseq's layout, which all three keep: <s> 0, <pad> 1, </s> 2, <unk> 3
            bos_id=int(hf.get("bos_token_id", 0)),
            eos_id=int(hf.get("eos_token_id", 2)),
            positional_encoding="learned" if mbart else "sinusoidal",
            positional_layout="interleaved" if mbart else "fairseq",
            position_offset=2 if mbart else pad + 1,
            positions_skip_padding=not mbart,
            embedding_norm=mbart,
            scale_embedding=bool(hf.get("scale_embedding", False)),
            final_logits_bias=mbart,
            decoder_start_id=int(hf.get("decoder_start_token_id", 2)),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: cannot build a model from it ({error})") from error


def bart_state(tensors: dict[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Our state dict from the family's tensors (one shared embedding, the output tied to it); refuses a missing
    tensor or an output projection of its own, naming it."""
    state: dict[str, torch.Tensor] = {}
    wanted: dict[str, str] = {"model.shared.weight": "encoder.embed.embedding.weight"}
    for stack, names, count in (
        ("encoder", ENCODER_LAYER_NAMES, config.n_encoder_layers),
        ("decoder", DECODER_LAYER_NAMES, config.n_decoder_layers),
    ):
        for layer in range(count):
            for theirs, ours in names.items():
                for kind in ("weight", "bias"):
                    wanted[f"model.{stack}.layers.{layer}.{theirs}.{kind}"] = f"{stack}.layers.{layer}.{ours}.{kind}"
        for kind in ("weight", "bias"):
            wanted[f"model.{stack}.layer_norm.{kind}"] = f"{stack}.norm.{kind}"
            if config.embedding_norm:
                wanted[f"model.{stack}.layernorm_embedding.{kind}"] = f"{stack}.embedding_norm.{kind}"
        if config.positional_encoding == "learned":
            wanted[f"model.{stack}.embed_positions.weight"] = f"{stack}.positional.encoding"
    if config.final_logits_bias:
        wanted["final_logits_bias"] = "final_logits_bias"
    if "model.shared.weight" not in tensors:  # saved without the shared copy: the encoder's is the same matrix
        tensors = {**tensors, "model.shared.weight": tensors.get("model.encoder.embed_tokens.weight")}  # type: ignore[dict-item]
    missing = [key for key in wanted if tensors.get(key) is None]
    if missing:
        raise CheckpointError(f"missing tensors: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    head = tensors.get(OUTPUT_KEY)
    if head is not None and not torch.equal(head, tensors["model.shared.weight"]):
        raise CheckpointError(f"{OUTPUT_KEY} differs from model.shared.weight: an untied output projection")
    for theirs, ours in wanted.items():
        state[ours] = tensors[theirs].float()
    check_sinusoids(tensors, config)
    return state


def check_sinusoids(tensors: dict[str, torch.Tensor], config: TransformerConfig) -> None:
    """A stored sinusoidal table (older M2M100 saves) must be the one we compute: it is checked, never loaded."""
    if config.positional_layout != "fairseq":
        return
    expected = fairseq_sinusoids(config.position_offset + config.max_len, config.d_model)
    for stack in ("encoder", "decoder"):
        stored = tensors.get(f"model.{stack}.embed_positions.weights")
        if stored is None:
            continue
        rows = min(stored.size(0), expected.size(0))
        real = slice(config.position_offset, rows)  # the rows below are fairseq's padding rows (zeros)
        if stored.shape[1] != expected.shape[1] or not torch.allclose(stored[real].float(), expected[real], atol=1e-4):
            raise CheckpointError(f"model.{stack}.embed_positions.weights is not fairseq's sinusoidal table")


def family_vocabulary(source: Path, family: Family, size: int) -> tuple[dict[str, int], list[str]]:
    """The family's piece -> id table (SentencePiece pieces, special tokens and language codes, filled up to the
    model's ``size`` rows) and its language codes in id order."""
    if family.name == "m2m100":
        vocab_path = source / "vocab.json"
        if not vocab_path.is_file():
            raise CheckpointError(f"{source}: no vocab.json (M2M100's piece -> id table)")
        vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
        settings_path = source / "tokenizer_config.json"
        settings = read_json(settings_path) if settings_path.is_file() else {}
        if settings.get("language_codes", "m2m100") != "m2m100":
            raise CheckpointError(
                f"{settings_path}: language_codes={settings['language_codes']!r} (only M2M100's 100 languages)"
            )
        first = len(vocab)
        codes = list(M2M100_CODES)
        vocab |= {f"__{code}__": first + index for index, code in enumerate(codes)}
        code_pieces = [f"__{code}__" for code in codes]
    else:
        vocab, code_pieces = tokenizer_json_vocabulary(source / "tokenizer.json", family)
    return filled(vocab, size, source), code_pieces


def tokenizer_json_vocabulary(path: Path, family: Family) -> tuple[dict[str, int], list[str]]:
    """mBART-50's and NLLB's id layout as their tokenizer.json holds it: the model's pieces (a Unigram list or a BPE
    table) and the added tokens (the special tokens, the language codes, <mask>)."""
    if not path.is_file():
        raise CheckpointError(
            f"{path.parent}: no tokenizer.json ({family.title}'s id layout; save_pretrained writes it)"
        )
    data = read_json(path)
    model = data.get("model") or {}
    pieces = model.get("vocab")
    if isinstance(pieces, list):
        vocab = {str(entry[0]): index for index, entry in enumerate(pieces)}
    elif isinstance(pieces, dict):
        vocab = {str(piece): int(index) for piece, index in pieces.items()}
    else:
        raise CheckpointError(f"{path}: no model.vocab")
    codes = []
    for token in data.get("added_tokens") or []:
        vocab[str(token["content"])] = int(token["id"])
        if token.get("special") and str(token["content"]) not in (*FAIRSEQ_SPECIALS, "<mask>"):
            codes.append(str(token["content"]))
    if not codes:
        raise CheckpointError(f"{path}: no language codes among its added tokens")
    return vocab, sorted(codes, key=vocab.__getitem__)


def filled(vocab: dict[str, int], size: int, source: Path) -> dict[str, int]:
    """``vocab`` with a placeholder piece on every id below ``size`` that no piece has (rows of the embedding no text
    reaches); refuses ids outside the model's rows and two pieces on one id."""
    by_id: dict[int, str] = {}
    for piece, index in vocab.items():
        if not 0 <= index < size:
            raise CheckpointError(f"{source}: piece {piece!r} has id {index}, outside the model's {size} rows")
        if index in by_id:
            raise CheckpointError(f"{source}: pieces {by_id[index]!r} and {piece!r} share id {index}")
        by_id[index] = piece
    for index in range(size):
        by_id.setdefault(index, PADDING_ROW.format(index))
    return {piece: index for index, piece in sorted(by_id.items())}
