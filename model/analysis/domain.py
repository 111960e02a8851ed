"""Is this sentence like the ones the model learned from? Two measured signals against the validation set.

A model trained on 29,000 image captions turns "The animal didn't cross the street because it
was too tired." into nonsense without any warning. Two figures of a trace say that a sentence is
unlike the training data, each compared with the same figure over the validation set, measured
once and stored on the checkpoint's card (``card["domain"]["calibration"]``):

- ``mean_log_prob``: the mean natural-log probability the model gave its own output tokens. A
  model writing about things it has not seen is unsure of every word; the notice fires below the
  validation set's ``low_percentile`` (1st by default).
- ``pieces_per_word``: source pieces per word (a word starts with "▁"). Words the tokenizer never
  saw in training fall apart into many pieces ("be c ause"); the notice fires above the
  validation set's ``high_percentile`` (99th by default).

By construction each alone fires for about 1% of validation sentences; the calibration records
how often either does (``validation_alarm_rate``). Neither catches a sentence of everyday words
used in a way captions never do ("The cat sat on the mat.": common pieces, a confident model).

Command line: ``python -m model.analysis.domain --checkpoint DIR --sentences val.en.gz [--card]``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from model.tokenizer import WORD_START
from model.trace import Trace

if TYPE_CHECKING:
    from model.translator import Translator

LOW_PERCENTILE = 1.0
HIGH_PERCENTILE = 99.0


@dataclass(frozen=True)
class DomainSignals:
    mean_log_prob: float  # mean log probability of the model's own output tokens (natural log)
    pieces_per_word: float  # source pieces (EOS left out) per word


def domain_signals(trace: Trace) -> DomainSignals:
    """The two signals of one trace (its own translation: greedy or beam, as the page decoded it)."""
    probabilities = np.clip(np.asarray(trace.step_probs, dtype=np.float64), 1e-12, 1.0)
    pieces = [piece for piece in trace.source_pieces if piece != "</s>"]
    words = sum(piece.startswith(WORD_START) for piece in pieces)
    return DomainSignals(
        mean_log_prob=float(np.mean(np.log(probabilities))) if probabilities.size else 0.0,
        pieces_per_word=len(pieces) / max(words, 1),
    )


def unlike_training(signals: DomainSignals, calibration: dict[str, Any]) -> list[str]:
    """Why the sentence looks unlike the training data, in plain words; empty when it does not (or no calibration)."""
    reasons = []
    low = calibration.get("mean_log_prob_low")
    if isinstance(low, (int, float)) and signals.mean_log_prob < low:
        reasons.append(
            f"the model is unsure of its own words (mean probability {math.exp(signals.mean_log_prob):.2f}, "
            f"below {math.exp(low):.2f}, the lowest 1 in {round(100 / calibration['low_percentile'])} "
            "validation sentences)"
        )
    high = calibration.get("pieces_per_word_high")
    if isinstance(high, (int, float)) and signals.pieces_per_word > high:
        reasons.append(
            f"its words break into many pieces the tokenizer rarely saw ({signals.pieces_per_word:.2f} pieces a "
            f"word, above {high:.2f}, the highest 1 in {round(100 / (100 - calibration['high_percentile']))} "
            "validation sentences)"
        )
    return reasons


def calibrate(
    translator: Translator,
    sentences: Iterable[str],
    *,
    beam_size: int = 1,
    low_percentile: float = LOW_PERCENTILE,
    high_percentile: float = HIGH_PERCENTILE,
) -> dict[str, Any]:
    """The thresholds over ``sentences`` (a validation set, translated with ``beam_size``), and how often they fire."""
    texts = [text.strip() for text in sentences if text.strip()]
    if not texts:
        raise ValueError("no sentences to calibrate on")
    signals = [domain_signals(translator.trace(text, beam_size=beam_size)) for text in texts]
    log_probs = np.array([signal.mean_log_prob for signal in signals])
    pieces = np.array([signal.pieces_per_word for signal in signals])
    calibration = {
        "sentences": len(texts),
        "beam_size": beam_size,
        "low_percentile": low_percentile,
        "high_percentile": high_percentile,
        "mean_log_prob_low": float(np.percentile(log_probs, low_percentile)),
        "pieces_per_word_high": float(np.percentile(pieces, high_percentile)),
    }
    calibration["validation_alarm_rate"] = alarm_rate(signals, calibration)
    return calibration


def alarm_rate(signals: Sequence[DomainSignals], calibration: dict[str, Any]) -> float:
    """The share of ``signals`` for which unlike_training gives a reason."""
    return sum(bool(unlike_training(signal, calibration)) for signal in signals) / max(len(signals), 1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.analysis.domain",
        description="Measure the out-of-domain thresholds of a checkpoint on a validation set.",
    )
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder")
    parser.add_argument("--sentences", required=True, help="validation source sentences, one a line (.gz read too)")
    parser.add_argument("--beam", type=int, default=1, help="beam size the page decodes with (default 1: greedy)")
    parser.add_argument("--card", action="store_true", help="write the thresholds to card.json under domain")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    from model.checkpoint import load_checkpoint, read_card, write_card
    from model.training.data import read_lines

    translator = load_checkpoint(args.checkpoint, device=args.device)
    calibration = calibrate(translator, read_lines(args.sentences), beam_size=args.beam)
    command = f"python -m model.analysis.domain --checkpoint {args.checkpoint} --sentences {args.sentences}"
    calibration["measured_with"] = f"{command} --beam {args.beam}"
    if args.card:
        card = read_card(args.checkpoint)
        card.setdefault("domain", {})["calibration"] = calibration
        write_card(args.checkpoint, card)
    print(json.dumps(calibration))
    return calibration


if __name__ == "__main__":
    main()
