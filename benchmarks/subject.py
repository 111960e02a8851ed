"""What the benchmarks run on: a checkpoint (default, newest, given) or a random model of the shipped shape.

Also sentences of an exact number of source pieces, so that "a 30-token sentence" means
the same thing for every tokenizer.
"""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from model import Transformer, TransformerConfig, load_checkpoint
from model.checkpoint import CheckpointError, save_checkpoint
from model.tokenizer import Tokenizer, train_sentencepiece
from model.translator import Translator

REPO = Path(__file__).resolve().parents[1]
CHECKPOINTS = REPO / "checkpoints"
DEFAULT_CHECKPOINT = CHECKPOINTS / "multi30k-en-de"
RANDOM = "random"
# The default checkpoint's architecture (checkpoints/multi30k-en-de), written out, not read from its config.json:
# this model stands in when that folder is missing or broken. tests/benchmarks/test_benchmarks.py checks that the
# two agree.
SHIPPED = dict(
    d_model=128,
    n_heads=4,
    n_encoder_layers=4,
    n_decoder_layers=4,
    d_ff=512,
    dropout=0.3,
    attention_dropout=0.0,
    activation_dropout=0.0,
    norm_first=True,
    final_norm=True,
    max_len=256,
    share_embeddings=True,
    tie_output=True,
    output_bias=False,
)
SHIPPED_VOCAB = 10000

WORDS = (
    "a man woman child girl boy dog dogs cat people group two three young old little black white red blue "
    "green yellow shirt hat jacket dress bike ball street park snow water beach building bench stairs field "
    "crowd city table car horse is are sitting standing running riding playing walking climbing jumping "
    "looking holding wearing throwing eating talking on in at with near behind front of the while and his "
    "her their large small tall wooden grassy sandy busy empty together outside inside down up over"
).split()


@dataclass
class Subject:
    """The loaded model and where it came from; ``folder`` is a checkpoint folder subprocesses can load."""

    translator: Translator
    folder: Path
    source: str  # "default checkpoint", "newest checkpoint", "given checkpoint" or "random model"
    notes: list[str] = field(default_factory=list)
    _temporary: tempfile.TemporaryDirectory | None = None

    @property
    def model(self) -> Transformer:
        return self.translator.model

    @property
    def device(self) -> torch.device:
        return self.translator.device

    def describe(self) -> dict[str, Any]:
        config = self.model.config
        return {
            "checkpoint": str(self.folder) if self.source != "random model" else RANDOM,
            "checkpoint_source": self.source,
            "layers": f"{config.n_encoder_layers}+{config.n_decoder_layers}",
            "d_model": config.d_model,
            "heads": config.n_heads,
            "d_ff": config.d_ff,
            "vocab": config.tgt_vocab_size,
            "device": str(self.device),
            "torch_threads": torch.get_num_threads(),
        }

    def close(self) -> None:
        if self._temporary is not None:
            self._temporary.cleanup()
            self._temporary = None


def newest_checkpoint(root: Path | None = None) -> Path | None:
    root = CHECKPOINTS if root is None else root
    folders = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] if root.is_dir() else []
    return max(folders, key=lambda p: p.stat().st_mtime) if folders else None


def resolve_subject(checkpoint: str | None, device: str) -> Subject:
    """``checkpoint``: a folder, "random", or None for checkpoints/multi30k-en-de, then the newest
    folder under checkpoints/, then a random model with the shipped architecture."""
    if checkpoint == RANDOM:
        return random_subject(device, ["--checkpoint random"])
    if checkpoint is not None:
        return Subject(load_checkpoint(checkpoint, device=device), Path(checkpoint), "given checkpoint")
    notes = []
    candidates = [("default checkpoint", DEFAULT_CHECKPOINT)]
    newest = newest_checkpoint()
    if newest is not None and newest != DEFAULT_CHECKPOINT:
        candidates.append(("newest checkpoint", newest))
    for source, folder in candidates:
        if not folder.is_dir():
            notes.append(f"{folder} does not exist")
            continue
        try:
            return Subject(load_checkpoint(folder, device=device), folder, source, notes)
        except CheckpointError as error:
            notes.append(f"{folder} skipped: {error}")
    return random_subject(device, notes)


def synthetic_sentences(count: int, seed: int = 0) -> list[str]:
    """Made-up words from syllables, Zipf-like frequencies: enough variety for a BPE of SHIPPED_VOCAB pieces."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    lexicon = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(20000)]
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    return [" ".join(rng.choices(lexicon, weights, k=rng.randint(5, 15))) for _ in range(count)]


def random_subject(device: str, notes: list[str]) -> Subject:
    """A random model with the shipped architecture and a SentencePiece model trained on made-up words."""
    tokenizer = Tokenizer.from_model_bytes(
        train_sentencepiece(WORDS + synthetic_sentences(20000), vocab_size=SHIPPED_VOCAB)
    )
    vocab = tokenizer.vocab_size("source")
    if vocab != SHIPPED_VOCAB:
        notes.append(f"the synthetic tokenizer reached {vocab} pieces, not {SHIPPED_VOCAB}")
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, **SHIPPED)).eval()
    temporary = tempfile.TemporaryDirectory(prefix="bench-random-")
    folder = save_checkpoint(Path(temporary.name) / "random-shipped", model, tokenizer, {"data": "random weights"})
    notes.append("no usable checkpoint: random weights, shipped architecture")
    return Subject(load_checkpoint(folder, device=device), folder, "random model", notes, temporary)


def sentence_with_pieces(translator: Translator, pieces: int, seed: int = 0) -> str:
    """English-looking text whose source ids (pieces + EOS) number ``pieces`` (at most the model's max_len;
    exactly, unless the tokenizer cannot hit it: check ``len(translator.source_ids(text).ids)``)."""
    rng = random.Random(seed)
    limit = min(pieces, translator.config.max_len)

    def count(text: str) -> int:  # before truncation, EOS included
        return translator.source_ids(text).original_length + 1

    words: list[str] = []
    while count(" ".join(words)) < limit:
        words.append(rng.choice(WORDS))
    while len(words) > 1 and count(" ".join(words)) > limit:
        words.pop()
    text = " ".join(words)
    for filler in ("a", "on", "in", "the", "and"):  # top up with short words
        while count(f"{text} {filler}") <= limit:
            text = f"{text} {filler}"
    return text
