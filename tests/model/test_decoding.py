"""Key/value-cached decoding, greedy and beam search, traces, and thread-safe capture."""

from __future__ import annotations

import io
import itertools
import json
import threading

import numpy as np
import pytest
import torch

from model import Transformer, capture_attention, load_checkpoint
from model.decoding.scoring import Scoring, length_penalty
from model.decoding.search import (
    _strip,
    beam_search,
    default_max_new_tokens,
    greedy_decode,
    next_token_log_probs,
    row_limits,
)
from model.trace import Fork, Trace, TraceOutcome
from model.translator import Translator
from tests.helpers import REPO, small_config


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(small_config(40)).eval()


def test_cached_incremental_decoding_equals_full_prefix(model):
    src = torch.randint(4, 40, (2, 8))
    src[1, 6:] = 0
    tgt = torch.randint(4, 40, (2, 9))
    with torch.inference_mode():
        memory, src_allowed = model.encode(src)
        full = model.decode(tgt, memory, src_allowed)
        cache = model.new_cache()
        first = model.decode(tgt[:, :3], memory, src_allowed, cache=cache)  # a prefix chunk, then single tokens
        steps = [first] + [
            model.decode(tgt[:, t : t + 1], memory, src_allowed, cache=cache, start=t) for t in range(3, 9)
        ]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    assert cache[0]["self"]["k"].shape == (2, 4, 9, 8)
    assert cache[0]["cross"]["k"].shape == (2, 4, 8, 8)  # computed once from the source


def test_beam_size_one_equals_greedy(model):
    src = torch.randint(4, 40, (5, 7))
    src[2, 5:] = 0
    greedy = greedy_decode(model, src, max_new_tokens=12)
    beams = beam_search(model, src, beam_size=1, max_new_tokens=12, scoring=Scoring(alpha=0.0))
    assert [hyps[0].tokens for hyps in beams] == greedy


def exhaustive_best(
    model: Transformer, src: torch.Tensor, max_new_tokens: int, alpha: float
) -> tuple[list[int], float]:
    """Score every sequence (ending in EOS, or cut at max_new_tokens) the way beam search scores them."""
    config = model.config
    allowed = [t for t in range(config.tgt_vocab_size) if t not in (config.pad_id, config.bos_id)]
    best: tuple[list[int], float] = ([], float("-inf"))
    with torch.inference_mode():
        for length in range(1, max_new_tokens + 1):
            sequences = [
                s
                for s in itertools.product(allowed, repeat=length)
                if config.eos_id not in s[:-1] and (length == max_new_tokens or s[-1] == config.eos_id)
            ]
            tgt = torch.tensor([[config.bos_id, *s] for s in sequences])  # all candidates in one batch
            log_probs = next_token_log_probs(model, model(src.expand(len(sequences), -1), tgt[:, :-1]))
            totals = log_probs.gather(2, tgt[:, 1:, None])[..., 0].sum(dim=1) / length_penalty(length, alpha)
            index = int(totals.argmax())
            if float(totals[index]) > best[1]:
                best = (list(sequences[index]), float(totals[index]))
    return best


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_wide_beam_finds_the_exhaustive_optimum(alpha):
    torch.manual_seed(3)
    tiny = Transformer(small_config(7, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=16)).eval()
    for seed in range(3):
        src = torch.randint(4, 7, (1, 4), generator=torch.Generator().manual_seed(seed))
        expected_tokens, expected_score = exhaustive_best(tiny, src, max_new_tokens=4, alpha=alpha)
        best = beam_search(tiny, src, beam_size=200, max_new_tokens=4, scoring=Scoring(alpha=alpha))[0][0]
        assert best.tokens == expected_tokens
        assert best.score == pytest.approx(expected_score, abs=1e-5)


def test_beam_hypotheses_are_sorted_and_end_in_eos_or_max_len(model):
    src = torch.randint(4, 40, (3, 6))
    for hyps in beam_search(model, src, beam_size=4, max_new_tokens=10):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            assert h.tokens[-1] == model.config.eos_id or len(h.tokens) == 10
            assert model.config.eos_id not in h.tokens[:-1]


def test_prefix_is_kept_and_continued(model):
    src = torch.randint(4, 40, (1, 6))
    prefix = [7, 9, 11]
    for output in (
        greedy_decode(model, src, max_new_tokens=8, prefix=prefix)[0],
        beam_search(model, src, 3, 8, prefix=prefix)[0][0].tokens,
    ):
        assert output[:3] == prefix and len(output) > 3


def test_trace_rows_equal_incremental_decoding_steps(tiny_checkpoint):
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    trace = translator.trace("a man rides a blue bike.", beam_size=1, top_k=3)
    model = translator.model
    src = torch.tensor([trace.source_ids])
    with torch.inference_mode():
        memory, src_allowed = model.encode(src)
        cache = model.new_cache()
        for step in range(trace.n_steps):
            token = torch.tensor([[trace.target_ids[step]]])
            with capture_attention(model) as capture:
                logits = model.decode(token, memory, src_allowed, cache=cache, start=step)
            probs = next_token_log_probs(model, logits[0, -1]).exp()  # what decoding chose from
            assert trace.topk_probs[step, 0] == pytest.approx(float(probs.max()), abs=1e-5)
            for name in ("decoder.layers.1.self_attn", "decoder.layers.0.cross_attn"):
                row = capture.attention[name][0, :, 0].numpy()
                np.testing.assert_allclose(trace.attention[name][:, step, : row.shape[-1]], row, atol=1e-5)
    assert trace.target_ids[0] == model.config.bos_id
    assert trace.step_probs.shape == (trace.n_steps,)
    assert trace.attention_stack("cross").shape == (2, 4, trace.n_steps, len(trace.source_ids))
    assert trace.attention_stack("encoder_self").shape == (2, 4, len(trace.source_ids), len(trace.source_ids))


def test_forced_target_trace(tiny_checkpoint):
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    trace = translator.trace("a dog runs.", target="the dog plays in the snow.")
    assert trace.settings.mode == "forced"
    assert trace.translation == "the dog plays in the snow."
    assert trace.target_ids[-1] == translator.config.eos_id


def test_trace_json_and_npz_round_trip(tiny_checkpoint):
    trace = load_checkpoint(tiny_checkpoint, device="cpu").trace("two young girls play with a ball.", beam_size=3)
    for restored in (Trace.from_json(trace.to_json()), Trace.from_npz(trace.to_npz_bytes())):
        assert restored.target_pieces == trace.target_pieces and restored.settings == trace.settings
        assert restored.outcome == trace.outcome
        for name, weights in trace.attention.items():
            np.testing.assert_allclose(restored.attention[name], weights, rtol=1e-6)
        np.testing.assert_array_equal(restored.topk_ids, trace.topk_ids)


# A trace's settings as JSON saved before TraceSettings and TraceOutcome kept them: one dict, the limit "max_len".
FORMER_SETTINGS = {
    "mode": "beam",
    "beam_size": 3,
    "max_len": 7,
    "top_k": 5,
    "target": None,
    "prefix": None,
    "target_ids": None,
    "prefix_ids": [4],
    "scoring": {"style": "transformers", "alpha": 1.0, "early_stopping": True, "renormalize": False, "banned": [9]},
    "truncated": True,
    "source_pieces_before_truncation": 300,
    "cut_off": True,
    "notice": "The GPU ran out of memory",
    "fork": {"step": 1, "token_ids": [4], "pieces": ["x"], "notice": None, "original_target_ids": [2, 5, 3]},
    "positional_experiment": {"experiment": "shuffle", "seed": 2, "word_order": [1, 0]},
}


def test_a_trace_saved_with_the_former_settings_opens_typed(tiny_checkpoint):
    trace = load_checkpoint(tiny_checkpoint, device="cpu").trace("two young girls play with a ball.", beam_size=3)
    saved = {**trace.to_dict(), "settings": FORMER_SETTINGS}
    del saved["outcome"]
    npz = trace.to_npz_bytes()
    for restored in (Trace.from_dict(saved), Trace.from_npz(former_npz(npz, FORMER_SETTINGS))):
        settings, outcome = restored.settings, restored.outcome
        assert (settings.mode, settings.beam_size, settings.max_new_tokens, settings.prefix_ids) == ("beam", 3, 7, [4])
        assert settings.scoring == Scoring("transformers", 1.0, True, False, (9,))
        assert outcome == TraceOutcome(
            truncated=True,
            source_pieces_before_truncation=300,
            cut_off=True,
            notice="The GPU ran out of memory",
            fork=Fork(1, [4], ["x"], None, [2, 5, 3]),
            experiment={"name": "word_order", "experiment": "shuffle", "seed": 2, "word_order": [1, 0]},
        )
        assert Trace.from_json(restored.to_json()).outcome == outcome  # and it saves in today's form


def former_npz(npz: bytes, settings: dict) -> bytes:
    """An NPZ file as saved before TraceOutcome: the same arrays, the settings dict in its meta, no outcome."""
    with np.load(io.BytesIO(npz), allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    meta = json.loads(str(arrays.pop("meta")))
    meta["settings"] = settings
    del meta["outcome"]
    buffer = io.BytesIO()
    np.savez_compressed(buffer, meta=np.array(json.dumps(meta)), **arrays)
    return buffer.getvalue()


def test_long_input_is_truncated_with_a_flag(tiny_checkpoint):
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    trace = translator.trace("a man " * 200, beam_size=2)
    assert trace.outcome.truncated
    assert len(trace.source_ids) == translator.config.max_len
    assert len(trace.target_ids) <= translator.config.max_len


@pytest.mark.slow  # several threads decoding at once
def test_threads_sharing_one_model_get_exactly_their_serial_results(tiny_checkpoint):
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    sentences = [
        f"{w} man rides a {c} bike." for w in ("a", "the", "two", "young") for c in ("red", "blue", "green", "old")
    ]
    serial = {s: translator.trace(s, beam_size=2) for s in sentences}
    failures: list[str] = []

    def worker(sentence: str) -> None:
        for _ in range(3):
            trace = translator.trace(sentence, beam_size=2)
            same = trace.target_ids == serial[sentence].target_ids and all(
                np.array_equal(trace.attention[n], serial[sentence].attention[n]) for n in trace.attention
            )
            if not same:
                failures.append(sentence)

    threads = [threading.Thread(target=worker, args=(s,)) for s in sentences]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(threads) >= 16 and not failures
    assert not translator.model.training
    assert not any(p.requires_grad for p in translator.model.parameters())


def test_batched_translation_equals_one_by_one(tiny_checkpoint):
    """A sentence's output (and its length limit) never depends on the sentences batched with it."""
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    texts = ["a dog.", "two young girls play with a ball in the park near the water.", "the man sits."]
    for beam in (1, 3):
        assert translator.translate_batch(texts, beam_size=beam) == [
            translator.translate(t, beam_size=beam) for t in texts
        ]


@pytest.mark.parametrize("options", [{"beam_size": 1}, {"beam_size": 3}, {"target": "the dog plays."}])
def test_a_trace_encodes_its_sentence_once(tiny_checkpoint, options):
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    calls = []
    handle = translator.model.encoder.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0]))
    try:
        trace = translator.trace("a man rides a blue bike.", **options)
    finally:
        handle.remove()
    assert len(calls) == 1 and calls[0][0].tolist() == trace.source_ids
    assert trace.attention_stack("encoder_self").shape[-1] == len(trace.source_ids)


@pytest.fixture(scope="module")
def copying() -> Translator:
    """The shipped toy-copy model: it writes its input back and stops, far inside the length limit."""
    return load_checkpoint(REPO / "checkpoints" / "toy-copy", device="cpu")


def count_decoder_calls(translator: Translator, monkeypatch) -> list[int]:
    """Every later call of the translator's model.decode appends the number of target positions it reads."""
    calls: list[int] = []
    decode = translator.model.decode

    def counted(tgt_ids, *args, **kwargs):
        calls.append(tgt_ids.size(1))
        return decode(tgt_ids, *args, **kwargs)

    monkeypatch.setattr(translator.model, "decode", counted)
    return calls


def test_decoding_stops_once_every_sentence_has_written_eos(copying, monkeypatch):
    """Greedy and beam search stop when the sentences are done, not at the length limit: one decoder call per
    generated token of the longest output (greedy), and a bounded search well short of the limit (beam). A search
    that ignored EOS would give the same translations and run every sentence to its limit."""
    texts = copying.card.examples[:3]
    rows = [copying.source_ids(text).ids for text in texts]
    longest = max(len(ids) for ids in rows)
    src = torch.tensor([ids + [copying.config.pad_id] * (longest - len(ids)) for ids in rows])
    limit = max(default_max_new_tokens(copying.model, len(ids)) for ids in rows)
    eos = copying.config.eos_id
    calls = count_decoder_calls(copying, monkeypatch)

    outputs = greedy_decode(copying.model, src)
    assert all(output[-1] == eos for output in outputs)
    assert len(calls) == max(len(output) for output in outputs) < limit

    calls.clear()
    best = [hypotheses[0].tokens for hypotheses in beam_search(copying.model, src, beam_size=5)]
    assert all(tokens[-1] == eos for tokens in best)
    assert max(len(tokens) for tokens in best) <= len(calls) < limit

    calls.clear()
    trace = copying.trace(texts[0], beam_size=1)
    assert len(calls) == trace.n_steps + 1  # one call per step, then the one teacher-forced pass


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_the_length_penalty_is_gnmts_and_ranks_the_hypotheses(model, alpha):
    """lp(L) = ((5 + L) / 6) ** alpha (Wu et al. 2016), written out here rather than called, and every hypothesis's
    score is its log-probability divided by lp of its length (the prefix and EOS counted, BOS not)."""
    assert length_penalty(7, alpha) == pytest.approx(2.0**alpha)
    assert length_penalty(1, alpha) == pytest.approx(1.0)
    assert length_penalty(13, alpha) == pytest.approx(3.0**alpha)
    src = torch.randint(4, 40, (2, 7), generator=torch.Generator().manual_seed(3))
    for hypotheses in beam_search(model, src, beam_size=3, max_new_tokens=6, scoring=Scoring(alpha=alpha), prefix=[7]):
        for hypothesis in hypotheses:
            written_out = ((5 + len(hypothesis.tokens)) / 6) ** alpha
            assert hypothesis.score == pytest.approx(hypothesis.log_prob / written_out, rel=1e-6)


def test_the_default_output_limit_is_one_and_a_half_times_the_source_plus_ten_within_the_positions(model):
    """default_max_new_tokens = max(1, min(max_tokens - prefix, int(1.5 * source) + 10)), written out case by case."""
    max_tokens = model.config.max_sequence_tokens
    assert default_max_new_tokens(model, 4) == 6 + 10
    assert default_max_new_tokens(model, 7) == 10 + 10  # 10.5 rounded down
    assert default_max_new_tokens(model, 100) == max_tokens  # no prefix by default: every position is the output's
    assert default_max_new_tokens(model, 100, prefix_length=5) == max_tokens - 5
    assert default_max_new_tokens(model, 4, prefix_length=max_tokens - 2) == 2
    assert default_max_new_tokens(model, 4, prefix_length=max_tokens - 1) == 1  # room for one token
    assert default_max_new_tokens(model, 4, prefix_length=max_tokens) == 1  # never below one


def test_each_sentence_gets_its_own_limit_and_the_prefix_takes_its_room(model):
    long_row = torch.randint(4, 40, (60,))
    short_row = torch.cat([torch.randint(4, 40, (4,)), torch.zeros(56, dtype=torch.long)])  # 4 tokens, then padding
    src = torch.stack([long_row, short_row])
    max_tokens = model.config.max_sequence_tokens
    assert row_limits(model, src, 0, None) == [max_tokens, 6 + 10]
    assert row_limits(model, src, 5, None) == [max_tokens - 5, 6 + 10]
    assert row_limits(model, src, 5, 7) == [7, 7]  # a given max_new_tokens holds for every sentence


def test_strip_drops_padding_wherever_it_is_and_cuts_after_the_first_eos():
    pad, eos = 0, 3
    assert _strip([5, pad, 6, eos, 7, eos, pad], eos, pad) == [5, 6, eos]
    assert _strip([pad, 5, 6], eos, pad) == [5, 6]  # no EOS: everything but the padding


@pytest.mark.parametrize("beam_size", [0, -1])
def test_a_beam_size_below_one_is_refused(model, beam_size):
    src = torch.randint(4, 40, (1, 5))
    with pytest.raises(ValueError, match=r"^beam_size must be at least 1$"):
        beam_search(model, src, beam_size=beam_size)
