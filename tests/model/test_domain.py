"""The out-of-domain notice: two signals of a trace against thresholds measured on the validation set, and the
training words each shipped checkpoint counts. The notice on the page: tests/explorer/test_domain.py."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest

from model import load_checkpoint
from model.analysis import domain
from model.analysis.domain import (
    SOURCE_WORDS_FILE,
    DomainSignals,
    SourceWords,
    alarm_rate,
    calibrate,
    domain_signals,
    scores_by_rarest_word,
    unlike_training,
)
from model.checkpoint import read_card
from model.corpus import read_lines
from tests.helpers import CAT, DEFAULT_CHECKPOINT, REPO, SENTENCE, UNLIKE_CAPTIONS

DATA = REPO.parent / "shared" / "data" / "multi30k"
VALIDATION = DATA / "val.en.gz"
CALIBRATION = {"low_percentile": 1.0, "high_percentile": 99.0, "mean_log_prob_low": -1.5, "pieces_per_word_high": 1.8}


def test_signals_are_the_mean_log_probability_and_the_pieces_per_word(tiny_checkpoint):
    trace = load_checkpoint(tiny_checkpoint, device="cpu").trace(SENTENCE, beam_size=1)
    signals = domain_signals(trace)
    assert signals.mean_log_prob == pytest.approx(float(np.mean(np.log(trace.step_probs))))
    pieces = trace.source_pieces[:-1]  # </s> left out
    assert signals.pieces_per_word == pytest.approx(len(pieces) / sum(piece.startswith("▁") for piece in pieces))


def test_each_signal_fires_only_beyond_its_threshold_and_says_why():
    assert unlike_training(DomainSignals(-1.4, 1.7), CALIBRATION) == []
    (unsure,) = unlike_training(DomainSignals(-1.6, 1.7), CALIBRATION)
    assert f"{math.exp(-1.6):.2f}" in unsure and "1 in 100" in unsure
    (pieces,) = unlike_training(DomainSignals(-1.4, 1.9), CALIBRATION)
    assert "1.90 pieces a word, above 1.80" in pieces
    assert len(unlike_training(DomainSignals(-2.0, 2.0), CALIBRATION)) == 2
    assert unlike_training(DomainSignals(-9.0, 9.0), {}) == []  # no calibration on the card: no notice


def test_calibration_sets_the_thresholds_at_the_validation_percentiles(tiny_checkpoint):
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    sentences = ["a man rides a bike.", "two dogs play in the snow.", "the girl sits.", "a red ball.", "a cat walks."]
    calibration = calibrate(translator, sentences, low_percentile=20, high_percentile=80)
    signals = [domain_signals(translator.trace(text, beam_size=1)) for text in sentences]
    low = np.percentile([signal.mean_log_prob for signal in signals], 20)
    assert calibration["mean_log_prob_low"] == pytest.approx(low)
    assert calibration["pieces_per_word_high"] == pytest.approx(
        np.percentile([signal.pieces_per_word for signal in signals], 80)
    )
    assert calibration["validation_alarm_rate"] == alarm_rate(signals, calibration) <= 0.4
    with pytest.raises(ValueError, match="no sentences"):
        calibrate(translator, ["", "  "])


def test_the_shipped_model_flags_a_sentence_unlike_captions_and_not_validation_captions(shipped_en_de):
    if not VALIDATION.exists():
        pytest.skip(f"{VALIDATION} is missing (../shared/data beside the checkout)")
    calibration = read_card(DEFAULT_CHECKPOINT).domain_section.calibration
    assert unlike_training(domain_signals(shipped_en_de.trace(UNLIKE_CAPTIONS, beam_size=1)), calibration)
    with gzip.open(VALIDATION, "rt", encoding="utf-8") as lines:
        captions = [next(lines).strip() for _ in range(20)]
    assert [
        text
        for text in captions
        if unlike_training(domain_signals(shipped_en_de.trace(text, beam_size=1)), calibration)
    ] == []
    assert calibration["validation_alarm_rate"] < 0.03  # measured over the whole validation set, stored on the card


def test_the_shipped_card_says_what_the_model_learned_from(shipped_en_de):
    domain = read_card(DEFAULT_CHECKPOINT).domain_section
    assert domain.name == "image captions" and domain.training_sentences == 29000
    assert domain.examples and domain.calibration["sentences"] == 1014
    assert Path(domain.calibration["measured_with"].split("--sentences ")[1].split()[0]).name == "val.en.gz"


def test_source_words_name_the_rarely_seen_words_of_a_sentence_once_each_in_order(tmp_path):
    words = SourceWords.count(["A dog runs.", "a dog didn\u2019t run", "The dog's ball, 2 dogs", "A cat sits."])
    assert words.sentences == 4
    assert words.counts == {"a": 3, "dog": 2, "runs": 1, "didn't": 1, "run": 1, "the": 1, "dog's": 1, "ball": 1,
                            "dogs": 1, "cat": 1, "sits": 1}  # fmt: skip
    # lowercased; "3rd" and punctuation are not words; the curly apostrophe is the straight one
    assert words.rare("The DOG didn't sit, a 3rd dog!", max_count=1) == [
        ("the", 1),
        ("didn't", 1),
        ("sit", 0),
    ]
    assert words.rare("A dog.", max_count=1) == []
    assert words.rare("a dog", max_count=2) == [("dog", 2)]

    words.save(tmp_path)
    assert SourceWords.load(tmp_path) == words
    (tmp_path / SOURCE_WORDS_FILE).write_text("{not json")
    assert SourceWords.load(tmp_path) is None
    (tmp_path / SOURCE_WORDS_FILE).write_text('{"sentences": "many", "counts": {}}')
    assert SourceWords.load(tmp_path) is None
    assert SourceWords.load(tmp_path / "nowhere") is None  # an imported model has no counts: no line on the page


def test_scores_by_rarest_word_groups_sentences_by_their_rarest_words_training_count():
    words = SourceWords(3, {"a": 60, "dog": 12, "cat": 2, "runs": 1})
    sources = ["a dog", "a dog runs", "a cat", "a zebra", "a", "!"]
    references = ["ein hund", "ein hund rennt", "eine katze", "ein zebra", "ein", "!"]
    hypotheses = ["ein hund", "ein hund rennt", "eine katze", "das ist falsch", "ein", "!"]
    groups = scores_by_rarest_word(words, sources, hypotheses, references)
    assert [(group["rarest_word_seen"], group["sentences"]) for group in groups] == [
        ("0", 1),  # "zebra"; "!" has no word and is in no group
        ("1", 1),
        ("2-3", 1),
        ("11-50", 1),
        ("51+", 1),
    ]
    scores = {group["rarest_word_seen"]: group for group in groups}
    assert scores["0"]["bleu"] == 0.0 and scores["0"]["chrf"] < 30
    assert scores["1"]["chrf"] == scores["11-50"]["chrf"] == 100.0
    with pytest.raises(ValueError, match="2 sources, 1 hypotheses"):
        scores_by_rarest_word(words, ["a", "b"], ["a"], ["a", "b"])


def test_the_command_line_counts_the_training_source_words_into_the_checkpoint(tmp_path, capsys):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    train = tmp_path / "train.en"
    train.write_text("a man rides a bike.\ntwo dogs play.\n", encoding="utf-8")
    assert domain.main(["--checkpoint", str(folder), "--training-sentences", str(train)]) == {}
    assert SourceWords.load(folder) == SourceWords.count(["a man rides a bike.", "two dogs play."])
    assert "7 words of 2 sentences" in capsys.readouterr().err
    for argv, message in (
        (["--checkpoint", str(folder)], "give --sentences"),
        (["--checkpoint", str(tmp_path / "none"), "--training-sentences", str(train)], "none: no such folder"),
        (["--checkpoint", str(folder), "--training-sentences", str(tmp_path / "no.en")], "no.en: file not found"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            domain.main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "name,language", [("multi30k-en-de", "en"), ("multi30k-de-en", "de"), ("multi30k-en-fr", "en")]
)
def test_each_shipped_checkpoint_counts_its_own_training_source(name, language):
    folder, train = REPO / "checkpoints" / name, DATA / f"train.{language}.gz"
    if not (folder / "model.safetensors").exists() or not train.exists():
        pytest.skip(f"needs checkpoints/{name} and {train}")
    words = SourceWords.load(folder)
    assert words == SourceWords.count(read_lines(train))
    assert words.sentences == read_card(folder).domain_section.training_sentences
    if language == "en":
        assert words.rare(CAT) == [("sat", 3)]
        assert words.rare("A man in a blue shirt is riding a bike.") == []
