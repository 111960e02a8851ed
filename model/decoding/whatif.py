"""What-if decoding: take another token at one step of a translation and let the model continue.

A fork of a Trace keeps the original's output before step ``t``, forces the chosen token
(or the pieces of a typed word) at step ``t`` and decodes the rest as the original did
(greedy or beam search), by decoding with that output as a prefix. Because the decoder is
causal, the fork's steps before ``t`` read exactly what the original's read.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.config import TransformerConfig
from model.tokenizer import Tokenizer
from model.trace import Trace


@dataclass(frozen=True)
class Choice:
    """The token(s) forced at the fork step."""

    ids: list[int]
    pieces: list[str]
    notice: str | None  # set when typed text became several pieces (all of them are forced)


def resolve_choice(tokenizer: Tokenizer, config: TransformerConfig, token: int | str) -> Choice:
    """A token id (e.g. one of a step's top-k) or typed text (encoded as a new word) -> the ids to force.

    EOS may be chosen by id (the translation then ends there); padding and BOS never can,
    as the decoder never generates them.
    """
    if isinstance(token, str):
        ids = tokenizer.encode(token, "target")
        if not ids:
            raise ValueError(f"the text {token!r} has no pieces to force; type a word")
        pieces = tokenizer.pieces(ids, "target")
        notice = None
        if len(ids) > 1:
            notice = f"{token!r} is {len(ids)} pieces ({' '.join(pieces)}); all of them are forced, one per step."
        return Choice(ids, pieces, notice)
    if isinstance(token, bool) or not isinstance(token, int):
        raise ValueError(f"token must be a token id (int) or text (str), not {type(token).__name__}")
    vocab = config.tgt_vocab_size
    if not 0 <= token < vocab:
        raise ValueError(f"token id {token} is outside the target vocabulary (0..{vocab - 1})")
    if token in config.never_generated:
        raise ValueError(f"token id {token} is padding or BOS, which the decoder never generates")
    return Choice([token], tokenizer.pieces([token], "target"), None)


def fork_prefix(original: Trace, step: int, choice: Choice, config: TransformerConfig) -> list[int]:
    """The output ids a fork decodes from: the original's before ``step``, then the chosen ids."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < original.n_steps:
        raise ValueError(f"step must be an integer in 0..{original.n_steps - 1}, not {step!r}")
    prefix = list(original.target_ids[1 : step + 1]) + choice.ids
    room = config.max_sequence_tokens  # decoder positions: BOS and the output
    if len(prefix) > room:
        raise ValueError(
            f"forcing {len(choice.ids)} pieces at step {step} needs {len(prefix)} output positions; "
            f"the model has {room}"
        )
    return prefix
