"""A many-language model's (mBART-50, M2M100, NLLB) choice of languages: the pair one call asks for (LanguagePair),
and the pair of every call in a block (``using_languages``: the page's views, the analyses that translate again).
Plain data and a context variable: torch-free. The tokenizer turns a code into the ids the model reads
(model.tokenizer.Tokenizer.language_pair)."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple


class LanguagePair(NamedTuple):
    """A many-language model's source and target language codes, e.g. ``LanguagePair("eng_Latn", "deu_Latn")``;
    None: the block's (``using_languages``), else the model card's."""

    source: str | None = None
    target: str | None = None


NO_LANGUAGES = LanguagePair()  # the block's or the card's pair (or none, for a model with one language pair)

# the pair of the calls in a block: per thread and task (each page session has its own), as captures are
_BLOCK_LANGUAGES: contextvars.ContextVar[LanguagePair] = contextvars.ContextVar("languages", default=NO_LANGUAGES)


@contextmanager
def using_languages(pair: LanguagePair) -> Iterator[None]:
    """Within the block, a many-language model's calls that name no language read ``pair``'s."""
    token = _BLOCK_LANGUAGES.set(pair)
    try:
        yield
    finally:
        _BLOCK_LANGUAGES.reset(token)


def block_languages() -> LanguagePair:
    """The pair ``using_languages`` set for this block (NO_LANGUAGES outside one)."""
    return _BLOCK_LANGUAGES.get()
