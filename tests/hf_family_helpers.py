"""Tiny mBART-50, M2M100 and NLLB folders built with transformers, as ``save_pretrained`` writes them and as the hub
serves them (a SentencePiece model trained on a few hundred Multi30k lines in English, German and French, the
family's language codes, random weights), for the converter's tests (tests/model/test_import_hf.py)."""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from tests.helpers import REPO

MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
FAMILIES = ("mbart50", "m2m100", "nllb")
# each family's codes of the three Multi30k languages
LANGUAGES = {
    "mbart50": {"en": "en_XX", "de": "de_DE", "fr": "fr_XX"},
    "m2m100": {"en": "en", "de": "de", "fr": "fr"},
    "nllb": {"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn"},
}
SMALL = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 256,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
}


def multi30k_lines(language: str, count: int, skip: int = 0) -> list[str]:
    """Lines of the Multi30k validation set (../shared/data beside the checkout): skipped without it, except in CI."""
    path = MULTI30K / f"val.{language}.gz"
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing: CI runs with ../shared beside the checkout")
        pytest.skip(f"{path} is missing (../shared/data beside the checkout)")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.strip() for line in handle][skip : skip + count]


def fairseq_sentencepiece(model_type: str) -> bytes:
    """A SentencePiece model laid out as fairseq's: <unk> 0, <s> 1, </s> 2, no <pad> (the families add theirs around
    it). mBART-50's is a unigram model (transformers reads its tokenizer as one), NLLB's and M2M100's BPE."""
    lines = [line for language in ("en", "de", "fr") for line in multi30k_lines(language, 300)]
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buffer,
        vocab_size=300,
        model_type=model_type,
        character_coverage=1.0,
        pad_id=-1,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        minloglevel=2,
        hard_vocab_limit=False,
    )
    return buffer.getvalue()


def write_tokenizer(family: str, folder: Path, model: bytes) -> int:
    """The family's tokenizer files in ``folder`` (with sentencepiece.bpe.model); returns its number of ids."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sentencepiece.bpe.model").write_bytes(model)
    if family == "mbart50":
        tokenizer = transformers.MBart50Tokenizer.from_pretrained(folder, src_lang="en_XX", tgt_lang="fr_XX")
        tokenizer.save_pretrained(folder)
        return len(tokenizer)
    if family == "m2m100":
        processor = spm.SentencePieceProcessor(model_proto=model)
        pieces = ["<s>", "<pad>", "</s>", "<unk>"]
        pieces += [p for p in map(processor.id_to_piece, range(processor.get_piece_size())) if p not in pieces]
        (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False))
        tokenizer = transformers.M2M100Tokenizer(
            vocab_file=str(folder / "vocab.json"), spm_file=str(folder / "sentencepiece.bpe.model")
        )
        tokenizer.save_pretrained(folder)
        # the language codes follow vocab.json's pieces, then eight made-up words, as in M2M100's embedding
        return len(pieces) + len(tokenizer.lang_code_to_id) + tokenizer.num_madeup_words
    return write_nllb_tokenizer(folder)


def write_nllb_tokenizer(folder: Path) -> int:
    """NLLB's hub layout: the SentencePiece pieces shifted by one behind <s> <pad> </s> <unk>, then the 202 language
    codes, then <mask> (transformers 5 converts the SentencePiece model alone without the codes: they are added to
    its tokenizer.json here, where the hub's has them)."""
    import transformers
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    transformers.NllbTokenizer.from_pretrained(folder).save_pretrained(folder)
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    first = len(data["model"]["vocab"])
    kept = [token for token in data["added_tokens"] if token["content"] != "<mask>"]
    mask = next(token for token in data["added_tokens"] if token["content"] == "<mask>")
    codes = [{**kept[0], "id": first + i, "content": code} for i, code in enumerate(FAIRSEQ_LANGUAGE_CODES)]
    data["added_tokens"] = [*kept, *codes, {**mask, "id": first + len(codes)}]
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    config_path = folder / "tokenizer_config.json"
    settings = json.loads(config_path.read_text(encoding="utf-8"))
    settings["extra_special_tokens"] = list(FAIRSEQ_LANGUAGE_CODES)
    config_path.write_text(json.dumps(settings), encoding="utf-8")
    return first + len(codes) + 1


def hf_tokenizer(family: str, folder: Path, source: str | None = None, target: str | None = None):
    """transformers' own tokenizer of a folder, reading ``source`` and writing ``target`` (Multi30k names)."""
    import transformers

    classes = {
        "mbart50": transformers.MBart50Tokenizer,
        "m2m100": transformers.M2M100Tokenizer,
        "nllb": transformers.NllbTokenizer,
    }
    codes = LANGUAGES[family]
    options = {"src_lang": codes[source] if source else None, "tgt_lang": codes[target] if target else None}
    if family == "nllb":
        from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

        options["extra_special_tokens"] = list(FAIRSEQ_LANGUAGE_CODES)
    return classes[family].from_pretrained(folder, **{k: v for k, v in options.items() if v is not None})


SENTENCEPIECE_TYPES = {"mbart50": "unigram", "m2m100": "bpe", "nllb": "bpe"}


def build_folder(family: str, folder: Path, model: bytes, seed: int = 0, extra_rows: int = 0) -> Path:
    """A random model of the family with its tokenizer, saved as the hub has it (safetensors, generation config).
    Every weight is drawn (layer norms and biases too), so a misplaced norm or a bias left out changes the output.
    ``extra_rows``: embedding rows past the tokenizer's last id (NLLB-200's vocabulary has two)."""
    import transformers

    size = write_tokenizer(family, folder, model) + extra_rows
    common = {**SMALL, "vocab_size": size, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
    common |= {"decoder_start_token_id": 2, "scale_embedding": True}
    if family == "mbart50":
        config = transformers.MBartConfig(**common, activation_function="gelu", forced_eos_token_id=2)
        model_class = transformers.MBartForConditionalGeneration
    else:
        config = transformers.M2M100Config(**common, activation_function="relu")
        model_class = transformers.M2M100ForConditionalGeneration
    torch.manual_seed(seed)
    hf_model = model_class(config).eval()
    with torch.no_grad():
        for name, parameter in hf_model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.2 * torch.randn_like(parameter))
        if family == "mbart50":
            hf_model.final_logits_bias.normal_(0.0, 0.5)
    hf_model.save_pretrained(folder)
    generation = {"decoder_start_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "bos_token_id": 0}
    generation |= {"max_length": 40, "num_beams": 4} if family != "nllb" else {"max_length": 40}
    (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return folder
