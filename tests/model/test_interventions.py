"""Interventions: head ablation changes exactly what flows through the head, importance finds the head that matters,
positional experiments remove positions or reorder words (their figures: tests/viz/test_interventions.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model import Transformer, capture_attention
from model.analysis.ablation import (
    ablate_heads,
    ablate_heads_by_row,
    compare_ablation,
    log_probability,
    mean_head_outputs,
)
from model.analysis.alignment import token_diff
from model.analysis.importance import head_importance
from model.analysis.word_order import (
    compare_word_order,
    shuffle_source_words,
    shuffled_order,
    without_positional_encoding,
)
from model.decoding.search import next_token_log_probs
from model.heads import HeadRef, all_heads, check_heads
from model.translator import Translator
from tests.helpers import SENTENCE, small_config
from tests.helpers import SHORT_MAX_LEN as MAX_LEN

OTHER = "two dogs play with a red ball."
VOCAB = 30


@pytest.fixture(scope="module")
def small_model() -> Transformer:
    torch.manual_seed(1)
    return Transformer(small_config(VOCAB)).eval()


def batch(rows: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Source (rows, 7) and decoder input (rows, 6) of random ordinary tokens (no padding, BOS first)."""
    generator = torch.Generator().manual_seed(5)
    src = torch.randint(4, VOCAB, (rows, 7), generator=generator)
    tgt = torch.randint(4, VOCAB, (rows, 6), generator=generator)
    tgt[:, 0] = 2
    return src, tgt


def module(model: Transformer, ref: HeadRef) -> torch.nn.Module:
    return dict(model.named_modules())[ref.module_name]


def head_slice(model: Transformer, ref: HeadRef) -> torch.Tensor:
    """The columns of out_proj.weight that read head ``ref.head``: (d_model, d_k)."""
    dk = model.config.head_dim
    return module(model, ref).out_proj.weight[:, ref.head * dk : (ref.head + 1) * dk]


def run_observed(model: Transformer, ref: HeadRef, src: torch.Tensor, tgt: torch.Tensor):
    """Logits, every module's captured internals and attention, and the output of ``ref``'s module."""
    outputs = []
    handle = module(model, ref).register_forward_hook(lambda _m, _i, output: outputs.append(output))
    try:
        with torch.no_grad(), capture_attention(model, internals=True) as capture:
            logits = model(src, tgt)
    finally:
        handle.remove()
    return logits, capture, outputs[0]


# --- heads and modules ---


def test_head_refs_name_real_modules_and_bad_heads_are_refused(small_model):
    modules = dict(small_model.named_modules())
    heads = all_heads(small_model.config)
    assert len(heads) == 3 * 2 * 4
    assert {type(modules[ref.module_name]).__name__ for ref in heads} == {"MultiHeadAttention"}
    assert HeadRef("cross", 1, 2).module_name == "decoder.layers.1.cross_attn"
    assert HeadRef("cross", 1, 2).label == "cross L2 H3"
    assert check_heads(small_model.config, [HeadRef("encoder_self", 0, 1)] * 2) == [HeadRef("encoder_self", 0, 1)]
    for bad in (HeadRef("encoder_self", 2, 0), HeadRef("decoder_self", 0, 4)):
        with pytest.raises(ValueError, match="not in this model"):
            check_heads(small_model.config, [bad])
    with pytest.raises(ValueError, match="kind"):
        HeadRef("self", 0, 0)
    with pytest.raises(ValueError, match="head"):
        HeadRef("cross", 0, -1)
    with pytest.raises(ValueError, match="mode"):
        with ablate_heads(small_model, [HeadRef("cross", 0, 0)], mode="noise"):
            pass
    with pytest.raises(ValueError, match="mean head outputs"):
        with ablate_heads(small_model, [HeadRef("cross", 0, 0)], mode="mean"):
            pass


# --- ablation is exact ---


def test_no_ablation_reproduces_the_original_logits_exactly(small_model):
    src, tgt = batch()
    with torch.no_grad():
        plain = small_model(src, tgt)
        with ablate_heads(small_model, []):
            assert torch.equal(small_model(src, tgt), plain)
        with capture_attention(small_model):  # the explicit attention path, which every edit takes
            explicit = small_model(src, tgt)
        with ablate_heads_by_row(small_model, [[], []]):
            assert torch.equal(small_model(src, tgt), explicit)


@pytest.mark.parametrize("kind", ["encoder_self", "decoder_self", "cross"])
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_ablating_a_head_removes_exactly_its_contribution(small_model, kind, mode):
    ref = HeadRef(kind, 1, 2)
    src, tgt = batch()
    logits, capture, output = run_observed(small_model, ref, src, tgt)
    heads = capture.internals[ref.module_name]["head_output"]  # (B, H, Tq, dk)
    mean = torch.randn(4, small_model.config.head_dim, generator=torch.Generator().manual_seed(2))
    means = {ref.module_name: mean}
    with ablate_heads(small_model, [ref], mode, means if mode == "mean" else None):
        ablated_logits, ablated_capture, ablated_output = run_observed(small_model, ref, src, tgt)
    ablated_heads = ablated_capture.internals[ref.module_name]["head_output"]

    replacement = torch.zeros_like(heads[:, 2]) if mode == "zero" else mean[2].expand_as(heads[:, 2])
    assert torch.equal(ablated_heads[:, 2], replacement)
    others = [0, 1, 3]
    assert torch.equal(ablated_heads[:, others], heads[:, others])
    # The module's output changes by exactly the head's term through out_proj: W_h (replacement - original).
    expected = output + (replacement - heads[:, 2]) @ head_slice(small_model, ref).T  # (B, Tq, d)
    torch.testing.assert_close(ablated_output, expected, rtol=0, atol=1e-5)
    # Upstream of the module nothing changes; the logits downstream do.
    upstream = ["encoder.layers.0.self_attn"] + (["decoder.layers.0.self_attn"] if kind != "encoder_self" else [])
    for name in upstream + (["decoder.layers.1.self_attn"] if kind == "cross" else []):
        assert torch.equal(ablated_capture.attention[name], capture.attention[name])
    assert not torch.allclose(ablated_logits, logits)


def test_rows_lose_only_their_own_heads(small_model):
    src, tgt = batch(3)
    removed = [[], [HeadRef("cross", 0, 1)], [HeadRef("encoder_self", 1, 3), HeadRef("decoder_self", 0, 0)]]
    with torch.no_grad(), ablate_heads_by_row(small_model, removed):
        together = small_model(src, tgt)
    for row, heads in enumerate(removed):
        with torch.no_grad(), ablate_heads(small_model, heads), capture_attention(small_model):
            alone = small_model(src[row : row + 1], tgt[row : row + 1])
        torch.testing.assert_close(together[row : row + 1], alone, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="batch of 2"):
        with torch.no_grad(), ablate_heads_by_row(small_model, removed):
            small_model(src[:2], tgt[:2])


def test_mean_head_outputs_pool_every_position_of_every_sentence(translator):
    model, config = translator.model, translator.config
    outputs = [translator.trace(text, beam_size=1, max_new_tokens=MAX_LEN).target_ids[1:] for text in (SENTENCE, OTHER)]
    means = mean_head_outputs(translator, [SENTENCE, OTHER], outputs)
    assert set(means) == {ref.module_name for ref in all_heads(config)}
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    for text, output in zip((SENTENCE, OTHER), outputs, strict=True):
        src = torch.tensor([translator.source_ids(text).ids])
        tgt = torch.tensor([[config.bos_id] + output[:-1]])
        with torch.no_grad(), capture_attention(model, internals=True) as capture:
            model(src, tgt)
        for name, probes in capture.internals.items():
            heads = probes["head_output"][0]  # (H, Tq, dk)
            sums[name] = sums.get(name, 0) + heads.sum(dim=1)
            counts[name] = counts.get(name, 0) + heads.size(1)
    for name, mean in means.items():
        torch.testing.assert_close(mean, sums[name] / counts[name], rtol=0, atol=1e-6)
    # Forced on its own greedy translation when no output is given:
    own = mean_head_outputs(translator, [SENTENCE], beam_size=1, max_new_tokens=MAX_LEN)
    forced = mean_head_outputs(translator, [SENTENCE], outputs[:1])
    for name in own:
        torch.testing.assert_close(own[name], forced[name], rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_ablated_decoding_removes_the_head_at_every_step(translator, mode):
    """Greedy decoding (one query row per step, cached keys) ablates as the full teacher-forced pass does:
    every token it outputs is the argmax of the ablated full pass over that output."""
    heads = [HeadRef("cross", 1, 0), HeadRef("decoder_self", 0, 3), HeadRef("encoder_self", 1, 1)]
    comparison = compare_ablation(translator, SENTENCE, heads, mode, beam_size=1, max_new_tokens=MAX_LEN)
    ablated = comparison.ablated
    means = mean_head_outputs(translator, [SENTENCE], [comparison.original.target_ids[1:]]) if mode == "mean" else None
    src = torch.tensor([ablated.source_ids])
    with torch.no_grad(), ablate_heads(translator.model, heads, mode, means):
        logits = translator.model(src, torch.tensor([ablated.target_ids[:-1]]))
    argmax = next_token_log_probs(translator.model, logits[0]).argmax(dim=-1).tolist()
    assert argmax == ablated.target_ids[1:]
    assert ablated.outcome.experiment["mode"] == mode


def test_no_ablation_gives_the_original_translation_and_probabilities(translator):
    comparison = compare_ablation(translator, SENTENCE, [], beam_size=3, max_new_tokens=MAX_LEN)
    assert comparison.ablated.target_ids == comparison.original.target_ids
    assert np.array_equal(comparison.forced.step_probs, comparison.original.step_probs)
    assert comparison.diff.identical and not any(comparison.diff.original_changed)
    assert comparison.log_prob_drop == 0.0


def test_compare_ablation_scores_the_original_tokens_with_the_heads_removed(translator):
    heads = [HeadRef("cross", layer, head) for layer in range(2) for head in range(4)]
    comparison = compare_ablation(translator, SENTENCE, heads, beam_size=3, max_new_tokens=MAX_LEN)
    original, forced = comparison.original, comparison.forced
    assert forced.target_ids == original.target_ids
    with torch.no_grad(), ablate_heads(translator.model, heads):
        logits = translator.model(torch.tensor([original.source_ids]), torch.tensor([original.target_ids[:-1]]))
    probs = next_token_log_probs(translator.model, logits[0]).exp()  # what decoding chooses from
    by_hand = probs.gather(1, torch.tensor(original.target_ids[1:])[:, None])[:, 0]
    np.testing.assert_allclose(forced.step_probs, by_hand.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(comparison.probability_change, forced.step_probs - original.step_probs)
    expected_drop = np.log(original.step_probs.astype(np.float64)).sum() - np.log(by_hand.double().numpy()).sum()
    assert comparison.log_prob_drop == pytest.approx(expected_drop, abs=1e-4)
    assert comparison.diff == token_diff(original.predicted_pieces, comparison.ablated.predicted_pieces)
    assert comparison.ablated.outcome.experiment["heads"][0] == {"kind": "cross", "layer": 0, "head": 0}


def test_token_diff_marks_changed_tokens_and_aligns_columns():
    diff = token_diff(["a", "b", "c", "</s>"], ["a", "x", "y", "c", "</s>", "z"])
    assert diff.original_changed == [False, True, False, False]
    assert diff.other_changed == [False, True, True, False, False, True]
    assert diff.columns() == [(0, 0), (1, 1), (None, 2), (2, 3), (3, 4), (None, 5)]
    assert token_diff(["a"], ["a"]).identical
    assert log_probability(np.array([0.5, 0.0], dtype=np.float32)) > -np.inf


# --- importance ---


def one_head_model(vocab: int, decisive: HeadRef) -> Transformer:
    """A model in which ``decisive`` (a cross-attention head of the last decoder layer) is the only path to the output.

    Every other head's out_proj columns are zero, so removing it changes nothing. In the
    decoder, layer 0's first LayerNorm has zero gain, and attention and LayerNorm biases and
    the feed-forward layers are zero: without the decisive head the decoder state is exactly
    zero, the logits are the output bias, and every token but padding and BOS (bias -1e9) is
    equally likely. With it, the most likely token is likelier than that, so the greedy
    translation loses log-probability when the head is removed.
    """
    torch.manual_seed(0)
    model = Transformer(small_config(vocab)).eval()
    config = model.config
    with torch.no_grad():
        for ref in all_heads(config):
            if ref != decisive:
                head_slice(model, ref).zero_()
        for layer in model.decoder.layers:
            for attention in (layer.self_attn, layer.cross_attn):
                attention.out_proj.bias.zero_()
            for part in (layer.feed_forward.linear1, layer.feed_forward.linear2):
                part.weight.zero_()
                part.bias.zero_()
            for norm in (layer.norm1, layer.norm2, layer.norm3):
                norm.bias.zero_()
        model.decoder.layers[0].norm1.weight.zero_()
        model.generator.bias.zero_()
        model.generator.bias[[config.pad_id, config.bos_id]] = -1e9
    return model


def test_importance_ranks_a_decisive_head_first(toy_tokenizer):
    decisive = HeadRef("cross", 1, 2)
    model = one_head_model(toy_tokenizer.vocab_size("target"), decisive)
    translator = Translator(model, toy_tokenizer, torch.device("cpu"))
    trace = translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN)
    importance = head_importance(translator, SENTENCE, target_ids=trace.target_ids[1:])
    ranking = importance.ranking()
    assert ranking[0][0] == decisive
    # Removing it leaves a uniform distribution over the vocabulary but padding and BOS, at every step.
    uniform = np.log(model.config.tgt_vocab_size - 2) * trace.n_steps
    assert ranking[0][1] == pytest.approx(np.log(trace.step_probs.astype(np.float64)).sum() + uniform, abs=1e-3)
    assert ranking[0][1] > 0.1
    assert all(abs(drop) < 1e-5 for _, drop in ranking[1:])


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_batched_importance_equals_removing_each_head_alone(translator, mode):
    output = translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN).target_ids[1:]
    importance = head_importance(translator, SENTENCE, target_ids=output, mode=mode)
    baseline = translator.trace(SENTENCE, target_ids=output)
    assert importance.baseline_log_prob == pytest.approx(log_probability(baseline.step_probs), abs=1e-4)
    means = mean_head_outputs(translator, [SENTENCE], [output]) if mode == "mean" else None
    for ref in all_heads(translator.config):
        with ablate_heads(translator.model, [ref], mode, means):
            alone = translator.trace(SENTENCE, target_ids=output)
        drop = log_probability(baseline.step_probs) - log_probability(alone.step_probs)
        assert importance.drops[ref.kind][ref.layer, ref.head] == pytest.approx(drop, abs=1e-4)
    chunked = head_importance(translator, SENTENCE, target_ids=output, mode=mode, batch_size=5)
    for kind, grid in importance.drops.items():
        np.testing.assert_allclose(chunked.drops[kind], grid, rtol=0, atol=1e-5)


def test_importance_of_some_kinds_and_its_own_translation(translator):
    importance = head_importance(translator, SENTENCE, kinds=["cross"], beam_size=3, max_new_tokens=MAX_LEN)
    assert list(importance.drops) == ["cross"] and importance.drops["cross"].shape == (2, 4)
    assert importance.target_ids == translator.trace(SENTENCE, beam_size=3, max_new_tokens=MAX_LEN).target_ids
    assert [ref.kind for ref, _ in importance.ranking()] == ["cross"] * 8
    with pytest.raises(ValueError, match="empty"):
        head_importance(translator, SENTENCE, target_ids=[])


def test_importance_halves_its_passes_after_running_out_of_gpu_memory(translator, monkeypatch):
    output = translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN).target_ids[1:]
    expected = head_importance(translator, SENTENCE, target_ids=output)
    forward = translator.model.forward
    sizes: list[int] = []

    def small_batches_only(src, tgt):
        sizes.append(src.size(0))
        if src.size(0) > 4:
            raise torch.OutOfMemoryError("out of memory (test)")
        return forward(src, tgt)

    monkeypatch.setattr(translator.model, "forward", small_batches_only)
    halved = head_importance(translator, SENTENCE, target_ids=output, batch_size=16)
    assert sizes[:3] == [16, 8, 4] and max(sizes[2:]) <= 4 and sum(sizes[2:]) == 1 + 24
    for kind, grid in expected.drops.items():
        np.testing.assert_allclose(halved.drops[kind], grid, rtol=0, atol=1e-5)
    monkeypatch.setattr(translator.model, "forward", lambda src, tgt: (_ for _ in ()).throw(torch.OutOfMemoryError()))
    with pytest.raises(torch.OutOfMemoryError):
        head_importance(translator, SENTENCE, target_ids=output, batch_size=2)


def test_importance_moves_to_the_cpu_when_even_one_row_does_not_fit(translator, monkeypatch):
    """A pretend accelerator ("meta" tensors) that is always out of memory: the drops come from a CPU copy."""
    import model.analysis.importance as importance_module

    output = translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN).target_ids[1:]
    expected = head_importance(translator, SENTENCE, target_ids=output)
    assert expected.notice is None
    pretend_gpu = Translator(translator.model, translator.tokenizer, torch.device("meta"), name="pretend")
    row_log_probs = importance_module._row_log_probs
    devices: list[str] = []

    def full_accelerator(model, src, *args, **kwargs):
        devices.append(src.device.type)
        if src.device.type == "meta":
            raise torch.OutOfMemoryError("out of memory (test)")
        return row_log_probs(model, src, *args, **kwargs)

    monkeypatch.setattr(importance_module, "_row_log_probs", full_accelerator)
    moved = head_importance(pretend_gpu, SENTENCE, target_ids=output, batch_size=4)
    assert devices[:3] == ["meta"] * 3 and set(devices[3:]) == {"cpu"}, devices
    assert "CPU" in moved.notice
    for kind, grid in expected.drops.items():
        np.testing.assert_allclose(moved.drops[kind], grid, rtol=0, atol=1e-5)


# --- positional encoding ---


def test_without_positional_encoding_adds_zeros_and_makes_the_encoder_order_blind(small_model):
    src, tgt = batch(1)
    with torch.no_grad():
        with capture_attention(small_model) as normal:
            memory = small_model.encode(src)[0]
            small_model(src, tgt)
        with without_positional_encoding(small_model), capture_attention(small_model) as removed:
            bag = small_model.encode(src)[0]
            small_model(src, tgt)
        with without_positional_encoding(small_model, ["encoder"]), capture_attention(small_model) as encoder_only:
            small_model(src, tgt)
        permutation = torch.tensor([3, 0, 6, 1, 5, 2, 4])
        with without_positional_encoding(small_model):
            shuffled_bag = small_model.encode(src[:, permutation])[0]
        shuffled = small_model.encode(src[:, permutation])[0]
    for name in ("encoder.positional", "decoder.positional"):
        assert bool(normal.positional[name].abs().sum() > 0)
        assert not removed.positional[name].any()
    assert not encoder_only.positional["encoder.positional"].any()
    assert torch.equal(encoder_only.positional["decoder.positional"], normal.positional["decoder.positional"])
    assert not torch.allclose(bag, memory)
    # Without positions the encoder sees a bag of tokens: permuting the source permutes its output.
    torch.testing.assert_close(shuffled_bag, bag[:, permutation], rtol=0, atol=1e-5)
    assert not torch.allclose(shuffled, memory[:, permutation], atol=1e-3)
    with pytest.raises(ValueError, match="stacks"):
        with without_positional_encoding(small_model, ["middle"]):
            pass


def test_shuffled_words_are_a_seeded_permutation_that_moves_a_word():
    words = SENTENCE.split()
    shuffled = shuffle_source_words(SENTENCE, seed=3)
    assert sorted(shuffled.split()) == sorted(words) and shuffled != SENTENCE
    assert shuffle_source_words(SENTENCE, seed=3) == shuffled
    assert len({shuffle_source_words(SENTENCE, seed) for seed in range(6)}) > 1
    assert shuffled.split() == [words[i] for i in shuffled_order(len(words), 3)]
    assert all(shuffle_source_words("one two", seed) == "two one" for seed in range(10))
    assert shuffle_source_words("alone", seed=4) == "alone" and shuffle_source_words("", seed=4) == ""


def test_compare_word_order_variants(translator):
    no_pe = compare_word_order(translator, SENTENCE, "no-pe", beam_size=1, max_new_tokens=MAX_LEN)
    assert no_pe.stacks == ("encoder", "decoder") and no_pe.shuffled_order == []
    assert all(not array.any() for array in no_pe.modified.positional.values())
    assert all(array.any() for array in no_pe.original.positional.values())
    with without_positional_encoding(translator.model):
        assert translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN).target_ids == no_pe.modified.target_ids
    assert no_pe.diff == token_diff(no_pe.original.predicted_pieces, no_pe.modified.predicted_pieces)

    shuffle = compare_word_order(translator, SENTENCE, "shuffle", seed=2, beam_size=1, max_new_tokens=MAX_LEN)
    assert shuffle.modified.source_text == shuffle_source_words(SENTENCE, 2)
    assert shuffle.modified.source_text.split() == [SENTENCE.split()[i] for i in shuffle.shuffled_order]
    assert shuffle.modified.outcome.experiment["seed"] == 2
    assert shuffle.original.positional["encoder.positional"].any()
    with pytest.raises(ValueError, match="variant"):
        compare_word_order(translator, SENTENCE, "reverse")
