"""What-if decoding: a fork keeps every earlier step, forces the chosen token, and continues as the original did.

The fork figures are tested in tests/viz/test_whatif.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model.decoding.search import beam_search, greedy_decode
from model.trace import Trace
from tests.helpers import SENTENCE
from tests.helpers import SHORT_MAX_LEN as MAX_LEN


@pytest.fixture(scope="module", params=[1, 3], ids=["greedy", "beam"])
def original(request, translator) -> Trace:
    return translator.trace(SENTENCE, beam_size=request.param, max_new_tokens=MAX_LEN, top_k=5)


def alternative(trace: Trace, step: int, config) -> int:
    """The most likely token at ``step`` other than the one the original took."""
    taken = trace.target_ids[step + 1]
    return next(int(t) for t in trace.topk_ids[step] if t != taken and t not in (config.pad_id, config.bos_id))


def continuation(translator, trace: Trace, prefix: list[int]) -> list[int]:
    """What the original's decoding (greedy or beam, same total length limit) makes of ``prefix``, run directly."""
    src = torch.tensor([trace.source_ids])
    beam_size, room = trace.settings.beam_size, MAX_LEN - len(prefix)
    if room <= 0:
        return prefix
    if beam_size <= 1:
        return greedy_decode(translator.model, src, max_new_tokens=room, prefix=prefix)[0]
    return beam_search(translator.model, src, beam_size, max_new_tokens=room, prefix=prefix)[0][0].tokens


def assert_same_before(original: Trace, forked: Trace, step: int) -> None:
    """Steps before ``step`` (and step ``step``'s own distribution and attention) equal the original's."""
    assert forked.target_ids[: step + 1] == original.target_ids[: step + 1]
    np.testing.assert_allclose(forked.step_probs[:step], original.step_probs[:step], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(forked.topk_ids[: step + 1], original.topk_ids[: step + 1])
    np.testing.assert_allclose(forked.topk_probs[: step + 1], original.topk_probs[: step + 1], rtol=0, atol=1e-6)
    for name, weights in original.attention.items():
        if name.startswith("encoder."):
            np.testing.assert_allclose(forked.attention[name], weights, rtol=0, atol=1e-6)
        elif name.endswith("cross_attn"):
            np.testing.assert_allclose(forked.attention[name][:, : step + 1], weights[:, : step + 1], rtol=0, atol=1e-6)
        else:
            rows = forked.attention[name][:, : step + 1, : step + 1]
            np.testing.assert_allclose(rows, weights[:, : step + 1, : step + 1], rtol=0, atol=1e-6)


def test_fork_keeps_earlier_steps_and_continues_from_the_chosen_token(translator, original):
    assert original.n_steps >= 4
    for step in (0, 2, original.n_steps - 1):
        token = alternative(original, step, translator.config)
        forked = translator.fork(original, step, token)
        assert_same_before(original, forked, step)
        assert forked.target_ids[step + 1] == token
        assert forked.target_ids[1:] == continuation(translator, original, original.target_ids[1 : step + 1] + [token])
        assert forked.settings.mode == original.settings.mode
        assert forked.outcome.fork.step == step and forked.outcome.fork.token_ids == [token]
        assert forked.outcome.fork.original_target_ids == original.target_ids
        restored = Trace.from_json(forked.to_json())
        assert (restored.settings, restored.outcome) == (forked.settings, forked.outcome)
        if step + 1 < forked.n_steps:  # a fork of the fork stays within the original's length limit
            refork = translator.fork(forked, step + 1, alternative(forked, step + 1, translator.config))
            assert refork.target_ids[: step + 2] == forked.target_ids[: step + 2] and refork.n_steps <= MAX_LEN


def test_greedy_fork_with_the_original_token_is_the_original(translator):
    original = translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN)
    forked = translator.fork(original, 3, original.target_ids[4])
    assert forked.target_ids == original.target_ids
    for name, weights in original.attention.items():
        np.testing.assert_allclose(forked.attention[name], weights, rtol=0, atol=1e-6)


def test_a_typed_word_forces_all_of_its_pieces(translator, original):
    step = 1
    for word in ("parks", "the"):
        ids = translator.tokenizer.encode(word, "target")
        forked = translator.fork(original, step, word)
        assert_same_before(original, forked, step)
        assert forked.target_ids[step + 1 : step + 1 + len(ids)] == ids
        fork = forked.outcome.fork
        assert fork.token_ids == ids and fork.pieces == translator.tokenizer.pieces(ids, "target")
        if len(ids) > 1:
            assert f"{len(ids)} pieces" in fork.notice
        else:
            assert fork.notice is None
    assert len(translator.tokenizer.encode("parks", "target")) > 1  # the toy tokenizer splits it


def test_choosing_eos_ends_the_translation_there(translator, original):
    eos = translator.config.eos_id
    forked = translator.fork(original, 2, eos)
    assert forked.target_ids == original.target_ids[:3] + [eos]
    assert forked.n_steps == 3
    assert_same_before(original, forked, 2)


def test_a_fork_of_a_teacher_forced_trace_continues_by_decoding(translator):
    forced = translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN, target="the dog plays in the snow.")
    forked = translator.fork(forced, 2, alternative(forced, 2, translator.config))
    assert forked.settings.mode == "greedy"
    assert_same_before(forced, forked, 2)


@pytest.mark.parametrize(
    ("step", "token", "message"),
    [
        (-1, 5, "step must be"),
        ("end", 5, "step must be"),
        (True, 5, "step must be"),
        (0, 0, "padding or BOS"),
        (0, 2, "padding or BOS"),
        (0, 10_000, "outside the target vocabulary"),
        (0, -3, "outside the target vocabulary"),
        (0, 2.5, "token must be"),
        (0, "", "no pieces"),
        (0, "   ", "no pieces"),
        (1, "a " * 80, "output positions"),
    ],
)
def test_bad_steps_and_tokens_are_refused_clearly(translator, step, token, message):
    original = translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN)
    with pytest.raises(ValueError, match=message):
        translator.fork(original, step, token)
    with pytest.raises(ValueError, match="step must be"):
        translator.fork(original, original.n_steps, 5)
