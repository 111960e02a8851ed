"""Toy tasks and the shipped toy checkpoints: the generator keeps its rule, and each model solves its task
on held-out inputs with the textbook attention pattern (copy: diagonal, reverse: anti-diagonal, sort:
the source position of each written symbol, svo-sov: the verb's output step reads the verb).

Held-out inputs come from the generator with a seed the training never used, and are checked to be
outside the training draw, which is regenerated from the settings on the card.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from model import load_checkpoint
from model.checkpoint import read_card, scan_checkpoints
from model.tokenizer import Tokenizer, train_sentencepiece
from model.training.data import read_parallel, split_file
from model.training.toy_tasks import (
    ADJECTIVES,
    DETERMINERS,
    NOUNS,
    TASKS,
    VERBS,
    Lengths,
    generate_pairs,
    generate_splits,
    main,
)
from tests.helpers import HELD_OUT_SEED, REPO, expected_positions

CHECKPOINTS = REPO / "checkpoints"
SHIPPED = ("copy", "reverse", "sort", "svo-sov")
HELD_OUT = 300
TRACED = 60
SIZES = {"train": 400, "val": 50, "test": 50}


def is_noun_phrase(words: list[str]) -> bool:
    return (
        2 <= len(words) <= 4
        and words[0] in DETERMINERS
        and words[-1] in NOUNS
        and all(word in ADJECTIVES for word in words[1:-1])
        and len(set(words[1:-1])) == len(words) - 2
    )


def test_generator_is_deterministic_and_its_splits_are_disjoint():
    for task in TASKS.values():
        first, again = generate_splits(task, SIZES, seed=7), generate_splits(task, SIZES, seed=7)
        assert first == again
        assert first != generate_splits(task, SIZES, seed=8)
        sources = [source for pairs in first.values() for source, _ in pairs]
        assert {split: len(pairs) for split, pairs in first.items()} == SIZES
        assert len(set(sources)) == len(sources), f"{task.name}: a source occurs twice across splits"


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_generated_pair_follows_the_task_rule(name):
    lengths = Lengths(shortest=2, longest=7, symbols=12)
    pairs = generate_pairs(TASKS[name], 500, random.Random(3), lengths)
    for source_text, target_text in pairs:
        source, target = source_text.split(), target_text.split()
        if name == "copy":
            assert target == source
        elif name == "reverse":
            assert target == source[::-1]
        elif name == "sort":
            assert target == sorted(source) and len(set(source)) == len(source)
        else:
            verbs = [i for i, word in enumerate(source) if word in VERBS]
            assert len(verbs) == 1, source
            verb = verbs[0]
            assert is_noun_phrase(source[:verb]) and is_noun_phrase(source[verb + 1 :]), source
            assert target == source[:verb] + source[verb + 1 :] + [source[verb]]
        if name != "svo-sov":
            assert 2 <= len(source) <= 7 and set(source) <= set("abcdefghijkl")


def test_command_line_writes_what_model_train_reads(tmp_path):
    out = tmp_path / "data"
    main(["--task", "svo-sov", "--out", str(out), "--train", "30", "--valid", "5", "--test", "6", "--seed", "4"])
    task = TASKS["svo-sov"]
    for split, size in (("train", 30), ("val", 5), ("test", 6)):
        pairs = read_parallel(split_file(out, split, task.source_suffix), split_file(out, split, task.target_suffix))
        assert len(pairs) == size
    settings = json.loads((out / "toy_task.json").read_text())
    assert settings["seed"] == 4 and settings["sizes"] == {"train": 30, "val": 5, "test": 6}
    assert settings["generator_command"].startswith("python -m model.training.toy_tasks --task svo-sov")
    again = generate_splits(task, settings["sizes"], settings["seed"])
    assert read_parallel(out / "test.svo", out / "test.sov") == again["test"]


def test_identity_normalization_keeps_the_pieces_and_drops_the_table():
    sentences = [" ".join(random.Random(i).sample("abcdefghij", 5)) for i in range(200)]
    nfkc = train_sentencepiece(sentences, 20, "word")
    identity = train_sentencepiece(sentences, 20, "word", normalization="identity")
    assert len(identity) < len(nfkc) - 100_000
    plain, small = Tokenizer.from_model_bytes(nfkc), Tokenizer.from_model_bytes(identity)
    for sentence in sentences[:50] + ["j i h  g", "a b z"]:
        assert small.encode(sentence) == plain.encode(sentence)


@pytest.fixture(scope="module", params=SHIPPED)
def shipped(request):
    folder = CHECKPOINTS / f"toy-{request.param}"
    assert (folder / "model.safetensors").is_file(), f"{folder} is not shipped"
    return request.param, folder, read_card(folder), load_checkpoint(folder, device="cpu")


@pytest.fixture(scope="module")
def held_out(shipped):
    """HELD_OUT pairs from an unused seed, none of them in the training draw described on the card."""
    name, _, card, _ = shipped
    settings = card.toy_task
    task = TASKS[name]
    lengths = Lengths(**settings.lengths) if task.uses_lengths else Lengths()
    training_draw = generate_splits(task, settings.sizes, settings.seed, lengths)
    seen = {source for pairs in training_draw.values() for source, _ in pairs}
    train_sources = {source for source, _ in training_draw["train"]}
    pairs = generate_pairs(task, HELD_OUT, random.Random(HELD_OUT_SEED), lengths, exclude=set(seen))
    assert not train_sources & {source for source, _ in pairs}
    return pairs


def test_card_says_how_it_was_made(shipped):
    name, folder, card, translator = shipped
    settings = card.toy_task
    assert settings.task == name and settings.seed != HELD_OUT_SEED
    assert settings.generator_command.startswith(f"python -m model.toy_tasks --task {name} --out ")
    assert card.train_command.startswith("python -m model.train ")
    assert "--tokenizer-type word" in card.train_command
    assert settings.measured_with.startswith(f"python -m model.toy_tasks --task {name} --check ")
    assert settings.held_out_exact_match >= 0.99 and settings.pattern
    assert card.parameters == translator.model.num_parameters()
    assert all(translator.translate(example, beam_size=1) for example in card.examples)


def test_every_word_is_one_piece(shipped, held_out):
    _, _, _, translator = shipped
    unk = translator.config.unk_id
    for side, texts in (("source", [s for s, _ in held_out]), ("target", [t for _, t in held_out])):
        for text in texts:
            ids = translator.tokenizer.encode(text, side)
            assert len(ids) == len(text.split()) and unk not in ids, (side, text)


def test_solves_held_out_inputs(shipped, held_out):
    name, _, _, translator = shipped
    hypotheses = translator.translate_batch([source for source, _ in held_out], beam_size=1)
    wrong = [(s, h) for (s, t), h in zip(held_out, hypotheses, strict=True) if h != t]
    assert 1 - len(wrong) / len(held_out) >= 0.99, f"{name}: {len(wrong)} wrong of {len(held_out)}, e.g. {wrong[:3]}"


def test_attention_shows_the_expected_pattern(shipped, held_out):
    """Share of output words whose strongest cross-attention is the expected source position, per head."""
    name, _, card, translator = shipped
    hits: dict[tuple[str, int], int] = {}
    verb_hits: dict[tuple[str, int], int] = {}
    steps = 0
    for source_text, _ in held_out[:TRACED]:
        trace = translator.trace(source_text, beam_size=1)
        source = source_text.split()
        expected = np.array(expected_positions(name, source))
        assert trace.source_pieces[:-1] == ["▁" + word for word in source]
        assert [p.lstrip("▁") for p in trace.predicted_pieces[: len(source)]] == [source[i] for i in expected]
        steps += len(source)
        for module in trace.attention_names("cross"):
            strongest = trace.attention[module][:, : len(source), :].argmax(axis=-1)  # (heads, words)
            for head, row in enumerate(strongest):
                hits[module, head] = hits.get((module, head), 0) + int((row == expected).sum())
                verb_hits[module, head] = verb_hits.get((module, head), 0) + int(row[-1] == expected[-1])
    shares = {key: count / steps for key, count in hits.items()}
    best = max(shares, key=shares.get)
    assert shares[best] >= 0.9, f"{name}: best head {best} puts {shares[best]:.0%} of steps on the expected position"
    named = card.toy_task.clearest_head
    assert shares[named.module, named.head] >= 0.9, f"{name}: the head named on the card is not the pattern"
    if name == "svo-sov":
        verb_share = max(verb_hits.values()) / TRACED
        assert verb_share >= 0.9, f"the verb's output step reads the verb in only {verb_share:.0%} of sentences"


def test_training_snapshots_are_shipped_and_learn_less(shipped, held_out):
    """untrained (step 0) solves nothing, early (step 200) less than the final model."""
    name, folder, card, _ = shipped
    sources, targets = [s for s, _ in held_out], [t for _, t in held_out]
    exact = {}
    for snapshot, step in (("untrained", 0), ("early", 200)):
        translator = load_checkpoint(folder / "snapshots" / snapshot, device="cpu")
        snapshot_card = read_card(folder / "snapshots" / snapshot)
        assert (snapshot_card.snapshot, snapshot_card.step) == (snapshot, step)
        assert snapshot_card.toy_task.task == name
        outputs = translator.translate_batch(sources, beam_size=1)
        exact[snapshot] = sum(o == t for o, t in zip(outputs, targets, strict=True)) / len(targets)
    assert exact["untrained"] == 0 and exact["early"] < 0.9, exact


def test_toys_are_small_and_listed_as_checkpoints_without_their_snapshots():
    folders = sorted(CHECKPOINTS.glob("toy-*"))
    assert [f.name for f in folders] == sorted(f"toy-{name}" for name in SHIPPED)
    total = sum(f.stat().st_size for folder in folders for f in folder.rglob("*") if f.is_file())
    assert total < 2.5 * 2**20, f"toy checkpoints take {total / 2**20:.2f} MiB"
    entries = {entry.name: entry for entry in scan_checkpoints(CHECKPOINTS)}
    for folder in folders:
        assert entries[folder.name].error == "", entries[folder.name].error
    assert not {"snapshots", "untrained", "early", "final"} & set(entries)
