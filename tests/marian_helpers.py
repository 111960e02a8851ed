"""Builders behind the shared fixtures of tests/conftest.py: the tiny MarianMT model, its tokenizer files, and its
import, checked against Hugging Face."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

import torch

from model.tokenizer import load_sentencepiece, train_sentencepiece
from tests.helpers import toy_sentences

# --- the tiny MarianMT model (tests/conftest.py's marian fixture) ---

GERMAN = dict(
    zip(
        "a the man woman dog cat child girl boy is are runs sits plays rides walks on in at with".split(),
        "ein der Mann Frau Hund Katze Kind Mädchen Junge ist sind läuft sitzt spielt reitet geht auf in an mit".split(),
        strict=True,
    )
)


def transformers_or_skip():
    """The transformers package; without it the calling test skips, except in CI (CI=true), where it fails."""
    import pytest

    try:
        import transformers
    except ImportError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"transformers must be installed in CI (requirements-dev.txt): {error}")
        pytest.skip("transformers is not installed: pip install -r requirements-dev.txt to compare with MarianMT")
    return transformers


def german(sentence: str) -> str:
    return " ".join(GERMAN.get(word, word) for word in sentence.split())


def opus_vocab(spm_files: list[Path], extra: list[str]) -> dict[str, int]:
    """A vocabulary laid out as OPUS-MT's converter lays them out: </s> 0, <unk> 1, the SentencePiece models' pieces,
    ``extra`` (language codes), <pad> last."""
    pieces = ["</s>", "<unk>"]
    for path in spm_files:
        processor = load_sentencepiece(path)
        for index in range(processor.get_piece_size()):
            piece = processor.id_to_piece(index)
            if not processor.is_control(index) and not processor.is_unknown(index) and piece not in pieces:
                pieces.append(piece)
    return {piece: index for index, piece in enumerate([*pieces, *extra, "<pad>"])}


def write_vocab(path: Path, vocab: dict[str, int]) -> None:
    path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")


def write_spm_files(folder: Path, source_pieces: int, target_pieces: int) -> None:
    """source.spm (English) and target.spm (German) of about these many pieces, trained on toy sentences."""
    english = toy_sentences(300)
    (folder / "source.spm").write_bytes(train_sentencepiece(english, source_pieces, normalization="identity"))
    target = train_sentencepiece([german(s) for s in english], target_pieces, normalization="identity")
    (folder / "target.spm").write_bytes(target)


def write_tokenizer_files(folder: Path) -> dict[str, int]:
    """source.spm, target.spm and a joint vocab.json laid out as OPUS-MT's: </s> 0, <unk> 1, <pad> last."""
    write_spm_files(folder, 70, 90)
    vocab = opus_vocab([folder / "source.spm", folder / "target.spm"], [">>de<<", ">>fr<<"])
    write_vocab(folder / "vocab.json", vocab)
    return vocab


def write_separate_tokenizer_files(folder: Path) -> tuple[dict[str, int], dict[str, int]]:
    """source.spm, target.spm, vocab.json (the source's pieces and language codes) and target_vocab.json (the
    target's pieces), as a tc-big OPUS-MT model has them. The source vocabulary is the larger, so the two <pad> ids
    (each last) differ and the target's is a valid source id too, as MarianConfig's one pad_token_id must be."""
    write_spm_files(folder, 90, 60)
    vocab = opus_vocab([folder / "source.spm"], [">>de<<", ">>fr<<"])
    target_vocab = opus_vocab([folder / "target.spm"], [])
    write_vocab(folder / "vocab.json", vocab)
    write_vocab(folder / "target_vocab.json", target_vocab)
    return vocab, target_vocab


def run_importer(*args: str) -> subprocess.CompletedProcess:
    """``python -m model.import_hf ARGS``'s main (the converter of every family, Marian's too), in this process: its
    exit code and what it printed. The command itself, in a process of its own, is run by test_marian.py."""
    from model.interop.huggingface import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        returncode = main([str(arg) for arg in args])
    return subprocess.CompletedProcess(
        ["python", "-m", "model.import_hf", *map(str, args)], returncode, out.getvalue(), err.getvalue()
    )


def assert_attention_equal(capture, expected) -> None:
    """Every head of every layer of each kind captured from our model equals Hugging Face's output_attentions (the
    same number of modules, each within 1e-5)."""

    kinds = {
        "encoder.layers.{}.self_attn": expected.encoder_attentions,
        "decoder.layers.{}.self_attn": expected.decoder_attentions,
        "decoder.layers.{}.cross_attn": expected.cross_attentions,
    }
    for name, layers in kinds.items():
        for index, attention in enumerate(layers):
            torch.testing.assert_close(capture.attention[name.format(index)], attention, atol=1e-5, rtol=0)
    assert len(capture.attention) == sum(len(layers) for layers in kinds.values())


def logits_of_both(folder: Path, out: Path, sentence: str):
    """Hugging Face's logits for a MarianMT folder (its model and tokenizer loaded with from_pretrained) and ours for
    its import into ``out``, teacher-forced on ``sentence`` and its German."""
    import transformers

    from model import load_checkpoint
    from model.interop.huggingface import import_hf

    hf_model = transformers.MarianMTModel.from_pretrained(folder).eval()
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    ours = load_checkpoint(import_hf(folder, out), "cpu").model
    src = torch.tensor([hf_tokenizer(sentence).input_ids])
    target = hf_tokenizer(text_target=german(sentence)).input_ids
    tgt = torch.tensor([[hf_model.config.decoder_start_token_id, *target[:-1]]])
    with torch.no_grad():
        return hf_model(input_ids=src, decoder_input_ids=tgt).logits, ours(src, tgt)


def assert_validation_loss_is_per_sentence(translator, examples) -> None:
    """model.training.validation's batched loss equals the mean cross-entropy per target token of each example run
    alone (no padding): whatever padding the batch adds, the loss never sees it."""
    import torch.nn.functional as F

    from model.training.validation import validation_loss

    total, tokens = 0.0, 0
    with torch.no_grad():
        for example in examples:
            src, tgt = torch.tensor([example.src]), torch.tensor([example.tgt])
            logits = translator.model(src, tgt[:, :-1])
            total += float(F.cross_entropy(logits[0], tgt[0, 1:], reduction="sum"))
            tokens += len(example.tgt) - 1
    loss = validation_loss(translator.model, examples, translator.config, torch.device("cpu"))
    assert abs(loss - total / tokens) <= 1e-5 * total / tokens
