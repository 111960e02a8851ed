"""How a beam search ranks its hypotheses, stops and ends: our GNMT length penalty, or Hugging Face generate's.

Plain data (no torch), so a Trace or a BeamTree can record the scoring it was made with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# Every beam search's default length-penalty alpha. GNMT's (Wu et al. 2016) 0.6 lets these small models' beams end
# early, shorter than greedy translations; a larger alpha scored best on validation (docs/training-recipe.md).
DEFAULT_ALPHA = 1.5


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; alpha = 0 ranks by raw log-probability."""
    return ((5.0 + length) / 6.0) ** alpha


SCORING_STYLES = ("gnmt", "transformers")
EARLY_STOPPING = (False, True, "never")


@dataclass(frozen=True)
class Scoring:
    """How a search ranks, stops and ends: ours by default, or Hugging Face ``generate``'s (``style="transformers"``),
    so that an imported model can decode exactly as its authors' settings do (model.decoding.authors).

    ``gnmt``: hypotheses rank by log p / ((5 + length) / 6) ** alpha, length counting the prefix, and
    a sentence stops only when no live beam can still beat the finished ones (exact). ``transformers``: log p /
    (tokens generated) ** alpha, and ``early_stopping`` as generate reads it: False stops once the best live beam,
    scored at its current length, cannot beat the worst finished one (a heuristic), True once ``beam_size``
    hypotheses are finished, "never" scores the live beam at the length limit when alpha > 0.
    """

    style: str = "gnmt"
    alpha: float = DEFAULT_ALPHA  # the length penalty's exponent (generate's ``length_penalty``)
    early_stopping: bool | str = False  # transformers style only
    renormalize: bool = True  # the never-generated tokens' mass is shared out; generate keeps it unless asked
    banned: tuple[int, ...] = ()  # ids never generated besides padding and BOS (generate's one-token bad_words_ids)
    force_eos: bool = False  # the last step the limit allows writes EOS (generate's ``forced_eos_token_id``)

    def __post_init__(self) -> None:
        if self.style not in SCORING_STYLES:
            raise ValueError(f"style must be one of {', '.join(SCORING_STYLES)}, not {self.style!r}")
        if self.early_stopping not in EARLY_STOPPING:
            raise ValueError(f"early_stopping must be True, False or 'never', not {self.early_stopping!r}")

    def penalty(self, generated: int, prefix: int) -> float:
        """What the log-probability of a hypothesis of ``generated`` tokens after a ``prefix`` is divided by."""
        if self.style == "gnmt":
            return length_penalty(prefix + generated, self.alpha)
        return float(generated) ** self.alpha

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scoring:
        return cls(**{**data, "banned": tuple(data.get("banned", ()))})


# GNMT's ranking with our alpha: every search's scoring unless it is given another
GNMT_SCORING = Scoring()
