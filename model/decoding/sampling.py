"""Sampling: draw each next token from the model's distribution, reshaped by temperature, top-k and top-p.

The three settings apply in the order transformers' logits processors apply them when ``generate`` samples
(TemperatureLogitsWarper, then TopKLogitsWarper, then TopPLogitsWarper), so that a model's ``do_sample`` settings
decode here as its authors decode them. Every draw comes from a ``torch.Generator`` made for the call from its seed,
never from torch's global random state: thirty sessions sampling at once each get what they would get alone, and
the same seed gives the same output on the same device.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # plain data: a Trace's settings hold a Sampling, and load without torch
    import torch

NO_TOP_K = 0  # top_k 0: every token stays a candidate (transformers' top_k=0 or None)
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes up to a signed 64-bit integer


@dataclass(frozen=True)
class Sampling:
    """How to sample: ``temperature`` (> 0; below 1 sharpens the distribution, above 1 flattens it), ``top_k`` (keep
    the k most likely tokens, ties with the k-th included; 0 keeps all), ``top_p`` (keep the smallest set of most
    likely tokens whose probability reaches p; 1 keeps all) and ``seed`` (the draws' random stream)."""

    temperature: float = 1.0
    top_k: int = NO_TOP_K
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        temperature, top_p = self.temperature, self.top_p
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature > 0:
            raise ValueError(f"temperature must be a number above 0, not {temperature!r}")
        if not math.isfinite(temperature):
            raise ValueError(f"temperature must be finite, not {temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be a whole number, 0 (keep every token) or more, not {self.top_k!r}")
        if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 < top_p <= 1:
            raise ValueError(f"top_p must be above 0 and at most 1, not {top_p!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be a whole number from 0 to {MAX_SEED}, not {self.seed!r}")

    def generator(self, device: torch.device | str) -> torch.Generator:
        """A random stream of its own for one call, on ``device`` (a draw on the GPU takes a GPU generator)."""
        import torch

        return torch.Generator(device=device).manual_seed(self.seed)

    def describe(self) -> str:
        """In words, for the page: "sampling at temperature 0.8, top-k 5, top-p 0.9, seed 3" (a setting that keeps
        every token is left out)."""
        words = f"sampling at temperature {self.temperature:g}"
        words += f", top-k {self.top_k}" if self.top_k != NO_TOP_K else ""
        words += f", top-p {self.top_p:g}" if self.top_p < 1 else ""
        return f"{words}, seed {self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sampling:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def with_temperature(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """Scores (logits or log-probabilities, (..., V)) divided by the temperature (TemperatureLogitsWarper)."""
    return scores / temperature


def keep_top_k(scores: torch.Tensor, top_k: int) -> torch.Tensor:
    """Scores below the k-th largest set to -inf; ties with the k-th stay (TopKLogitsWarper). 0 keeps every token."""
    if top_k == NO_TOP_K:
        return scores
    kth = scores.topk(min(top_k, scores.size(-1))).values[..., -1, None]
    return scores.masked_fill(scores < kth, float("-inf"))


def keep_top_p(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """The smallest set of most likely tokens whose probability reaches ``top_p`` kept, the rest set to -inf
    (TopPLogitsWarper: the tokens are sorted by score, least likely first, and those whose cumulative probability
    stays at or below 1 - top_p are removed; the most likely token always stays; tied tokens are ordered as the
    sort leaves them)."""
    if top_p >= 1.0:
        return scores
    ascending, order = scores.sort(descending=False)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1 - top_p)
    remove_sorted[..., -1:] = False
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return scores.masked_fill(remove, float("-inf"))


def sampling_scores(scores: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Temperature, then top-k, then top-p, as generate applies them: the softmax of the result is the distribution
    a token is drawn from."""
    return keep_top_p(keep_top_k(with_temperature(scores, sampling.temperature), sampling.top_k), sampling.top_p)


def draw(scores: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row (B, V) -> (B,), drawn from the softmax of the processed scores with ``generator``."""
    probs = scores.float().softmax(dim=-1)
    return probs.multinomial(num_samples=1, generator=generator).squeeze(1)
