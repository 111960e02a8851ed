"""What sampling does, for the decoding lesson: each step of a sampled trace explained (the distribution before and
after the temperature, what top-k and top-p kept, the token drawn and its rank), and one sentence sampled N times,
its distinct translations counted and scored by the model beside the greedy and the beam search translations."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import torch

from model.decoding.sampling import Sampling, keep_top_k, keep_top_p, with_temperature
from model.decoding.scoring import GNMT_SCORING, Scoring
from model.decoding.search import (
    DEFAULT_BEAM_SIZE,
    Encoded,
    beam_search,
    greedy_decode,
    next_token_log_probs,
    sample_decode,
)
from model.trace import Trace
from model.transformer import Transformer
from model.translator import Translator

MAX_SAMPLES = 20  # draws one "sample again" makes at most
SHOWN_CANDIDATES = 10  # the most likely tokens a step's explanation lists


@dataclass(frozen=True)
class Draw:
    """One step of a sampled translation: the model's most likely candidates (most likely first) and what sampling
    did with them. Probabilities are of the whole vocabulary; ``kept_*`` count every kept token, not only those
    listed."""

    step: int
    token: int  # the token drawn
    rank: int  # its rank among the model's own candidates, from 1
    candidates: list[int]  # token ids, most likely first under the model
    model_probs: list[float]  # the model's own probabilities (temperature 1)
    tempered_probs: list[float]  # after the temperature
    kept: list[bool]  # whether top-k and top-p left each candidate in the draw
    drawn_probs: list[float]  # the distribution the token was drawn from: kept tokens renormalised, 0 elsewhere
    kept_count: int  # tokens left in the draw
    kept_mass: float  # their share of the tempered distribution (what top-k and top-p kept of it)
    drawn_prob: float  # the drawn token's probability in the draw
    candidate_pieces: list[str] = field(default_factory=list)  # the candidates as pieces (explain_sampled_trace)


def explain_draw(log_probs: torch.Tensor, sampling: Sampling, token: int, step: int = 0) -> Draw:
    """How ``token`` was drawn from one step's next-token log-probabilities (V,) with ``sampling``."""
    scores = log_probs.double()
    tempered = with_temperature(scores, sampling.temperature)
    kept_scores = keep_top_p(keep_top_k(tempered, sampling.top_k), sampling.top_p)
    model_probs, tempered_probs, drawn = scores.softmax(-1), tempered.softmax(-1), kept_scores.softmax(-1)
    kept = torch.isfinite(kept_scores)
    order = torch.argsort(model_probs, descending=True, stable=True)
    shown = order[:SHOWN_CANDIDATES].tolist()
    return Draw(
        step=step,
        token=token,
        rank=int((order == token).nonzero()[0, 0]) + 1,
        candidates=shown,
        model_probs=model_probs[shown].tolist(),
        tempered_probs=tempered_probs[shown].tolist(),
        kept=kept[shown].tolist(),
        drawn_probs=drawn[shown].tolist(),
        kept_count=int(kept.sum()),
        kept_mass=float(tempered_probs[kept].sum()),
        drawn_prob=float(drawn[token]),
    )


def explain_sampled_trace(translator: Translator, trace: Trace) -> list[Draw]:
    """Every drawn step of a sampled trace explained (not a forced start, nor a </s> forced at the output's limit):
    the model's distributions re-read in one teacher-forced pass."""
    sampling = trace.settings.sampling
    if sampling is None:
        raise ValueError(f"the trace was not sampled (its mode is {trace.settings.mode!r})")
    scoring = trace.settings.scoring or GNMT_SCORING

    def distributions(model: Transformer, device: torch.device) -> torch.Tensor:
        src = torch.tensor([trace.source_ids], device=device)
        return forced_log_probs(model, model.encode(src), trace.target_ids[1:], scoring).cpu()

    log_probs, _ = translator.run(distributions)
    first = len(trace.settings.prefix_ids)  # a forced start is given, not drawn
    # an output cut off at its limit with </s> last: the scoring forced that </s> (as generate's forced_eos_token_id)
    forced_end = trace.outcome.cut_off and trace.target_ids[-1] == translator.config.eos_id
    end = trace.n_steps - (1 if forced_end else 0)
    draws = [explain_draw(log_probs[step], sampling, trace.target_ids[step + 1], step) for step in range(first, end)]
    return [replace(draw, candidate_pieces=translator.tokenizer.pieces(draw.candidates, "target")) for draw in draws]


@dataclass(frozen=True)
class Sample:
    """One translation and what the model thinks of it: ``log_prob`` is the sum of its tokens' log-probabilities
    under the model's own distribution (temperature 1, as greedy and beam search score them)."""

    target_ids: list[int]  # the output, BOS left out, EOS last when the model wrote it
    translation: str
    count: int  # how often the draws gave it (also for the greedy and beam translations: 0 when never)
    log_prob: float


@dataclass(frozen=True)
class SampleTable:
    """A sentence sampled ``draws`` times: its distinct translations, most frequent first (then most likely), and
    the greedy and beam search translations to set beside them."""

    sampling: Sampling
    draws: int
    samples: list[Sample]
    greedy: Sample
    beam: Sample
    notice: str | None = None  # e.g. the GPU ran out of memory and the CPU ran it


def sample_again(
    translator: Translator,
    text: str,
    sampling: Sampling,
    draws: int,
    *,
    max_new_tokens: int | None = None,
    scoring: Scoring | None = None,
) -> SampleTable:
    """Sample ``text`` ``draws`` times in one batch (the rows draw in turn from the seeded stream), count the distinct
    translations and score each, with the greedy and beam search translations, by the model."""
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= MAX_SAMPLES:
        raise ValueError(f"draws must be a whole number from 1 to {MAX_SAMPLES}, not {draws!r}")
    source = translator.source_ids(text).ids
    limit = max_new_tokens or translator.authors_limit
    scoring = scoring or GNMT_SCORING

    def work(model: Transformer, device: torch.device) -> tuple[list[tuple[int, ...]], dict[tuple[int, ...], float]]:
        one = torch.tensor([source], device=device)
        encoded = model.encode(one)  # the sentence's one encoder pass, for greedy, beam and the scores
        outputs = sample_decode(model, one.expand(draws, -1), sampling, max_new_tokens=limit, scoring=scoring)
        greedy = greedy_decode(model, one, limit, encoded=encoded, scoring=scoring)[0]
        beam = beam_search(model, one, DEFAULT_BEAM_SIZE, limit, encoded=encoded, scoring=scoring)[0][0].tokens
        found = [tuple(ids) for ids in [*outputs, greedy, beam]]  # the draws, then greedy, then beam
        distinct = list(dict.fromkeys(found))
        log_probs = [log_prob(model, encoded, list(ids), scoring) for ids in distinct]
        return found, dict(zip(distinct, log_probs, strict=True))

    (found, scores), notice = translator.run(work)
    *drawn, greedy, beam = found

    def sample(ids: tuple[int, ...], count: int) -> Sample:
        return Sample(list(ids), translator.tokenizer.decode(list(ids), "target"), count, scores[ids])

    counts = Counter(drawn)
    samples = sorted((sample(ids, count) for ids, count in counts.items()), key=lambda s: (-s.count, -s.log_prob))
    return SampleTable(sampling, draws, samples, sample(greedy, counts[greedy]), sample(beam, counts[beam]), notice)


@torch.inference_mode()
def forced_log_probs(model: Transformer, encoded: Encoded, output: list[int], scoring: Scoring) -> torch.Tensor:
    """The model's next-token log-probabilities (len(output), V) at each step of ``output`` (BOS left out) fed to
    the decoder after one encoded sentence, nothing captured: the tokens it can never write, and ``scoring.banned``,
    at probability 0, as decoding reads them."""
    memory, allowed = encoded
    decoder_input = torch.tensor([[model.config.start_id, *output[:-1]]], device=memory.device)
    return next_token_log_probs(model, model.decode(decoder_input, memory, allowed)[0], scoring)


def log_prob(model: Transformer, encoded: Encoded, output: list[int], scoring: Scoring) -> float:
    """An output's log-probability under the model: its tokens' next-token log-probabilities summed."""
    tokens = torch.tensor(output, device=encoded[0].device)[:, None]
    return float(forced_log_probs(model, encoded, output, scoring).gather(1, tokens).sum())
