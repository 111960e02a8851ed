"""model.decoding.sampling: temperature, top-k and top-p on hand-made distributions, and sampled decoding on the
shipped model (the same draws as transformers' generate: tests/model/test_marian_generate.py)."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from model.decoding import Sampling
from model.decoding.sampling import draw, keep_top_k, keep_top_p, sampling_scores, with_temperature
from model.trace import Trace
from tests.helpers import DECODING_LESSON_SENTENCES

SENTENCES = DECODING_LESSON_SENTENCES


@pytest.fixture(scope="module")
def translator(shipped_en_de):
    return shipped_en_de


def kept(scores: torch.Tensor) -> list[int]:
    return torch.isfinite(scores).nonzero().flatten().tolist()


def log(probs: list[float]) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float64).log()


def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p():
    """p is kept off the sets' exact masses: at a mass equal to p, whether the set reaches p is a matter of rounding
    (transformers' rule compares a cumulative sum with 1 - p)."""
    scores = log([0.5, 0.3, 0.15, 0.05])
    assert kept(keep_top_p(scores, 0.49)) == [0]
    assert kept(keep_top_p(scores, 0.51)) == [0, 1]
    assert kept(keep_top_p(scores, 0.79)) == [0, 1]
    assert kept(keep_top_p(scores, 0.81)) == [0, 1, 2]
    assert kept(keep_top_p(scores, 1.0)) == [0, 1, 2, 3]
    assert kept(keep_top_p(scores, 1e-9)) == [0]  # the most likely token always stays
    # the kept set's mass reaches p, and without its least likely token it would not
    for p in (0.2, 0.55, 0.9, 0.96, 0.999):
        chosen = kept(keep_top_p(scores, p))
        mass = scores.exp()[chosen].sum().item()
        assert mass >= p - 1e-12 and mass - min(scores.exp()[chosen]).item() < p, p


def test_top_p_with_ties_keeps_as_many_of_the_tied_tokens_as_the_mass_needs():
    scores = log([0.25, 0.25, 0.25, 0.25])
    assert len(kept(keep_top_p(scores, 0.45))) == 2
    assert len(kept(keep_top_p(scores, 0.6))) == 3
    scores = log([0.4, 0.2, 0.2, 0.2])
    assert kept(keep_top_p(scores, 0.39)) == [0]
    assert len(kept(keep_top_p(scores, 0.45))) == 2 and 0 in kept(keep_top_p(scores, 0.45))


def test_top_k_keeps_the_k_most_likely_and_those_tied_with_the_kth():
    scores = log([0.1, 0.4, 0.2, 0.2, 0.1])
    assert kept(keep_top_k(scores, 1)) == [1]
    assert kept(keep_top_k(scores, 2)) == [1, 2, 3]  # 0.2 twice: both tied with the second
    assert kept(keep_top_k(scores, 4)) == [0, 1, 2, 3, 4]
    assert kept(keep_top_k(scores, 0)) == [0, 1, 2, 3, 4]  # 0: every token
    assert kept(keep_top_k(scores, 99)) == [0, 1, 2, 3, 4]


def test_temperature_sharpens_or_flattens_and_the_settings_apply_in_generates_order():
    scores = log([0.6, 0.3, 0.1])
    cold, hot = with_temperature(scores, 0.5).softmax(-1), with_temperature(scores, 2.0).softmax(-1)
    assert cold[0] > 0.6 > hot[0] and hot[2] > 0.1 > cold[2]
    # top-p after temperature: at 2.0 the distribution is flatter, so p = 0.6 needs two tokens, not one
    assert kept(sampling_scores(scores, Sampling(temperature=1.0, top_p=0.6))) == [0]
    assert kept(sampling_scores(scores, Sampling(temperature=2.0, top_p=0.6))) == [0, 1]
    # top-k before top-p: of the two kept, p = 0.9 keeps both (0.6 / 0.9 is under 0.9)
    both = sampling_scores(scores, Sampling(top_k=2, top_p=0.9))
    assert kept(both) == [0, 1]
    assert both.softmax(-1)[:2].tolist() == pytest.approx([2 / 3, 1 / 3])


def test_draws_follow_the_distribution_and_a_seed_repeats_them():
    scores = log([0.7, 0.2, 0.1]).float().expand(20_000, -1)
    drawn = draw(scores, Sampling(seed=4).generator("cpu"))
    shares = torch.bincount(drawn, minlength=3).float() / len(drawn)
    assert shares.tolist() == pytest.approx([0.7, 0.2, 0.1], abs=0.015)
    assert torch.equal(drawn, draw(scores, Sampling(seed=4).generator("cpu")))
    assert not torch.equal(drawn, draw(scores, Sampling(seed=5).generator("cpu")))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"temperature": 0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"seed": "7"}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"seed": -1}, "seed"),
        ({"seed": True}, "seed"),
    ],
)
def test_bad_settings_are_refused_with_their_name(settings, message):
    with pytest.raises(ValueError, match=message):
        Sampling(**settings)


def test_near_zero_temperature_and_top_k_one_give_exactly_the_greedy_output(translator):
    for text in SENTENCES:
        greedy = translator.trace(text, beam_size=1).target_ids
        for sampling in (Sampling(temperature=1e-4, seed=1), Sampling(top_k=1, seed=2), Sampling(top_p=1e-6, seed=3)):
            assert translator.trace(text, sampling=sampling).target_ids == greedy, (text, sampling)


def test_a_seed_repeats_its_trace_and_other_seeds_find_other_translations(translator):
    text = SENTENCES[2]
    hot = Sampling(temperature=1.5, seed=7)
    first = translator.trace(text, sampling=hot)
    assert translator.trace(text, sampling=hot).target_ids == first.target_ids
    assert first.settings.mode == "sampling" and first.settings.sampling == hot and first.settings.beam_size == 1
    others = {tuple(translator.trace(text, sampling=Sampling(1.5, seed=seed)).target_ids) for seed in range(8)}
    assert len(others) > 1
    # a sampled trace saves and opens with its settings
    assert Trace.from_json(first.to_json()).settings == first.settings
    assert Trace.from_npz(first.to_npz_bytes()).settings.sampling == hot


def test_thirty_threads_sampling_with_their_own_seeds_each_get_what_they_get_alone(translator):
    text = SENTENCES[0]
    samplings = [Sampling(temperature=1.2, top_p=0.95, seed=seed) for seed in range(30)]
    alone = [translator.translate(text, max_new_tokens=6, sampling=sampling) for sampling in samplings]
    together: list[str | None] = [None] * len(samplings)
    start = threading.Barrier(len(samplings))

    def run(index: int) -> None:
        start.wait()
        together[index] = translator.translate(text, max_new_tokens=6, sampling=samplings[index])

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(samplings))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert together == alone
    assert len(set(alone)) > 1  # the seeds do draw differently


def test_a_fork_of_a_sampled_trace_samples_on(translator):
    original = translator.trace(SENTENCES[1], sampling=Sampling(temperature=0.8, seed=3))
    forked = translator.fork(original, 1, int(original.topk_ids[1][1]))
    assert forked.settings.mode == "sampling" and forked.settings.sampling == original.settings.sampling
    assert forked.target_ids[2] == int(original.topk_ids[1][1])


def test_a_forced_target_draws_nothing(translator):
    forced = translator.trace(SENTENCES[1], target="Zwei Hunde spielen im Schnee.", sampling=Sampling(seed=1))
    assert forced.settings.mode == "forced" and forced.settings.sampling is None
