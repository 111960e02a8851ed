"""Parallel corpora: reading them (each side a sentence file, model.corpus), encoding them into examples, and
token-bucketed batches."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from model.corpus import read_lines

if TYPE_CHECKING:
    from model.config import TransformerConfig
    from model.tokenizer import Tokenizer


def split_file(folder: str | Path, split: str, lang: str) -> Path:
    """``{folder}/{split}.{lang}`` or its ``.gz`` twin, whichever exists."""
    folder = Path(folder)
    for candidate in (folder / f"{split}.{lang}", folder / f"{split}.{lang}.gz"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no {split}.{lang} or {split}.{lang}.gz in {folder}")


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """(source, target) sentence pairs from two line-aligned files; files of different lengths are refused."""
    source, target = read_lines(src_path), read_lines(tgt_path)
    if len(source) != len(target):
        raise ValueError(f"{src_path} has {len(source)} lines but {tgt_path} has {len(target)}")
    return list(zip(source, target, strict=True))


@dataclass
class Example:
    src: list[int]  # pieces + EOS
    tgt: list[int]  # BOS + pieces + EOS


def encode_examples(
    pairs: list[tuple[str, str]], tokenizer: Tokenizer, config: TransformerConfig, sampling: float = 0.0
) -> list[Example]:
    """Pieces + EOS on the source, the start token (BOS, or MarianMT's <pad>) + pieces + EOS on the target; over-long
    pairs are dropped.

    ``sampling`` > 0 draws each side's segmentation (``Tokenizer.encode``) instead of taking the best one.
    """
    examples = []
    for source, target in pairs:
        src = tokenizer.encode(source, "source", sampling) + [config.eos_id]
        tgt = [config.start_id] + tokenizer.encode(target, "target", sampling) + [config.eos_id]
        if 1 < len(src) <= config.max_len and 2 < len(tgt) <= config.max_len:
            examples.append(Example(src, tgt))
    return examples


def token_batches(examples: list[Example], max_tokens: int, seed: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, each padded size <= max_tokens, in shuffled order.

    A batch's padded size is its longest sentence (source or target) times its count, so sentences are sorted by
    that length, then by source length, with a seeded tie-break: both sides stay mostly real tokens (sorting by
    source length first would pad the targets more and make more batches). Shuffling the batches keeps the order
    random. The same seed gives the same batches on every process.
    """
    rng = random.Random(seed)
    keys = [(max(len(e.src), len(e.tgt)), len(e.src), rng.random()) for e in examples]
    order = sorted(range(len(examples)), key=lambda i: keys[i])
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        length = max(len(examples[index].src), len(examples[index].tgt))
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def collate(
    examples: list[Example], pad_id: int, source_pad_id: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> src (B, S) padded with source_pad_id (None: pad_id; a model's is its config's source_pad_id) and tgt (B, T)
    padded with pad_id (each built from padded lists at once, much faster than a tensor a row)."""

    def padded(rows: list[list[int]], pad: int) -> torch.Tensor:
        width = max(len(row) for row in rows)
        return torch.tensor([row + [pad] * (width - len(row)) for row in rows], dtype=torch.long)

    source_pad = pad_id if source_pad_id is None else source_pad_id
    return padded([e.src for e in examples], source_pad), padded([e.tgt for e in examples], pad_id)
