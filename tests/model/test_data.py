"""Training batches: token-bucketed by padded length, every sentence once, padded as collate says."""

from __future__ import annotations

import random

import pytest
import torch

from model.training.data import Example, collate, encode_examples, read_parallel, split_file, token_batches
from tests.helpers import small_config, toy_sentences


def corpus(count: int, seed: int) -> list[Example]:
    """Sentence pairs whose target is up to 6 pieces longer or shorter than the source (never under 3)."""
    rng = random.Random(seed)
    examples = []
    for _ in range(count):
        source = rng.randint(2, 30)
        target = max(3, source + rng.randint(-6, 6))
        examples.append(Example(src=[5] * (source - 1) + [3], tgt=[2] + [6] * (target - 2) + [3]))
    return examples


def padded_length(example: Example) -> int:
    return max(len(example.src), len(example.tgt))


def test_batches_hold_every_sentence_once_within_the_token_budget_and_run_by_padded_length():
    examples = corpus(2000, seed=3)
    batches = token_batches(examples, max_tokens=300, seed=7)
    assert sorted(i for batch in batches for i in batch) == list(range(len(examples)))
    for batch in batches:
        assert max(padded_length(examples[i]) for i in batch) * len(batch) <= 300
    # sorted by padded length before cutting: in that order, no batch reaches below the one before it
    spans = sorted(
        (min(padded_length(examples[i]) for i in b), max(padded_length(examples[i]) for i in b)) for b in batches
    )
    assert all(high <= next_low for (_, high), (next_low, _) in zip(spans, spans[1:], strict=False))
    assert token_batches(examples, 300, seed=7) == batches
    assert token_batches(examples, 300, seed=8) != batches  # another epoch's seed: another order


def test_collate_pads_sources_and_targets_to_their_own_longest():
    examples = [Example(src=[7, 8, 3], tgt=[2, 9, 3]), Example(src=[7, 3], tgt=[2, 9, 9, 9, 3])]
    src, tgt = collate(examples, pad_id=0)
    assert torch.equal(src, torch.tensor([[7, 8, 3], [7, 3, 0]]))
    assert torch.equal(tgt, torch.tensor([[2, 9, 3, 0, 0], [2, 9, 9, 9, 3]]))
    assert src.dtype == tgt.dtype == torch.long


def test_collate_pads_sources_with_their_own_pad_id_when_given():
    """A model with separate vocabularies (TransformerConfig.source_pad_id) pads each side with its own <pad>."""
    examples = [Example(src=[7, 8, 3], tgt=[2, 9, 3]), Example(src=[7, 3], tgt=[2, 9, 9, 9, 3])]
    src, tgt = collate(examples, pad_id=0, source_pad_id=12)
    assert torch.equal(src, torch.tensor([[7, 8, 3], [7, 3, 12]]))
    assert torch.equal(tgt, torch.tensor([[2, 9, 3, 0, 0], [2, 9, 9, 9, 3]]))


def test_subword_sampling_draws_other_segmentations_of_the_same_text(toy_tokenizer):
    """BPE-dropout (--subword-sampling): each draw splits some words into smaller pieces, two draws differ, every
    draw decodes back to the sentence, and 0 keeps the best segmentation."""
    pairs = [(sentence, sentence) for sentence in toy_sentences(200, seed=5)]
    config = small_config(toy_tokenizer.vocab_size("source"))
    best = encode_examples(pairs, toy_tokenizer, config)
    assert best == encode_examples(pairs, toy_tokenizer, config, sampling=0.0)

    first, second = (encode_examples(pairs, toy_tokenizer, config, sampling=0.3) for _ in range(2))
    assert first != second
    assert sum(len(e.src) for e in first) > 1.1 * sum(len(e.src) for e in best)  # fewer merges: more pieces
    assert [e.src for e in first] != [e.tgt[1:] for e in first]  # source and target sides drawn apiece
    for (source, _), example in zip(pairs, first, strict=True):
        assert toy_tokenizer.decode(example.src, "source") == source
        assert toy_tokenizer.decode(example.tgt, "target") == source


def test_encoded_examples_end_the_source_with_eos_and_frame_the_target_with_bos_and_eos(toy_tokenizer):
    """What teacher forcing trains on: source pieces + EOS; BOS + target pieces + EOS (the decoder reads all but
    the last, and learns to write all but the first). Pairs longer than the model's positions are dropped."""
    config = small_config(toy_tokenizer.vocab_size("source"), max_len=12)
    pairs = list(zip(toy_sentences(20, seed=4), toy_sentences(20, seed=5), strict=True))
    examples = encode_examples(pairs, toy_tokenizer, config)
    kept = [(source, target) for source, target in pairs if len(toy_tokenizer.encode(source, "source")) < 12]
    kept = [(s, t) for s, t in kept if len(toy_tokenizer.encode(t, "target")) < 11]
    assert 0 < len(examples) == len(kept) < len(pairs)
    for example, (source, target) in zip(examples, kept, strict=True):
        assert example.src == toy_tokenizer.encode(source, "source") + [config.eos_id]
        assert example.tgt == [config.bos_id] + toy_tokenizer.encode(target, "target") + [config.eos_id]
        assert config.bos_id not in example.src and example.tgt.count(config.eos_id) == 1
    # MarianMT has no BOS: its decoder starts from <pad>, and so does every target it is fine-tuned on
    marian = small_config(toy_tokenizer.vocab_size("source"), max_len=12, bos_id=None, decoder_start_id=0)
    for example in encode_examples(pairs, toy_tokenizer, marian):
        assert example.tgt[0] == marian.start_id == 0


def test_a_missing_split_file_or_unaligned_files_are_refused_with_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no train\.de or train\.de\.gz in .*"):
        split_file(tmp_path, "train", "de")
    (tmp_path / "train.en").write_text("a man.\nthe dog.\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("ein mann.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.en has 2 lines but .*train\.de has 1"):
        read_parallel(tmp_path / "train.en", tmp_path / "train.de")


def test_one_piece_sentences_are_kept_and_empty_ones_dropped(toy_tokenizer):
    """'man' is a single piece: a source of it (piece + EOS) and a target of it (BOS + piece + EOS) are the
    shortest pairs worth training on; an empty side is dropped."""
    config = small_config(toy_tokenizer.vocab_size("source"))
    assert len(toy_tokenizer.encode("man", "source")) == len(toy_tokenizer.encode("man", "target")) == 1
    examples = encode_examples(
        [("man", "a dog."), ("a dog.", "man"), ("", "a dog."), ("a dog.", "")], toy_tokenizer, config
    )
    assert [len(e.src) for e in examples] == [2, len(toy_tokenizer.encode("a dog.", "source")) + 1]
    assert [len(e.tgt) for e in examples] == [len(toy_tokenizer.encode("a dog.", "target")) + 2, 3]


def test_subword_sampling_draws_the_target_side_too(toy_tokenizer):
    pairs = [(sentence, sentence) for sentence in toy_sentences(200, seed=5)]
    config = small_config(toy_tokenizer.vocab_size("source"))
    best = encode_examples(pairs, toy_tokenizer, config)
    drawn = encode_examples(pairs, toy_tokenizer, config, sampling=0.3)
    assert sum(len(e.tgt) for e in drawn) > 1.1 * sum(len(e.tgt) for e in best)


def test_batches_fill_the_token_budget_exactly_and_an_over_long_sentence_gets_a_batch_of_its_own():
    same = [Example(src=[5] * 9 + [3], tgt=[2] + [6] * 8 + [3]) for _ in range(30)]  # padded length 10 each
    batches = token_batches(same, max_tokens=100, seed=1)
    assert sorted(len(batch) for batch in batches) == [10, 10, 10]  # 10 x 10 = 100 tokens fits
    long = [Example(src=[5] * 49 + [3], tgt=[2, 6, 3]) for _ in range(3)]  # 50 tokens each, over a budget of 40
    assert sorted(token_batches(long, max_tokens=40, seed=1)) == [[0], [1], [2]]
