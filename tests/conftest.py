"""Shared fixtures: small random models and a tokenizer trained here on text the test writes."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

from model import Transformer, TransformerConfig
from model.checkpoint import save_checkpoint
from model.tokenizer import Tokenizer, train_sentencepiece

WORDS = (
    "a the man woman dog cat child girl boy is are runs sits plays rides walks on in at with "
    "blue red green shirt bike street park snow water ball two three young old"
).split()


def toy_sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + "." for _ in range(count)]


@pytest.fixture(scope="session")
def toy_tokenizer() -> Tokenizer:
    return Tokenizer.from_model_bytes(train_sentencepiece(toy_sentences(400), vocab_size=80))


def small_config(vocab: int, **overrides) -> TransformerConfig:
    settings = dict(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.0,
        max_len=64,
    )
    settings.update(overrides)
    return TransformerConfig(**settings)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, toy_tokenizer) -> Path:
    """A random 2+2-layer model with the toy tokenizer saved as a checkpoint folder."""
    torch.manual_seed(0)
    vocab = toy_tokenizer.vocab_size("source")
    model = Transformer(small_config(vocab, share_embeddings=True, tie_output=True, output_bias=False)).eval()
    folder = tmp_path_factory.mktemp("checkpoints") / "tiny-en-de"
    card = {"source_language": "en", "target_language": "de", "data": "random weights (tests)"}
    return save_checkpoint(folder, model, toy_tokenizer, card)


@pytest.fixture(scope="session")
def browser_ready() -> None:
    """Skip a browser test where headless Chromium is missing; in CI (CI=true) a missing browser fails it."""
    from browser_utils import missing_browser

    reason = missing_browser()
    if reason and os.environ.get("CI") == "true":
        pytest.fail(f"browser tests must run in CI: {reason}")
    if reason:
        pytest.skip(reason)


@pytest.fixture
def lesson_files(monkeypatch) -> dict:
    """The deferred download callables the page registers, by file name (called here as a click would)."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    registered: dict = {}
    original = MediaFileManager.add_deferred

    def add_deferred(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        registered[file_name] = data_callable
        return original(self, data_callable, mimetype, coordinates, file_name, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add_deferred", add_deferred)
    return registered
