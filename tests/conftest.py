"""Shared fixtures: small random models and a tokenizer trained here on text the test writes.

Plain helpers (small_config, toy_sentences) live in tests/model_utils.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from model import Transformer
from model.checkpoint import save_checkpoint
from model.tokenizer import Tokenizer, train_sentencepiece
from tests.model_utils import small_config, toy_sentences


@pytest.fixture(scope="session")
def toy_tokenizer() -> Tokenizer:
    return Tokenizer.from_model_bytes(train_sentencepiece(toy_sentences(400), vocab_size=80))


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
