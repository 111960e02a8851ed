"""Is this sentence like the ones the model learned from? Signals of a trace against the validation set.

``domain_signals`` reads two figures of a trace (the mean log-probability of the model's own output tokens, and
source pieces per word); ``unlike_training`` compares them with the thresholds that ``calibrate`` measured on the
validation set and stored on the checkpoint's card (``Card.domain.calibration``). ``SourceWords`` counts the
words of the training source side (``source_words.json`` beside the weights) and names the rare ones in a sentence.

Command line: ``python -m model.analysis.domain --checkpoint DIR --sentences val.en.gz [--card]``
measures the thresholds; ``--training-sentences train.en.gz`` writes ``source_words.json``.

Theory and references: docs/out-of-domain.md
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from model.card import Card, DomainSection
from model.corpus import read_lines
from model.tokenizer import WORD_START
from model.trace import Trace

if TYPE_CHECKING:
    from model.translator import Translator

LOW_PERCENTILE = 1.0
HIGH_PERCENTILE = 99.0
# A word seen at most this often in training is one the model barely knows: translation quality falls off for
# sentences whose rarest word is this rare (model.evaluate --by-rarest-word shows it per checkpoint).
RARE_WORD_MAX_COUNT = 3
SOURCE_WORDS_FILE = "source_words.json"
# letters only, an inner apostrophe kept ("didn't", "man's"); a token with digits is no word ("3rd", "2")
WORD = re.compile(r"\b[^\W\d_]+(?:['’][^\W\d_]+)*\b")


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


def words_of(text: str) -> list[str]:
    """The words of ``text``, lowercased, as SourceWords counts them."""
    return [word.replace("’", "'") for word in WORD.findall(text.lower())]


@dataclass(frozen=True)
class SourceWords:
    """How often each word occurs on the training source side: the model's vocabulary in words, not pieces."""

    sentences: int  # training sentences counted
    counts: Mapping[str, int]

    @classmethod
    def count(cls, sentences: Iterable[str]) -> SourceWords:
        """Count the words of the training source sentences."""
        counts: Counter[str] = Counter()
        total = 0
        for sentence in sentences:
            counts.update(words_of(sentence))
            total += 1
        return cls(total, dict(counts.most_common()))

    def rare(self, text: str, max_count: int = RARE_WORD_MAX_COUNT) -> list[tuple[str, int]]:
        """The words of ``text`` seen at most ``max_count`` times in training (0: never), once each, in order."""
        seen: dict[str, int] = {}
        for word in words_of(text):
            count = self.counts.get(word, 0)
            if count <= max_count:
                seen.setdefault(word, count)
        return list(seen.items())

    def rarest(self, text: str) -> int | None:
        """How often the rarest word of ``text`` occurs in training (0: a word never seen); None when it has no word."""
        return min((self.counts.get(word, 0) for word in words_of(text)), default=None)

    def save(self, folder: str | Path) -> Path:
        """Write ``source_words.json`` into a checkpoint folder (one compact line)."""
        path = Path(folder) / SOURCE_WORDS_FILE
        data = {"sentences": self.sentences, "counts": dict(self.counts)}
        path.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> SourceWords | None:
        """The checkpoint's counts; None when it has none (an imported or older model) or they are unreadable."""
        path = Path(folder) / SOURCE_WORDS_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            counts, sentences = data["counts"], data["sentences"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(sentences, int) or not isinstance(counts, dict):
            return None
        return cls(sentences, {str(word): int(count) for word, count in counts.items() if isinstance(count, int)})


# (fewest, most) training occurrences of a sentence's rarest word; None: no upper bound
RAREST_WORD_GROUPS: tuple[tuple[int, int | None], ...] = ((0, 0), (1, 1), (2, 3), (4, 10), (11, 50), (51, None))


def group_label(fewest: int, most: int | None) -> str:
    """ "0", "2-3" or "51+": a RAREST_WORD_GROUPS entry as the scores name it."""
    if most is None:
        return f"{fewest}+"
    return f"{fewest}" if fewest == most else f"{fewest}-{most}"


def scores_by_rarest_word(
    words: SourceWords, sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[str]
) -> list[dict[str, Any]]:
    """Corpus BLEU and chrF of the sentences grouped by how often their rarest word occurs in training: how much a
    barely seen word costs (it measures RARE_WORD_MAX_COUNT). Groups without sentences are left out."""
    from sacrebleu.metrics import BLEU, CHRF

    if not len(sources) == len(hypotheses) == len(references):
        raise ValueError(f"{len(sources)} sources, {len(hypotheses)} hypotheses, {len(references)} references")
    rarest = [words.rarest(text) for text in sources]
    groups = []
    for fewest, most in RAREST_WORD_GROUPS:
        members = [
            i
            for i, count in enumerate(rarest)
            if count is not None and fewest <= count and (most is None or count <= most)
        ]
        if members:
            hyps, refs = [hypotheses[i] for i in members], [[references[i] for i in members]]
            groups.append(
                {
                    "rarest_word_seen": group_label(fewest, most),
                    "sentences": len(members),
                    "bleu": round(BLEU().corpus_score(hyps, refs).score, 2),
                    "chrf": round(CHRF().corpus_score(hyps, refs).score, 2),
                }
            )
    return groups


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
        description=(
            "Measure the out-of-domain thresholds of a checkpoint on a validation set (--sentences), "
            "and/or count the words of its training source (--training-sentences)."
        ),
    )
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder")
    parser.add_argument("--sentences", help="validation source sentences, one a line (.gz read too)")
    parser.add_argument(
        "--training-sentences",
        help=f"training source sentences: count their words into {SOURCE_WORDS_FILE} in the checkpoint folder",
    )
    parser.add_argument("--beam", type=int, default=1, help="beam size the page decodes with (default 1: greedy)")
    parser.add_argument("--card", action="store_true", help="write the thresholds to card.json under domain")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.sentences or args.training_sentences):
        parser.error("give --sentences (calibrate the notice), --training-sentences (count words), or both")
    if not Path(args.checkpoint).is_dir():
        parser.error(f"--checkpoint {args.checkpoint}: no such folder")
    for option, path in (("--sentences", args.sentences), ("--training-sentences", args.training_sentences)):
        if path and not Path(path).is_file():
            parser.error(f"{option} {path}: file not found")
    from model.checkpoint import load_checkpoint

    if args.training_sentences:
        words = SourceWords.count(read_lines(args.training_sentences))
        path = words.save(args.checkpoint)
        print(f"{path}: {len(words.counts):,} words of {words.sentences:,} sentences", file=sys.stderr)
    if not args.sentences:
        return {}
    translator = load_checkpoint(args.checkpoint, device=args.device)
    calibration = calibrate(translator, read_lines(args.sentences), beam_size=args.beam)
    command = f"python -m model.analysis.domain --checkpoint {args.checkpoint} --sentences {args.sentences}"
    calibration["measured_with"] = f"{command} --beam {args.beam}"
    if args.card:
        card = Card.load(args.checkpoint)
        if not isinstance(card.domain, DomainSection):  # none yet, or words only (an imported model's): kept
            card.domain = DomainSection(description=card.domain)
        card.domain.calibration = calibration
        card.save(args.checkpoint)
    print(json.dumps(calibration))
    return calibration


if __name__ == "__main__":
    main()
