"""Translator: what a trace records (mode, beam size, limits, truncation), teacher forcing and prefixes by text or
ids, forks, beam trees, the GPU out-of-memory fallback and text cleaning.

Exact expectations come from the shipped toy-reverse checkpoint ("a b c d e" -> "e d c b a", one piece per letter,
max_len 32: 31 tokens besides BOS or EOS); output limits from the tiny random model of tests/conftest.py, which never
ends a translation by itself, so its outputs are exactly as long as the limit allows.
"""

from __future__ import annotations

import copy
import logging

import numpy as np
import pytest
import torch

from model import load_checkpoint
from model import translator as translator_module
from model.decoding.scoring import DEFAULT_ALPHA, Scoring
from model.decoding.search import beam_search, greedy_decode
from model.tokenizer import Tokenizer, clean_text
from model.trace import DEFAULT_TOP_K, Fork, Trace, TraceOutcome
from model.transformer import Transformer
from model.translator import OOM_NOTICE, Translator
from tests.helpers import REPO, SENTENCE, small_config

CHECKPOINTS = REPO / "checkpoints"
BOS, EOS = 2, 3


@pytest.fixture(scope="module")
def toy() -> Translator:
    return load_checkpoint(CHECKPOINTS / "toy-reverse", device="cpu")


@pytest.fixture(scope="module")
def split(toy) -> Translator:
    """toy-reverse's model with another target vocabulary (toy-sort's: other letters at the same ids), so that
    target ids read with the source vocabulary would show."""
    target = Tokenizer.load(CHECKPOINTS / "toy-sort").target
    return Translator(toy.model, Tokenizer(toy.tokenizer.source, target), torch.device("cpu"), name="split")


def letters(translator: Translator, text: str) -> list[int]:
    return translator.tokenizer.encode(text, "target")


def default_limit(source_ids: list[int]) -> int:
    """The output limit without max_new_tokens (1.5 x the source plus 10), for the tiny model's 63 positions."""
    return int(1.5 * len(source_ids)) + 10


# --- clean_text, source_ids ---


def test_clean_text_turns_control_characters_into_spaces_and_lone_surrogates_into_question_marks():
    assert clean_text("a\tb\nc\x00d\x7fe\x85f\rg") == "a b c d e f g"
    assert clean_text("ab\ud800c\udfff") == "ab?c?"
    assert clean_text("naïve café, 2 × 3 — ok\u200b") == "naïve café, 2 × 3 — ok\u200b"  # the rest is kept


def test_source_ids_are_truncated_and_flagged_only_beyond_the_models_positions(toy):
    a = letters(toy, "a")[0]
    room = toy.config.max_sequence_tokens
    exact = toy.source_ids(" ".join("a" * room))
    assert exact.ids == [a] * room + [EOS] and not exact.truncated and exact.original_length == room
    longer = toy.source_ids(" ".join("a" * (room + 1)))
    assert longer.ids == exact.ids and longer.truncated and longer.original_length == room + 1
    outcome = toy.trace(" ".join("a" * (room + 1)), beam_size=1).outcome
    assert outcome.truncated and outcome.source_pieces_before_truncation == room + 1
    assert not toy.trace(" ".join("a" * room), beam_size=1).outcome.truncated


# --- trace: settings, limits, teacher forcing, prefixes, refusals ---


def test_trace_records_mode_beam_size_limits_and_the_model(toy):
    greedy = toy.trace("a b c d e", beam_size=1)
    assert greedy.translation == "e d c b a"
    assert greedy.settings.to_dict() == {
        "mode": "greedy",
        "beam_size": 1,
        "max_new_tokens": None,
        "top_k": DEFAULT_TOP_K,
        "target": None,
        "prefix": None,
        "target_ids": None,
        "prefix_ids": [],
        "scoring": None,
        "sampling": None,
        "source_language": None,
        "target_language": None,
    }
    assert greedy.outcome == TraceOutcome(truncated=False, source_pieces_before_truncation=5, cut_off=False)
    beam = toy.trace("a b c d e", beam_size=2, max_new_tokens=8, top_k=3)
    assert beam.translation == "e d c b a"
    assert {key: beam.settings.to_dict()[key] for key in ("mode", "beam_size", "max_new_tokens", "top_k")} == {
        "mode": "beam",
        "beam_size": 2,
        "max_new_tokens": 8,
        "top_k": 3,
    }
    assert beam.topk_ids.shape == (beam.n_steps, 3)
    assert beam.topk_pieces == [toy.tokenizer.pieces(row, "target") for row in beam.topk_ids.tolist()]
    assert beam.step_probs.dtype == np.float32 and beam.topk_probs.dtype == np.float32
    assert beam.model_info == {
        "checkpoint": "toy-reverse",
        "d_model": 32,
        "n_heads": 4,
        "n_encoder_layers": 2,
        "n_decoder_layers": 2,
        "special_pieces": ["<pad>", "<unk>", "<s>", "</s>"],
    }


def test_max_len_bounds_the_output_and_without_it_the_default_limit_does(toy, translator):
    assert toy.trace("a b c", beam_size=1, max_new_tokens=1).target_ids == [BOS] + letters(toy, "c")
    for beam_size in (1, 3):  # the tiny model never ends by itself: its outputs are as long as allowed
        trace = translator.trace(SENTENCE, beam_size=beam_size)
        assert trace.n_steps == default_limit(trace.source_ids)
    room = translator.config.max_sequence_tokens
    prefixed = translator.trace(SENTENCE, beam_size=1, max_new_tokens=20, prefix_ids=[10] * (room - 5))
    assert prefixed.n_steps == room  # a prefix and max_new_tokens together stay within the model's positions


def test_a_translation_that_reached_its_limit_before_eos_is_marked_cut_off(toy, translator):
    assert toy.trace("a b c", beam_size=1, max_new_tokens=1).outcome.cut_off  # "c" and no room left for EOS
    assert not toy.trace("a b c", beam_size=2, max_new_tokens=4).outcome.cut_off  # "c b a" then EOS
    for beam_size in (1, 3):  # the tiny model never writes EOS by itself
        assert translator.trace(SENTENCE, beam_size=beam_size).outcome.cut_off
    forced = translator.trace(SENTENCE, target_ids=[10, 11])  # a typed target is the user's, not cut off
    assert not forced.outcome.cut_off


def test_shown_probabilities_never_offer_a_token_the_decoder_cannot_write(translator):
    """However likely the model makes <pad> and BOS, the trace's probabilities (the views' top-k lists, each step's
    probability) are those decoding chooses from: both at 0, the rest summing to 1."""
    model = copy.deepcopy(translator.model)
    never = model.config.never_generated

    def favour_never_generated(module, inputs, logits):
        logits = logits.clone()
        logits[..., never] += 50.0
        return logits

    model.generator.register_forward_hook(favour_never_generated)
    tempted = Translator(model, translator.tokenizer, torch.device("cpu"), name="tempted")
    vocabulary = model.config.tgt_vocab_size
    trace = tempted.trace(SENTENCE, beam_size=1, max_new_tokens=4, top_k=vocabulary)
    assert set(trace.target_ids[1:]).isdisjoint(never)  # decoding itself never took them
    every = dict(zip(trace.topk_ids[0].tolist(), trace.topk_probs[0].tolist(), strict=True))
    assert [every[token] for token in never] == [0.0] * len(never)
    np.testing.assert_allclose(trace.topk_probs.sum(axis=1), 1.0, rtol=1e-5)
    shown = tempted.trace(SENTENCE, beam_size=1, max_new_tokens=4)  # the default top-k a view shows
    assert set(shown.topk_ids.ravel().tolist()).isdisjoint(never)


def test_beam_size_one_is_greedy_decoding():
    svo = load_checkpoint(CHECKPOINTS / "toy-svo-sov", device="cpu")
    text = "old fish dog farmer"  # a sentence where a beam of one (which may outlive an EOS) decodes otherwise
    src = torch.tensor([svo.source_ids(text).ids])
    greedy = greedy_decode(svo.model, src)[0]
    assert beam_search(svo.model, src, 1)[0][0].tokens != greedy
    assert svo.trace(text, beam_size=1).target_ids[1:] == greedy
    assert svo.translate(text, beam_size=1) == svo.tokenizer.decode(greedy, "target")


def test_teacher_forcing_with_target_text_or_target_ids(toy):
    forced_ids = letters(toy, "c b a")
    by_text = toy.trace("a b c", target="c b a")
    assert by_text.target_ids == [BOS] + forced_ids + [EOS]
    assert by_text.settings.mode == "forced"
    assert by_text.settings.target == "c b a" and by_text.settings.target_ids == forced_ids + [EOS]
    with_eos = toy.trace("a b c", target_ids=forced_ids + [EOS])
    assert with_eos.target_ids == by_text.target_ids and with_eos.settings.target is None
    np.testing.assert_array_equal(with_eos.step_probs, by_text.step_probs)
    without_eos = toy.trace("a b c", target_ids=forced_ids)  # read exactly as given: no EOS added
    assert without_eos.target_ids == [BOS] + forced_ids and without_eos.settings.target_ids == forced_ids
    np.testing.assert_allclose(without_eos.step_probs, by_text.step_probs[:3], rtol=0, atol=1e-6)
    room = toy.config.max_sequence_tokens
    assert toy.trace("a", target_ids=[forced_ids[0]] * room).n_steps == room  # every position may be forced


def test_long_target_and_prefix_texts_are_cut_to_the_models_positions(toy):
    a = letters(toy, "a")[0]
    room = toy.config.max_sequence_tokens
    long = " ".join("a" * 40)
    forced = toy.trace("a", target=long)
    assert forced.target_ids == [BOS] + [a] * (room - 1) + [EOS]  # BOS, then max_new_tokens - 1 tokens with the EOS
    prefixed = toy.trace("a", beam_size=1, prefix=long)
    assert prefixed.settings.prefix == long and prefixed.settings.prefix_ids == [a] * (room - 1)
    assert prefixed.target_ids[:room] == [BOS] + [a] * (room - 1) and len(prefixed.target_ids) == room + 1


def test_a_prefix_given_as_text_or_as_ids_starts_the_output(toy):
    x = letters(toy, "x")
    by_text = toy.trace("a b c", beam_size=1, prefix="x")
    by_ids = toy.trace("a b c", beam_size=1, prefix_ids=x)
    assert by_text.target_ids[1:2] == x and by_ids.target_ids == by_text.target_ids
    assert by_text.settings.prefix == "x" and by_text.settings.prefix_ids == x
    assert by_ids.settings.prefix is None and by_ids.settings.prefix_ids == x
    assert by_ids.settings.mode == "greedy" and by_ids.settings.target_ids is None


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"target": "a", "target_ids": [19]}, "give target or target_ids, not both"),
        ({"prefix": "a", "prefix_ids": [19]}, "give prefix or prefix_ids, not both"),
        ({"target_ids": []}, "target_ids is empty: give at least one token to force"),
        ({"target_ids": [19, 0]}, "target_ids[1] = 0 is not a token the decoder can produce"),
        ({"target_ids": [30]}, "target_ids[0] = 30 is not a token the decoder can produce"),
        ({"target_ids": [-1]}, "target_ids[0] = -1 is not a token the decoder can produce"),
        ({"target_ids": [EOS, 19]}, "target_ids[0] is EOS but is not the last token"),
        ({"target_ids": [19] * 32}, "target_ids has 32 tokens; the model reads at most 31"),
        ({"prefix_ids": [BOS]}, "prefix_ids[0] = 2 is not a token the decoder can produce"),
        ({"prefix_ids": [19, EOS, 19]}, "prefix_ids[1] is EOS but is not the last token"),
        ({"prefix_ids": [19] * 32}, "prefix_ids has 32 tokens; the model reads at most 31"),
    ],
)
def test_trace_refuses_conflicting_or_impossible_requests_by_name(toy, request_, message):
    with pytest.raises(ValueError) as error:
        toy.trace("a b c", beam_size=1, **request_)
    assert str(error.value) == message


def test_eos_may_be_token_zero_as_in_marian_vocabularies(toy):
    torch.manual_seed(0)
    model = Transformer(small_config(30, pad_id=3, eos_id=0)).eval()  # MarianMT's </s> is id 0
    marian_like = Translator(model, toy.tokenizer, torch.device("cpu"))
    assert marian_like.trace("a b", target_ids=[19, 0]).target_ids == [BOS, 19, 0]
    with pytest.raises(ValueError) as error:
        marian_like.trace("a b", target_ids=[0, 19])
    assert str(error.value) == "target_ids[0] is EOS but is not the last token"
    with pytest.raises(ValueError) as error:
        marian_like.trace("a b", target_ids=[19, 3])
    assert str(error.value) == "target_ids[1] = 3 is not a token the decoder can produce"  # its padding


def test_target_text_and_pieces_use_the_target_vocabulary(split):
    tokenizer = split.tokenizer
    assert tokenizer.encode("d o q", "target") != tokenizer.encode("d o q", "source")
    forced = split.trace("a b c", target="d o q", top_k=3)
    assert forced.target_ids == [BOS] + tokenizer.encode("d o q", "target") + [EOS]
    assert forced.target_pieces == ["<s>", "▁d", "▁o", "▁q", "</s>"]
    assert forced.source_pieces == ["▁a", "▁b", "▁c", "</s>"]
    assert forced.topk_pieces == [tokenizer.pieces(row, "target") for row in forced.topk_ids.tolist()]
    assert forced.topk_pieces != [tokenizer.pieces(row, "source") for row in forced.topk_ids.tolist()]
    d = tokenizer.encode("d", "target")
    tree = split.beam_tree("a b c", beam_size=2, max_new_tokens=3, prefix_ids=d)
    assert tree.prefix_pieces == ["▁d"] and tree.source_pieces == forced.source_pieces
    assert [node.piece for node in tree.nodes] == tokenizer.pieces([node.token for node in tree.nodes], "target")
    assert [node.piece for node in tree.nodes] != tokenizer.pieces([node.token for node in tree.nodes], "source")


# --- translate_batch ---


def test_translate_batch_groups_similar_lengths_and_keeps_the_order(toy, monkeypatch):
    texts = ["a b c d e f g", "a b c", "a b c d e f", "a b c d"]
    batches = []
    generate = translator_module.search_batch

    def spy(model, device, sources, *args, **kwargs):
        batches.append([len(ids) for ids in sources])
        return generate(model, device, sources, *args, **kwargs)

    monkeypatch.setattr(translator_module, "search_batch", spy)
    assert toy.translate_batch(texts, beam_size=2, batch_size=2) == ["g f e d c b a", "c b a", "f e d c b a", "d c b a"]
    assert batches == [[4, 5], [7, 8]]  # shortest first, two at a time, each sentence once (ids with EOS)


# --- the GPU out-of-memory fallback ---


def pretend_gpu(toy: Translator) -> Translator:
    return Translator(toy.model, toy.tokenizer, torch.device("cuda"), name="pretend")


def test_translate_trace_and_beam_tree_run_on_the_translators_device(toy, monkeypatch):
    translator = pretend_gpu(toy)
    devices = []

    def on_the_cpu(function):  # records the device asked for, then runs on the CPU (where the model is)
        def spy(model, device, *args, **kwargs):
            devices.append(device)
            return function(model, torch.device("cpu"), *args, **kwargs)

        return spy

    monkeypatch.setattr(translator_module, "search_batch", on_the_cpu(translator_module.search_batch))
    monkeypatch.setattr(translator, "_beam_tree_on", on_the_cpu(translator._beam_tree_on))
    assert translator.translate("a b c", beam_size=2) == "c b a"
    assert translator.trace("a b c", beam_size=1).translation == "c b a"
    assert translator.beam_tree("a b c", beam_size=2, max_new_tokens=4).source_text == "a b c"
    assert devices == [torch.device("cuda")] * 3


def test_gpu_out_of_memory_reruns_on_one_cpu_copy_and_says_so(toy, caplog):
    translator = pretend_gpu(toy)
    calls = []

    def work(model, device):
        calls.append((model, device))
        if device.type == "cuda":
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return "done"

    with caplog.at_level(logging.WARNING, logger="model.translator"):
        assert translator.run(work) == ("done", OOM_NOTICE)
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("model.translator", "WARNING", OOM_NOTICE)
    ]
    (first_model, first_device), (cpu_model, cpu_device) = calls
    assert first_model is toy.model and first_device == torch.device("cuda")
    assert cpu_device == torch.device("cpu") and cpu_model is not toy.model
    shared = {p.data_ptr() for p in toy.model.parameters()}
    assert not any(p.data_ptr() in shared for p in cpu_model.parameters())  # its own weights: the model is untouched
    assert translator.run(work) == ("done", OOM_NOTICE)
    assert calls[3][0] is cpu_model  # the copy is made once and shared


def test_out_of_memory_on_the_cpu_is_raised(toy):
    calls = []

    def work(model, device):
        calls.append(device)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("out of memory (simulated)")
        return "done"

    with pytest.raises(torch.OutOfMemoryError):
        toy.run(work)  # there is nowhere else to run it
    assert calls == [torch.device("cpu")]


def test_trace_and_fork_show_the_out_of_memory_notice(toy, monkeypatch):
    trace_on = Translator._trace_on

    def flaky(self, model, device, *args):
        if device.type == "cuda":
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return trace_on(self, model, device, *args)

    monkeypatch.setattr(Translator, "_trace_on", flaky)
    translator = pretend_gpu(toy)
    original = translator.trace("a b c d e", beam_size=1)
    assert original.translation == "e d c b a" and original.outcome.notice == OOM_NOTICE
    forked = translator.fork(original, 1, "x")
    assert forked.target_ids[:3] == [BOS] + letters(toy, "e x") and forked.outcome.notice == OOM_NOTICE
    assert toy.fork(toy.trace("a b c d e", beam_size=1), 1, "x").outcome.notice is None


# --- fork ---


def test_fork_at_a_step_with_a_token_id_or_a_typed_word(toy):
    original = toy.trace("a b c d e", beam_size=1)  # no max_new_tokens: the fork keeps the default limit
    e, x = letters(toy, "e x")
    by_id = toy.fork(original, 1, x)
    by_word = toy.fork(original, 1, "x")
    assert by_id.target_ids[:3] == [BOS, e, x] and by_word.target_ids == by_id.target_ids
    assert by_id.outcome.fork == Fork(
        step=1, token_ids=[x], pieces=["▁x"], notice=None, original_target_ids=original.target_ids
    )
    asked = by_id.settings.to_dict()
    requested = {key: asked[key] for key in ("mode", "beam_size", "top_k", "target", "prefix", "target_ids")}
    assert requested == {
        "mode": "greedy",
        "beam_size": 1,
        "top_k": DEFAULT_TOP_K,
        "target": None,
        "prefix": None,
        "target_ids": None,
    }
    assert by_id.settings.prefix_ids == [e, x]
    for step, token, message in [
        (6, x, "step must be an integer in 0..5, not 6"),
        (0, 30, "token id 30 is outside the target vocabulary (0..29)"),
        (0, BOS, "token id 2 is padding or BOS, which the decoder never generates"),
    ]:
        with pytest.raises(ValueError) as error:
            toy.fork(original, step, token)
        assert str(error.value) == message


def test_fork_decodes_with_the_originals_beam_size_and_top_k(toy):
    original = toy.trace("a b c d e", beam_size=3, top_k=3)
    forked = toy.fork(original, 2, "x")
    assert (forked.settings.mode, forked.settings.beam_size, forked.settings.top_k) == ("beam", 3, 3)
    assert forked.topk_ids.shape == (forked.n_steps, 3)
    assert toy.fork(original, 2, "x", top_k=7).topk_ids.shape == (forked.n_steps, 7)


def test_fork_of_a_trace_without_beam_size_or_top_k_decodes_greedily_with_the_default_top_k(toy):
    saved = toy.trace("a b c d e", beam_size=3, top_k=3).to_dict()
    del saved["settings"]["beam_size"], saved["settings"]["top_k"]  # a trace saved before they were recorded
    forked = toy.fork(Trace.from_dict(saved), 2, "x")
    assert (forked.settings.mode, forked.settings.beam_size, forked.settings.top_k) == (
        "greedy",
        1,
        DEFAULT_TOP_K,
    )


def test_fork_stays_within_the_originals_output_limit(translator):
    # the tiny model never ends by itself, so a fork is exactly as long as the original's limit allows
    original = translator.trace(SENTENCE, beam_size=1)  # the default limit
    assert original.n_steps == default_limit(original.source_ids)
    forked = translator.fork(original, 3, 10 if original.target_ids[4] != 10 else 11)
    assert forked.n_steps == original.n_steps
    prefixed = translator.trace(
        SENTENCE, beam_size=1, max_new_tokens=6, prefix_ids=[12, 13]
    )  # 6 tokens after the prefix
    assert prefixed.n_steps == 8
    assert translator.fork(prefixed, 4, 10 if prefixed.target_ids[5] != 10 else 11).n_steps == 8


# --- beam trees ---


def test_beam_tree_is_the_search_asked_for(toy, translator):
    tree = translator.beam_tree(SENTENCE, beam_size=2)  # no max_new_tokens: the default limit
    assert tree.max_new_tokens == default_limit(tree.source_ids) and tree.scoring.alpha == DEFAULT_ALPHA
    assert tree.prefix_pieces == []
    short = toy.beam_tree("a b c", beam_size=2, max_new_tokens=1, scoring=Scoring(alpha=0.0))
    assert (short.beam_size, short.max_new_tokens, short.scoring.alpha) == (2, 1, 0.0)
    assert [short.sequence(h.id) for h in short.results()][0] == letters(toy, "c")
    x = letters(toy, "x")
    assert toy.beam_tree("a b c", beam_size=2, max_new_tokens=2, prefix_ids=x).prefix_pieces == ["▁x"]


@pytest.mark.parametrize(
    ("prefix_ids", "message"),
    [
        ([EOS], "prefix_ids ends with EOS: there is nothing left to search"),
        ([19, 22, EOS], "prefix_ids ends with EOS: there is nothing left to search"),
        ([BOS], "prefix_ids[0] = 2 is not a token the decoder can produce"),
        ([19] * 31, "a prefix of 31 tokens leaves no room to search in this model"),
    ],
)
def test_beam_tree_refuses_prefixes_with_nothing_to_search(toy, prefix_ids, message):
    with pytest.raises(ValueError) as error:
        toy.beam_tree("a b c", beam_size=2, prefix_ids=prefix_ids)
    assert str(error.value) == message


def test_beam_node_trace_forces_that_nodes_hypothesis(toy):
    tree = toy.beam_tree("a b c", beam_size=2, max_new_tokens=4)
    first = toy.beam_node_trace(tree, 1, top_k=3)
    assert first.target_ids == [BOS] + tree.sequence(1) and first.n_steps == 1
    settings = first.settings
    assert (settings.mode, settings.beam_size, settings.top_k, first.outcome.beam_node) == ("forced", 2, 3, 1)
    assert first.topk_ids.shape == (1, 3)
    last = len(tree.nodes) - 1
    assert toy.beam_node_trace(tree, last).outcome.beam_node == last
    for node_id in (0, last + 1):
        with pytest.raises(ValueError) as error:
            toy.beam_node_trace(tree, node_id)
        assert str(error.value) == f"node_id must be in 1..{last} (0 is the root), not {node_id}"
