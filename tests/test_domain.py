"""The out-of-domain notice: two signals of a trace against thresholds measured on the validation set."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from model import load_checkpoint
from model.analysis.domain import DomainSignals, alarm_rate, calibrate, domain_signals, unlike_training
from model.checkpoint import read_card
from tests.app_utils import APP, CHECKPOINTS_ENV, REPO, assert_ok

SHIPPED = REPO / "checkpoints" / "multi30k-en-de"
VALIDATION = REPO.parent / "shared" / "data" / "multi30k" / "val.en.gz"
UNLIKE_CAPTIONS = "The animal didn't cross the street because it was too tired."
CALIBRATION = {"low_percentile": 1.0, "high_percentile": 99.0, "mean_log_prob_low": -1.5, "pieces_per_word_high": 1.8}


def test_signals_are_the_mean_log_probability_and_the_pieces_per_word(tiny_checkpoint):
    trace = load_checkpoint(tiny_checkpoint, device="cpu").trace("a man rides a blue bike in the park.", beam_size=1)
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


@pytest.fixture(scope="module")
def shipped():
    if not (SHIPPED / "model.safetensors").exists():
        pytest.skip("checkpoints/multi30k-en-de is not shipped")
    return load_checkpoint(SHIPPED, device="cpu")


def test_the_shipped_model_flags_a_sentence_unlike_captions_and_not_validation_captions(shipped):
    if not VALIDATION.exists():
        pytest.skip(f"{VALIDATION} is missing (../shared/data beside the checkout)")
    calibration = read_card(SHIPPED)["domain"]["calibration"]
    assert unlike_training(domain_signals(shipped.trace(UNLIKE_CAPTIONS, beam_size=1)), calibration)
    with gzip.open(VALIDATION, "rt", encoding="utf-8") as lines:
        captions = [next(lines).strip() for _ in range(20)]
    assert [
        text for text in captions if unlike_training(domain_signals(shipped.trace(text, beam_size=1)), calibration)
    ] == []
    assert calibration["validation_alarm_rate"] < 0.03  # measured over the whole validation set, stored on the card


def test_the_page_says_so_plainly_and_offers_examples(shipped, monkeypatch):
    monkeypatch.setenv(CHECKPOINTS_ENV, str(SHIPPED.parent))
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert_ok(app)
    assert any(caption.value.startswith("This model learned from 29,000 image captions") for caption in app.caption)
    assert not [warning for warning in app.warning if "unlike" in warning.value]  # the default example is a caption
    app.text_input(key="sentence").input(UNLIKE_CAPTIONS).run()
    notice = next(warning.value for warning in app.warning if "unlike the image captions" in warning.value)
    assert "may mean little" in notice and "Two dogs are playing in the snow" in notice.replace("\\", "")


def test_the_shipped_card_says_what_the_model_learned_from(shipped):
    domain = read_card(SHIPPED)["domain"]
    assert domain["name"] == "image captions" and domain["training_sentences"] == 29000
    assert domain["examples"] and domain["calibration"]["sentences"] == 1014
    assert Path(domain["calibration"]["measured_with"].split("--sentences ")[1].split()[0]).name == "val.en.gz"
