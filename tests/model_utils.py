"""Plain helpers the tests share (fixtures stay in conftest.py): a small model config and toy English text."""

from __future__ import annotations

import random

from model import TransformerConfig

WORDS = (
    "a the man woman dog cat child girl boy is are runs sits plays rides walks on in at with "
    "blue red green shirt bike street park snow water ball two three young old"
).split()


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
