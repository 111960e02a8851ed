"""The word-order experiment: translate without the positional encoding, or with the source words shuffled.

``without_positional_encoding`` zeroes the sinusoidal encoding added to the embeddings;
``shuffle_source_words`` reorders the source. Without positions, encoder self-attention
cannot tell word order at all (its output for a permuted source is the same vectors
permuted). ``compare_word_order`` translates a sentence as is and under one variant.

The encoding is removed through ``model.capture.intervene``: the edit lives in the current
thread's context only, so the model shared by every session is never changed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from model.analysis.alignment import TokenDiff, token_diff
from model.analysis.pairs import AttentionPair, attention_pair
from model.capture import intervene
from model.decoding.sampling import Sampling
from model.decoding.scoring import Scoring
from model.decoding.search import DEFAULT_BEAM_SIZE
from model.heads import STACKS
from model.trace import DEFAULT_TOP_K, Trace
from model.transformer import Transformer

if TYPE_CHECKING:
    from model.translator import Translator

WORD_ORDER_VARIANTS = ("no-pe", "shuffle")


@contextmanager
def without_positional_encoding(model: Transformer, stacks: Sequence[str] = STACKS) -> Iterator[None]:
    """Add a zero positional encoding in ``stacks`` ("encoder", "decoder") inside the block, in this thread only.

    The embeddings then carry no position: encoder self-attention sees the source as a bag of
    pieces, and the decoder tells its steps apart only through the causal mask.
    """
    unknown = [stack for stack in stacks if stack not in STACKS]
    if unknown or not stacks:
        raise ValueError(f"stacks must be a non-empty selection of {STACKS}, not {tuple(stacks)!r}")
    names = {f"{stack}.positional" for stack in stacks}

    def edit(name: str, kind: str, value: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(value) if kind == "positional" and name in names else value

    with intervene(model, edit):
        yield


def shuffled_order(count: int, seed: int = 0) -> list[int]:
    """A seeded shuffle of range(count): position in the original of each shuffled word.

    It always moves at least one word when there are two or more, so a shuffle is never the
    sentence itself.
    """
    rng = random.Random(seed)
    identity = list(range(count))
    order = identity[:]
    rng.shuffle(order)
    while count > 1 and order == identity:
        rng.shuffle(order)
    return order


def shuffle_source_words(text: str, seed: int = 0) -> str:
    """The whitespace-separated words of ``text`` in a seeded random order (punctuation stays on its word)."""
    words = text.split()
    return " ".join(words[i] for i in shuffled_order(len(words), seed))


@dataclass
class WordOrderComparison:
    """A translation beside the same sentence without positional encoding, or with its words shuffled.

    ``modified`` is the experiment's trace: for "no-pe" the same source translated with the
    encoding zeroed in ``stacks`` (its ``positional`` arrays are the zeros that were added);
    for "shuffle" the shuffled sentence (``modified.source_text``), whose word i is the
    original's word ``shuffled_order[i]``. ``diff`` aligns the two outputs.
    """

    variant: str  # one of WORD_ORDER_VARIANTS
    original: Trace
    modified: Trace
    diff: TokenDiff
    stacks: tuple[str, ...]  # "no-pe": where the encoding was removed; "shuffle": empty
    seed: int | None  # "shuffle" only
    shuffled_order: list[int]  # "shuffle" only; empty for "no-pe"

    def attention_pair(self, module_name: str, head: int) -> AttentionPair:
        """One head's attention in the original and in the experiment, aligned where their pieces match."""
        return attention_pair(self.original, self.modified, module_name, head)


def compare_word_order(
    translator: Translator,
    text: str,
    variant: str = "no-pe",
    seed: int = 0,
    beam_size: int = DEFAULT_BEAM_SIZE,
    max_new_tokens: int | None = None,
    *,
    stacks: Sequence[str] = STACKS,
    top_k: int = DEFAULT_TOP_K,
    scoring: Scoring | None = None,
    sampling: Sampling | None = None,
) -> WordOrderComparison:
    """Translate ``text`` as is and under a positional experiment: "no-pe" (encoding removed in ``stacks``)
    or "shuffle" (source words in a seeded random order, the model unchanged). ``scoring``, ``sampling``: as in
    Translator.trace."""
    if variant not in WORD_ORDER_VARIANTS:
        raise ValueError(f"variant must be one of {WORD_ORDER_VARIANTS}, not {variant!r}")

    def trace(source: str) -> Trace:
        return translator.trace(source, beam_size, max_new_tokens, top_k, scoring=scoring, sampling=sampling)

    original = trace(text)
    if variant == "no-pe":
        with without_positional_encoding(translator.model, stacks):
            modified = trace(text)
        removed_from, used_seed, order = tuple(stacks), None, []
        record: dict[str, Any] = {"name": "word_order", "variant": variant, "stacks": list(removed_from)}
    else:
        order = shuffled_order(len(text.split()), seed)
        modified = trace(shuffle_source_words(text, seed))
        removed_from, used_seed = (), seed
        record = {"name": "word_order", "variant": variant, "seed": seed, "shuffled_order": order}
    modified.outcome.experiment = record
    diff = token_diff(original.predicted_pieces, modified.predicted_pieces)
    return WordOrderComparison(variant, original, modified, diff, removed_from, used_seed, order)
