"""Synthetic parallel data whose attention has a known answer: ``python -m model.training.toy_tasks --help``.

Each task rewrites a source sequence by a permutation of its positions, so the right
cross-attention is known in advance: copy reads the same position (a diagonal), reverse the
mirrored one (an anti-diagonal), sort the position of the next smallest symbol, and svo-sov
moves the verb of a small English-like sentence to the end ("the tall girl sees a red ball"
-> "the tall girl a red ball sees"). Every token is one whitespace-separated word, so a
SentencePiece word model (``model.train --tokenizer-type word``) gives one piece per token.

Two modes: ``--out DIR`` writes ``{train,val,test}.{src,tgt}`` files in the layout
``python -m model.train --data DIR`` reads (sources distinct across the three splits), and
``--check CHECKPOINT --data DIR`` measures a trained checkpoint on DIR's test split: exact
match of greedy translations, and for every cross-attention head the share of output steps
whose strongest source position is the one the permutation says (``--card`` records it on
the checkpoint's card.json).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from model.card import Card, ToyTaskSection
from model.checkpoint import load_checkpoint
from model.trace import Trace
from model.training.data import read_parallel, split_file

SYMBOLS = "abcdefghijklmnopqrstuvwxyz"
DETERMINERS = ("the", "a")
ADJECTIVES = ("tall", "small", "old", "young", "red", "blue", "green", "happy", "big", "little", "quiet", "brown")
NOUNS = (
    "girl", "boy", "dog", "cat", "man", "woman", "child", "bird",
    "ball", "book", "apple", "car", "horse", "teacher", "farmer", "fish",
)  # fmt: skip
VERBS = ("sees", "likes", "finds", "takes", "holds", "pushes", "follows", "carries", "watches", "chases", "feeds")
SPLITS = ("train", "val", "test")
SETTINGS_FILE = "toy_task.json"


@dataclass(frozen=True)
class Lengths:
    """Source lengths and alphabet of the symbol tasks (svo-sov sentences follow their grammar)."""

    shortest: int = 3
    longest: int = 10
    symbols: int = 26


@dataclass(frozen=True)
class ToyTask:
    """A source sampler and the permutation that turns a source into its target: target[i] = source[order[i]]."""

    name: str
    rule: str  # one sentence for people: what the target is
    pattern: str  # what the cross-attention of a model that learned the task looks like
    source_suffix: str  # file suffixes, shown as the checkpoint's source and target "languages"
    target_suffix: str
    sample: Callable[[random.Random, Lengths], list[str]]
    order: Callable[[list[str]], list[int]]
    uses_lengths: bool = True  # False: the source length comes from a grammar, not from Lengths

    def target(self, source: list[str]) -> list[str]:
        return [source[index] for index in self.order(source)]


def symbol_sequence(rng: random.Random, lengths: Lengths) -> list[str]:
    """Symbols drawn with repetition: repeated symbols make position, not identity, the way to copy."""
    return [rng.choice(SYMBOLS[: lengths.symbols]) for _ in range(rng.randint(lengths.shortest, lengths.longest))]


def distinct_symbols(rng: random.Random, lengths: Lengths) -> list[str]:
    """Distinct symbols, so every sorted output symbol comes from exactly one source position."""
    length = min(rng.randint(lengths.shortest, lengths.longest), lengths.symbols)
    return rng.sample(SYMBOLS[: lengths.symbols], length)


def noun_phrase(rng: random.Random) -> list[str]:
    return [rng.choice(DETERMINERS), *rng.sample(ADJECTIVES, rng.randint(0, 2)), rng.choice(NOUNS)]


def svo_sentence(rng: random.Random, lengths: Lengths) -> list[str]:
    """subject verb object, each noun phrase "determiner (0-2 adjectives) noun": 5 to 9 words."""
    return [*noun_phrase(rng), rng.choice(VERBS), *noun_phrase(rng)]


def verb_last(source: list[str]) -> list[int]:
    """Positions in subject-object-verb order: every word but the verb, then the verb."""
    verb = next(index for index, word in enumerate(source) if word in VERBS)
    return [index for index in range(len(source)) if index != verb] + [verb]


TASKS: dict[str, ToyTask] = {
    task.name: task
    for task in (
        ToyTask(
            "copy",
            "the output is the input sequence unchanged",
            "cross-attention: a diagonal (output step i reads source position i)",
            "seq",
            "copy",
            symbol_sequence,
            lambda source: list(range(len(source))),
        ),
        ToyTask(
            "reverse",
            "the output is the input sequence backwards",
            "cross-attention: an anti-diagonal (output step i reads source position n-1-i)",
            "seq",
            "rev",
            symbol_sequence,
            lambda source: list(range(len(source)))[::-1],
        ),
        ToyTask(
            "sort",
            "the output is the input's (distinct) symbols in alphabetical order",
            "cross-attention: each output step reads the source position of the symbol it writes (a permutation)",
            "seq",
            "sorted",
            distinct_symbols,
            lambda source: sorted(range(len(source)), key=source.__getitem__),
        ),
        ToyTask(
            "svo-sov",
            "subject-verb-object word order becomes subject-object-verb: the verb moves to the end",
            "cross-attention: diagonal over the subject, shifted by one over the object, "
            "and the last output word (the verb) reads the verb's source position",
            "svo",
            "sov",
            svo_sentence,
            verb_last,
            uses_lengths=False,
        ),
    )
}


def generate_pairs(
    task: ToyTask, count: int, rng: random.Random, lengths: Lengths, exclude: set[str] | None = None
) -> list[tuple[str, str]]:
    """count (source, target) pairs with distinct sources not in exclude; the new sources are added to exclude."""
    exclude = set() if exclude is None else exclude
    pairs: list[tuple[str, str]] = []
    attempts = 0
    while len(pairs) < count:
        attempts += 1
        if attempts > 100 * count + 1000:
            raise ValueError(f"{task.name}: cannot draw {count} distinct new sources with {lengths}")
        source = task.sample(rng, lengths)
        text = " ".join(source)
        if text in exclude:
            continue
        exclude.add(text)
        pairs.append((text, " ".join(task.target(source))))
    return pairs


def generate_splits(
    task: ToyTask, sizes: dict[str, int], seed: int, lengths: Lengths | None = None
) -> dict[str, list[tuple[str, str]]]:
    """One seeded draw per split, in order, sources distinct across splits: the same seed gives the same data."""
    rng = random.Random(seed)
    seen: set[str] = set()
    return {split: generate_pairs(task, size, rng, lengths or Lengths(), seen) for split, size in sizes.items()}


def write_dataset(
    task: ToyTask, out: str | Path, sizes: dict[str, int], seed: int, lengths: Lengths, command: str
) -> Path:
    """Write ``{split}.{suffix}`` files and the generator settings (toy_task.json) into out."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for split, pairs in generate_splits(task, sizes, seed, lengths).items():
        (out / f"{split}.{task.source_suffix}").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (out / f"{split}.{task.target_suffix}").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    settings = {
        "task": task.name,
        "rule": task.rule,
        "seed": seed,
        "sizes": sizes,
        "lengths": vars(lengths) if task.uses_lengths else "5-9 words (grammar)",
        "generator_command": command,
    }
    (out / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return out


def alignment_scores(task: ToyTask, traces: list[Trace]) -> dict[str, list[float]]:
    """Per cross-attention module, per head: share of output words whose strongest source position is expected.

    ``traces`` are teacher-forced on the task's target (``Translator.trace(source, target=...)``),
    so every step writes the right word and has an expected position, also for an untrained
    snapshot. Sources must be one piece per word.
    """
    hits: dict[str, np.ndarray] = {}
    steps = 0
    for trace in traces:
        expected = np.array(task.order(trace.source_text.split()))
        steps += len(expected)
        for name in trace.attention_names("cross"):
            strongest = trace.attention[name][:, : len(expected), :].argmax(axis=-1)  # (heads, words)
            hits[name] = hits.get(name, 0) + (strongest == expected).sum(axis=1)
    return {name: (found / max(steps, 1)).round(4).tolist() for name, found in hits.items()}


def verb_step_scores(traces: list[Trace]) -> dict[str, list[float]]:
    """svo-sov, teacher-forced traces: per module and head, share of sentences whose verb step reads the verb."""
    hits: dict[str, np.ndarray] = {}
    for trace in traces:
        source = trace.source_text.split()
        verb = next(index for index, word in enumerate(source) if word in VERBS)
        step = len(source) - 1  # the verb is the last output word
        for name in trace.attention_names("cross"):
            found = trace.attention[name][:, step, :].argmax(axis=-1) == verb  # (heads,)
            hits[name] = hits.get(name, 0) + found
    return {name: (found / max(len(traces), 1)).round(4).tolist() for name, found in hits.items()}


def clearest_head(scores: dict[str, list[float]]) -> dict[str, Any]:
    """The (module, head) with the highest score: where the card tells people to look."""
    name, head = max(
        ((n, h) for n, heads in scores.items() for h in range(len(heads))), key=lambda k: scores[k[0]][k[1]]
    )
    return {"module": name, "head": head, "score": scores[name][head]}


def check_checkpoint(task: ToyTask, checkpoint: str | Path, pairs: list[tuple[str, str]], traced: int) -> dict:
    """Exact match of greedy translations of pairs, and attention alignment on the first ``traced`` of them
    (teacher-forced on the right target)."""
    translator = load_checkpoint(checkpoint, device="cpu")
    hypotheses = translator.translate_batch([s for s, _ in pairs], beam_size=1)
    exact = sum(h == t for h, (_, t) in zip(hypotheses, pairs, strict=True)) / len(pairs)
    traces = [translator.trace(source, target=target) for source, target in pairs[:traced]]
    scores = alignment_scores(task, traces)
    result = {
        "held_out_pairs": len(pairs),
        "held_out_exact_match": round(exact, 4),
        "attention_pairs": len(traces),
        "steps_on_expected_source_position": scores,
        "clearest_head": clearest_head(scores),
    }
    if task.name == "svo-sov":
        verb_scores = verb_step_scores(traces)
        result["verb_step_on_verb"] = verb_scores
        result["clearest_verb_head"] = clearest_head(verb_scores)
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.training.toy_tasks",
        description=(
            "Write synthetic parallel data for toy tasks whose attention pattern is known (copy: diagonal,\n"
            "reverse: anti-diagonal, sort: a permutation, svo-sov: the verb moves to the end), or measure a\n"
            "checkpoint trained on it. Every token is one word: train with --tokenizer-type word."
        ),
        epilog=(
            "examples:\n"
            "  python -m model.training.toy_tasks --task reverse --out runs/toy-reverse-data\n"
            "  python -m model.train --data runs/toy-reverse-data --src-lang seq --tgt-lang rev "
            "--tokenizer-type word ...\n"
            "  python -m model.training.toy_tasks --task reverse --check runs/toy-reverse/final "
            "--data runs/toy-reverse-data"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--task", required=True, choices=sorted(TASKS), help="which toy task")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", help="write {train,val,test}.{source,target suffix} and toy_task.json into this folder")
    mode.add_argument(
        "--check",
        metavar="CHECKPOINT",
        help="measure this checkpoint folder on the test split of --data (exact match, attention alignment)",
    )
    parser.add_argument("--train", type=int, default=20000, help="training pairs (default: %(default)s)")
    parser.add_argument("--valid", type=int, default=500, help="validation pairs, split 'val' (default: %(default)s)")
    parser.add_argument("--test", type=int, default=1000, help="held-out test pairs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the whole draw (default: %(default)s)")
    parser.add_argument(
        "--min-len", type=int, default=3, help="shortest symbol sequence; copy, reverse, sort (default: %(default)s)"
    )
    parser.add_argument(
        "--max-len", type=int, default=10, help="longest symbol sequence; copy, reverse, sort (default: %(default)s)"
    )
    parser.add_argument(
        "--symbols", type=int, default=26, help="alphabet size: the first N of a-z; copy, reverse, sort (default: 26)"
    )
    parser.add_argument("--data", help="with --check: the folder written by --out (its test split is measured)")
    parser.add_argument(
        "--traced", type=int, default=200, help="with --check: test pairs whose attention is measured (default: 200)"
    )
    parser.add_argument(
        "--card", action="store_true", help="with --check: record the data settings and results on card.json"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    task = TASKS[args.task]
    if args.out:
        if not 1 <= args.min_len <= args.max_len or not 1 <= args.symbols <= len(SYMBOLS):
            parser.error("need 1 <= --min-len <= --max-len and 1 <= --symbols <= 26")
        sizes = {"train": args.train, "val": args.valid, "test": args.test}
        command = "python -m model.training.toy_tasks " + " ".join(shlex.quote(a) for a in argv)
        out = write_dataset(
            task, args.out, sizes, args.seed, Lengths(args.min_len, args.max_len, args.symbols), command
        )
        print(
            f"wrote {out}; train with: python -m model.train --data {shlex.quote(str(out))} "
            f"--src-lang {task.source_suffix} --tgt-lang {task.target_suffix} --tokenizer-type word ...",
            file=sys.stderr,
        )
        return
    if not args.data:
        parser.error("--check needs --data (the folder the checkpoint's data was written to)")
    pairs = read_parallel(
        split_file(args.data, "test", task.source_suffix), split_file(args.data, "test", task.target_suffix)
    )
    result = check_checkpoint(task, args.check, pairs, args.traced)
    print(json.dumps(result, indent=2))
    if args.card:
        card = Card.load(args.check)
        settings = json.loads((Path(args.data) / SETTINGS_FILE).read_text(encoding="utf-8"))
        measured = {
            **settings,
            "pattern": task.pattern,
            **result,
            "measured_with": "python -m model.training.toy_tasks " + " ".join(shlex.quote(a) for a in argv),
        }
        card.toy_task = ToyTaskSection.from_dict(measured, "the check's results", "toy_task")
        card.examples = [source for source, _ in pairs[:5]]
        card.save(args.check)


if __name__ == "__main__":
    main()
