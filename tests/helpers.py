"""What the tests share (fixtures stay in tests/conftest.py): paths, a small model and toy text, hand-made traces and
the shipped checkpoints several layers test, hostile inputs (BAD_INPUTS, shared by the API, page and browser tests).
The page under AppTest: tests/app_helpers.py; headless Chromium and a real server: tests/browser_helpers.py; the
tiny MarianMT model: tests/marian_helpers.py.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from model import Transformer, TransformerConfig
from model.trace import Trace
from model.training.toy_tasks import VERBS

if TYPE_CHECKING:
    pass

# --- paths ---

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
CHECKPOINTS_ENV = "ATTENTION_EXPLORER_CHECKPOINTS"  # the folder app.py lists checkpoints from
DEFAULT_CHECKPOINT = REPO / "checkpoints" / "multi30k-en-de"  # the page's default, shipped with the repository

# --- models and text ---

WORDS = (
    "a the man woman dog cat child girl boy is are runs sits plays rides walks on in at with "
    "blue red green shirt bike street park snow water ball two three young old"
).split()
SENTENCE = "a man rides a blue bike in the park."  # words the toy tokenizer knows
SHORT_MAX_LEN = 10  # an output limit that keeps traces of the (never stopping) random tiny model short


def toy_sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` seeded sentences of 3 to 9 words from WORDS, each ending with a full stop."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + "." for _ in range(count)]


def small_config(vocab: int, **overrides) -> TransformerConfig:
    """A 2+2-layer, 4-head, d_model 32 config without dropout; ``overrides`` replace any field."""
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


def random_model(vocab: int, seed: int) -> Transformer:
    """A random small_config model with shared embeddings and a tied output layer, as the tiny checkpoint's."""
    torch.manual_seed(seed)
    return Transformer(small_config(vocab, share_embeddings=True, tie_output=True, output_bias=False)).eval()


# --- hand-made traces, toy-task alignments, the shipped checkpoints ---

WORD_START = "\u2581"  # SentencePiece's mark of a piece that starts a word
_W = WORD_START
DOG_BITES_MAN = [f"{_W}the", f"{_W}dog", f"{_W}bit", "es", f"{_W}the", f"{_W}man", "</s>"]  # a minimal pair
MAN_BITES_DOG = [f"{_W}the", f"{_W}man", f"{_W}bit", "es", f"{_W}the", f"{_W}dog", "</s>"]
# three sentences of toy words: the head statistics of one trace, and pooled over several
STATISTICS_SENTENCES = ["a man rides a blue bike.", "two dogs play in the snow.", "the girl sits."]
INTERNALS_SENTENCE = "two young girls play with a ball in the park."  # long enough for keys after a mid step
# The decoding lesson's sentences (docs/decoding.md): two image captions like the training data, and a teacher's
# sentence unlike them, on which the shipped model is unsure
DECODING_LESSON_SENTENCES = (
    "A man in a blue shirt is riding a bike.",
    "Two dogs play in the snow.",
    "The teacher explains the lesson to the class.",
)
HELD_OUT_SEED = 20240  # a toy-task seed no training used (the shipped toy draws use seed 1)
UNLIKE_CAPTIONS = "The stock market crashed yesterday."  # unlike any image caption: its words split into many pieces
CAT = "The cat sat on the mat."  # caption-like enough that no signal fires, with a word ("sat") training barely saw
# name -> (source language, target language, lowercased BLEU floor on the first 20 test sentences, beam 5).
# Each floor sits a few points below what the shipped model scores on those 20 sentences, so a broken or swapped
# checkpoint fails and a sound one passes; a retrained model needs its floor set again. Twenty sentences say little
# about the whole test set: a model better there can score lower on these.
SHIPPED_MODELS = {
    "multi30k-en-de": ("en", "de", 36.0),
    "multi30k-de-en": ("de", "en", 44.0),
    "multi30k-en-fr": ("en", "fr", 54.0),
}


def hand_trace(source_pieces: list[str], target_pieces: list[str], translation: str, seed: int) -> Trace:
    """A Trace with random (row-normalised) attention of the right shapes for 1 layer and 2 heads."""
    rng = np.random.default_rng(seed)
    n_source, n_steps = len(source_pieces), len(target_pieces) - 1

    def attention(queries: int, keys: int) -> np.ndarray:
        return rng.dirichlet(np.ones(keys), size=(2, queries)).astype(np.float32)

    return Trace(
        source_text=" ".join(source_pieces),
        source_ids=list(range(n_source)),
        source_pieces=source_pieces,
        target_ids=list(range(n_steps + 1)),
        target_pieces=target_pieces,
        translation=translation,
        step_probs=np.ones(n_steps, dtype=np.float32),
        topk_ids=np.zeros((n_steps, 1), dtype=np.int64),
        topk_probs=np.ones((n_steps, 1), dtype=np.float32),
        topk_pieces=[["x"]] * n_steps,
        attention={
            "encoder.layers.0.self_attn": attention(n_source, n_source),
            "decoder.layers.0.self_attn": attention(n_steps, n_steps),
            "decoder.layers.0.cross_attn": attention(n_steps, n_source),
        },
        positional={},
        embedding_norms={},
    )


def expected_positions(task: str, source: list[str]) -> list[int]:
    """Where each output word of a toy task comes from, written out per task (independently of
    model.training.toy_tasks)."""
    n = len(source)
    if task == "copy":
        return list(range(n))
    if task == "reverse":
        return [n - 1 - i for i in range(n)]
    if task == "sort":
        return [source.index(symbol) for symbol in sorted(source)]
    verb = next(i for i, word in enumerate(source) if word in VERBS)
    return [i for i in range(n) if i != verb] + [verb]


# --- hostile inputs ---

BAD_INPUTS: dict[str, str] = {
    "empty": "",
    "whitespace only": " \t\n  ",
    "one character": "a",
    "10,000 characters": ("A man rides a bike. " * 500)[:10_000],
    "one 500-character word": "x" * 500,
    "emoji": "A dog 🐕 plays with a ball ⚽ 🎉",
    "CJK": "一个男人在骑自行车。",
    "Arabic (right-to-left)": "رجل يركب دراجة",
    "Hebrew (right-to-left)": "איש רוכב על אופניים",
    "combining marks": "Z\u0351\u0352a\u0353\u0354l\u0355g\u0356o\u0357 e\u0301 n\u0303",
    "zero-width characters": "a\u200bman\u200c rides\u200d a\ufeff bike\u2060",
    "control characters": "a man\x01\x02\x1b[31m rides\x7f a bike\r\n",
    "NUL": "a man\x00 rides a bike",
    "lone surrogates": "a man \ud800 rides \udfff a bike",
    "HTML and script tags": '<script>alert("x")</script><img src=x onerror=alert(1)><b>bold</b>',
    "markdown": "# Title\n**bold** _italic_ [link](http://example.com) `code` | a | b |\n---",
    "only punctuation": "!?.,;:--...\"'()[]{}",
    "only digits": "0123456789 42 3.14159",
    "same token 300 times": " ".join(["dog"] * 300),
}

# Inputs whose text must never reach a page unescaped.
MARKUP_INPUTS = ("HTML and script tags", "markdown")
# Markup the figure builders add themselves; anything else that looks like a tag came from the text.
OWN_MARKUP = re.compile(r"<i style='color:#6b6b6b'>|</i>|<br>|</?b>|</?extra>")
# Text for a handout: a script, Markdown emphasis and a tag that must all stay text.
HOSTILE = "<script>alert('x')</script> **not bold** & <b>b</b>"
EXTERNAL_REFERENCE = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=""", re.IGNORECASE)
