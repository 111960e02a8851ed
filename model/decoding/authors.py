"""Decoding as an imported model's authors do: Hugging Face ``generate``'s settings, as the importer recorded them
on the card (``generation_defaults``), read as our search's beam size, length limit and Scoring.

What ``model.generate(input_ids)`` does with the folder's settings (transformers 5.0, the version the tests compare
with): a setting left out means generate's own default (one beam, ``max_length`` 20, length penalty 1.0, no early
stopping, no renormalisation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from model.config import TransformerConfig
from model.decoding.sampling import Sampling
from model.decoding.scoring import Scoring

# generate's values when a setting is absent (transformers.GenerationConfig's defaults)
GENERATE_DEFAULTS: dict[str, Any] = {
    "num_beams": 1,
    "max_length": 20,
    "length_penalty": 1.0,
    "early_stopping": False,
    "renormalize_logits": False,
    "do_sample": False,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
}
# Settings our search does not apply, with the value at which they change nothing.
NEUTRAL: dict[str, Any] = {
    "min_length": 0,
    "min_new_tokens": None,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "num_beam_groups": 1,
}


@dataclass(frozen=True)
class AuthorsDecoding:
    """One model's authors' decoding: pass ``beam_size``, ``max_new_tokens``, ``scoring`` and ``sampling`` to
    Translator.trace."""

    beam_size: int
    max_new_tokens: int  # tokens generated at most, the last one </s> when ``scoring.force_eos``
    scoring: Scoring
    not_followed: tuple[str, ...] = ()  # their settings our search does not apply, as "name=value"
    sampling: Sampling | None = None  # do_sample: how each token is drawn (seed 0; generate draws from torch's)

    def describe(self) -> str:
        """In words, for the page: "beam 4, length penalty 1, up to 512 tokens, the last forced to </s>"."""
        if self.sampling is not None:
            search = self.sampling.describe()
        else:
            search = "greedy search" if self.beam_size <= 1 else f"beam {self.beam_size}"
        parts = [search]
        if self.beam_size > 1:
            parts.append(f"length penalty {self.scoring.alpha:g}")
            if self.scoring.early_stopping is not False:
                parts.append(f"early stopping {self.scoring.early_stopping}")
        parts.append(
            f"up to {self.max_new_tokens} tokens" + (", the last forced to </s>" if self.scoring.force_eos else "")
        )
        return ", ".join(parts)


def authors_decoding(defaults: dict[str, Any], config: TransformerConfig) -> AuthorsDecoding:
    """The decoding ``generate`` does with these settings (a card's ``generation_defaults``) on this model.

    Only one-token ``bad_words_ids`` are followed (our search bans tokens, not sequences); the others and any
    setting in NEUTRAL that changes the output are listed in ``not_followed``.
    """
    settings = {**GENERATE_DEFAULTS, **defaults}
    not_followed = [
        f"{key}={settings[key]!r}" for key, neutral in NEUTRAL.items() if key in settings and settings[key] != neutral
    ]
    banned = []
    for words in settings.get("bad_words_ids") or []:
        if len(words) == 1:
            banned.append(int(words[0]))
        else:
            not_followed.append(f"bad_words_ids {words}")
    eos = settings.get("forced_eos_token_id")
    if eos is not None and eos != config.eos_id:
        not_followed.append(f"forced_eos_token_id={eos} (the model's </s> is {config.eos_id})")
    # transformers 5 reads a max_length it was not passed (one from the folder) as new tokens: it adds the start
    # token, within the model's positions (GenerationMixin._prepare_generated_length)
    limit = int(settings.get("max_new_tokens") or settings["max_length"])
    sampling = None
    if settings["do_sample"] and int(settings["num_beams"]) > 1:
        not_followed.append(f"do_sample with num_beams={settings['num_beams']} (beam sampling; searched without it)")
    elif settings["do_sample"]:
        sampling = Sampling(
            temperature=float(settings["temperature"]),
            # generate reads a top_k of None as its default, 50; 0 turns top-k off
            top_k=int(GENERATE_DEFAULTS["top_k"] if settings["top_k"] is None else settings["top_k"]),
            top_p=float(settings["top_p"]),
        )
    scoring = Scoring(
        style="transformers",
        alpha=float(settings["length_penalty"]),
        early_stopping=settings["early_stopping"],
        renormalize=bool(settings["renormalize_logits"]),
        banned=tuple(sorted(set(banned))),
        force_eos=eos == config.eos_id,
    )
    return AuthorsDecoding(
        beam_size=max(1, int(settings["num_beams"])),
        max_new_tokens=max(1, min(limit, config.max_sequence_tokens)),
        scoring=scoring,
        not_followed=tuple(not_followed),
        sampling=sampling,
    )
