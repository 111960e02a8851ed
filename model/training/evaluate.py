"""Score a checkpoint on a test set: ``python -m model.evaluate --help``.

Translates the source file in length-sorted batches and reports sacreBLEU three ways:
cased BLEU (13a tokenizer, sacreBLEU's default and the WMT convention), lowercased BLEU
(the convention of published Multi30k results) and chrF. ``evaluate()`` is the same
computation for other code (model cards, tests).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF
from tqdm import tqdm

from model.card import Card, SplitScores
from model.corpus import read_lines
from model.decoding.scoring import GNMT_SCORING, Scoring
from model.decoding.search import DEFAULT_BEAM_SIZE
from model.translate import add_decoding_arguments
from model.translator import DEFAULT_BATCH_SIZE, Translator


def score(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """Corpus scores of hypotheses against one reference each: cased BLEU, lowercased BLEU, chrF."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metrics = {"bleu": BLEU(), "bleu_lowercase": BLEU(lowercase=True), "chrf": CHRF()}
    results = {name: metric.corpus_score(hypotheses, [references]) for name, metric in metrics.items()}
    cased = results["bleu"]
    return {
        **{name: round(result.score, 4) for name, result in results.items()},
        "bleu_details": {
            "precisions": [round(p, 4) for p in cased.precisions],
            "brevity_penalty": round(cased.bp, 4),
            "length_ratio": round(cased.sys_len / max(cased.ref_len, 1), 4),
            "hypothesis_length": cased.sys_len,
            "reference_length": cased.ref_len,
        },
        "signatures": {name: str(metric.get_signature()) for name, metric in metrics.items()},
        "sentences": len(hypotheses),
    }


def translate_all(
    translator: Translator,
    sources: list[str],
    beam_size: int = DEFAULT_BEAM_SIZE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_new_tokens: int | None = None,
    progress: bool = True,
    *,
    scoring: Scoring = GNMT_SCORING,
) -> list[str]:
    """Translations in input order; sentences of similar length share a batch, one progress tick per sentence."""
    lengths = [len(translator.source_ids(text).ids) for text in sources]
    order = sorted(range(len(sources)), key=lambda i: lengths[i])
    hypotheses = [""] * len(sources)
    with tqdm(total=len(sources), desc="translating", unit="sent", disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            outputs = translator.translate_batch(
                [sources[i] for i in chunk],
                beam_size=beam_size,
                max_new_tokens=max_new_tokens,
                batch_size=batch_size,
                scoring=scoring,
            )
            for index, output in zip(chunk, outputs, strict=True):
                hypotheses[index] = output
            bar.update(len(chunk))
    return hypotheses


def evaluate(
    translator: Translator,
    sources: list[str],
    references: list[str],
    beam_size: int = DEFAULT_BEAM_SIZE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_new_tokens: int | None = None,
    *,
    progress: bool = False,
    scoring: Scoring = GNMT_SCORING,
) -> dict[str, Any]:
    """Translate ``sources`` and score them against ``references``.

    Returns the scores of ``score()`` plus ``beam_size`` and ``hypotheses`` (the
    translations, in input order).
    """
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} source sentences but {len(references)} references")
    hypotheses = translate_all(translator, sources, beam_size, batch_size, max_new_tokens, progress, scoring=scoring)
    scores = score(hypotheses, references)
    return {**scores, "beam_size": beam_size, "length_penalty": scoring.alpha, "hypotheses": hypotheses}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.evaluate",
        description=(
            "Translate a test set with a checkpoint and report sacreBLEU (cased, 13a tokenizer), "
            "lowercased BLEU (as published Multi30k results) and chrF. Prints a table, then the "
            "same scores as one JSON line, on stdout; progress goes to stderr."
        ),
    )
    add_decoding_arguments(parser)
    parser.add_argument("--src", required=True, help="source sentences, one a line (plain or .gz)")
    parser.add_argument("--ref", required=True, help="reference translations, one a line, aligned with --src")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="sentences translated together (default: %(default)s)",
    )
    parser.add_argument("--json", metavar="OUT", help="also write the scores as JSON to this file")
    parser.add_argument("--hyp-out", metavar="FILE", help="write the translations, one a line, to this file")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--by-rarest-word",
        action="store_true",
        help="also score the sentences grouped by how often their rarest word occurs in training "
        "(needs the checkpoint's source_words.json)",
    )
    parser.add_argument(
        "--card-split",
        metavar="NAME",
        help="record the scores in the checkpoint's card.json under scores.NAME (e.g. test_2016_flickr)",
    )
    return parser


# What a card keeps of an evaluation (not the hypotheses, nor BLEU's details)
CARD_SCORE_KEYS = (
    "bleu",
    "bleu_lowercase",
    "chrf",
    "beam_size",
    "length_penalty",
    "sentences",
    "signatures",
    "src",
    "ref",
    "device",
)


def record_on_card(checkpoint: str | Path, split: str, result: dict[str, Any]) -> None:
    """Write one split's scores into card.json, keeping everything else on the card; the scores also go to
    the card's last training run in ``history`` (the run that made these weights), when it has one."""
    card = Card.load(checkpoint)
    scores = SplitScores.from_dict({key: result[key] for key in CARD_SCORE_KEYS if key in result}, "the scores")
    card.scores = {**(card.scores or {}), split: scores}
    if card.history:
        card.history[-1].scores = {**(card.history[-1].scores or {}), split: scores}
    card.save(checkpoint)


def format_table(result: dict[str, Any]) -> str:
    rows = [
        ("BLEU (cased, 13a)", result["bleu"], result["signatures"]["bleu"]),
        ("BLEU (lowercased)", result["bleu_lowercase"], result["signatures"]["bleu_lowercase"]),
        ("chrF", result["chrf"], result["signatures"]["chrf"]),
    ]
    lines = [f"{'metric':<20} {'score':>7}  signature"]
    lines += [f"{name:<20} {value:>7.2f}  {signature}" for name, value, signature in rows]
    return "\n".join(lines)


def format_groups(groups: list[dict[str, Any]]) -> str:
    """scores_by_rarest_word's groups as a table."""
    lines = [f"{'rarest word seen':<20} {'sentences':>9} {'BLEU':>7} {'chrF':>7}"]
    for group in groups:
        label = group["rarest_word_seen"]
        seen = {"0": "never", "1": "once"}.get(label, f"{label} times")
        lines.append(f"{seen:<20} {group['sentences']:>9} {group['bleu']:>7.2f} {group['chrf']:>7.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = build_parser()
    args = parser.parse_args(argv)
    for option, path in (("--src", args.src), ("--ref", args.ref)):
        if not Path(path).is_file():
            parser.error(f"{option} {path}: file not found")
    if args.beam < 1 or args.batch_size < 1:
        parser.error("--beam and --batch-size must be at least 1")
    sources, references = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(references):
        parser.error(f"--src {args.src} has {len(sources)} lines but --ref {args.ref} has {len(references)}")

    from model.analysis.domain import SOURCE_WORDS_FILE, SourceWords, scores_by_rarest_word
    from model.checkpoint import CheckpointError, load_checkpoint  # after argument checks: loading is slow

    words = SourceWords.load(args.checkpoint) if args.by_rarest_word else None
    if args.by_rarest_word and words is None:
        parser.error(
            f"--by-rarest-word: {Path(args.checkpoint) / SOURCE_WORDS_FILE} is missing or unreadable; write it with "
            f"python -m model.analysis.domain --checkpoint {args.checkpoint} --training-sentences TRAIN_SOURCE"
        )

    try:
        translator = load_checkpoint(args.checkpoint, device=args.device)
    except (CheckpointError, ValueError) as error:
        parser.error(f"--checkpoint: {error}")
    for notice in translator.notices:
        print(notice, file=sys.stderr)
    result = evaluate(
        translator,
        sources,
        references,
        args.beam,
        args.batch_size,
        args.max_new_tokens,
        progress=not args.quiet,
        scoring=Scoring(alpha=args.length_penalty),
    )
    hypotheses = result.pop("hypotheses")
    result = {
        "checkpoint": str(args.checkpoint),
        "src": str(args.src),
        "ref": str(args.ref),
        "device": str(translator.device),
        "max_new_tokens": args.max_new_tokens,
        **result,
    }
    if args.hyp_out:
        Path(args.hyp_out).write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    if words is not None:
        result["by_rarest_word"] = scores_by_rarest_word(words, sources, hypotheses, references)
    if args.card_split:
        record_on_card(args.checkpoint, args.card_split, result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(format_table(result))
    if words is not None:
        print(format_groups(result["by_rarest_word"]))
    print(json.dumps(result, ensure_ascii=False))
    return result


if __name__ == "__main__":
    main()
