"""Translate text with a checkpoint: ``python -m model.translate --help``.

Sentences come from the command line or, when none are given, from stdin (one a line);
translations go to stdout, one a line, in the same order. Notices (such as a missing GPU
falling back to the CPU) go to stderr so that stdout holds only translations.
"""

from __future__ import annotations

import argparse
import sys

from model.decoding.sampling import NO_TOP_K, Sampling
from model.decoding.scoring import DEFAULT_ALPHA, GNMT_SCORING, Scoring
from model.decoding.search import DEFAULT_BEAM_SIZE
from model.translator import DEFAULT_BATCH_SIZE, Translator


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every command that translates with a checkpoint shares (translate, evaluate)."""
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder (config.json, model.safetensors, ...)")
    parser.add_argument(
        "--beam", type=int, default=DEFAULT_BEAM_SIZE, help="beam size (1: greedy decoding; default: %(default)s)"
    )
    parser.add_argument(
        "--max-new-tokens",
        "--max-len",  # the name older scripts use
        dest="max_new_tokens",
        type=int,
        help="most tokens generated per sentence (default: 1.5 x source length + 10; --max-len is its former name)",
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        default=DEFAULT_ALPHA,
        metavar="ALPHA",
        help="beam search ranks finished translations by log-probability / ((5 + length) / 6) ** ALPHA "
        "(GNMT's; 0: raw log-probability, larger favours longer translations; default: %(default)s)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        help="auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps; "
        "a missing accelerator falls back to the CPU with a notice on stderr (default: %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.translate",
        description=(
            "Translate sentences with a checkpoint folder. Give the sentences as arguments, or pipe\n"
            "them on stdin one a line; one translation a line goes to stdout."
        ),
        epilog=(
            "examples:\n"
            "  python -m model.translate --checkpoint checkpoints/en-de 'A dog runs in the park.'\n"
            "  python -m model.translate --checkpoint checkpoints/en-de < test.en > test.hyp.de\n"
            "  python -m model.translate --checkpoint checkpoints/en-de --sample --temperature 0.8 --top-p 0.9 \\\n"
            "      --seed 3 'A dog runs in the park.'"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("text", nargs="*", metavar="TEXT", help="sentences to translate (default: read stdin lines)")
    add_decoding_arguments(parser)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="sentences translated together when stdin is a file or pipe "
        "(a terminal is translated line by line; default: %(default)s)",
    )
    sampling = parser.add_argument_group(
        "sampling", "draw each token from the model's distribution instead of searching (--beam is then not used)"
    )
    sampling.add_argument("--sample", action="store_true", help="sample; the options below shape each draw")
    defaults = Sampling()
    sampling.add_argument(
        "--temperature",
        type=float,
        help=f"divide the scores by this before the softmax: below 1 sharper, above 1 flatter (default: "
        f"{defaults.temperature:g})",
    )
    sampling.add_argument(
        "--top-k", type=int, help=f"draw among the K most likely tokens only ({NO_TOP_K}, the default: all)"
    )
    sampling.add_argument(
        "--top-p",
        type=float,
        help="draw among the fewest most likely tokens whose probability reaches P (default: 1, all)",
    )
    sampling.add_argument(
        "--seed",
        type=int,
        help=f"the draws' random stream: the same seed gives the same output (default: {defaults.seed})",
    )
    return parser


def sampling_from_arguments(args: argparse.Namespace) -> Sampling | None:
    """The Sampling the options ask for (None without --sample); ValueError for a bad value or an option given
    without --sample."""
    given = {name: getattr(args, name) for name in ("temperature", "top_k", "top_p", "seed")}
    given = {name: value for name, value in given.items() if value is not None}
    if not args.sample:
        if given:
            options = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ValueError(f"{options} only apply with --sample")
        return None
    return Sampling(**given)


def translate_lines(
    translator: Translator,
    lines: list[str],
    beam: int,
    max_new_tokens: int | None,
    batch_size: int,
    scoring: Scoring = GNMT_SCORING,
    *,
    sampling: Sampling | None = None,
) -> list[str]:
    """Translations of lines; blank lines stay blank so that output lines match input lines."""
    wanted = [i for i, line in enumerate(lines) if line.strip()]
    texts = [lines[i] for i in wanted]
    outputs = (
        translator.translate_batch(texts, beam, max_new_tokens, batch_size, scoring, sampling=sampling)
        if wanted
        else []
    )
    result = [""] * len(lines)
    for index, output in zip(wanted, outputs, strict=True):
        result[index] = output
    return result


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.beam < 1 or args.batch_size < 1:
        parser.error("--beam and --batch-size must be at least 1")
    try:
        sampling = sampling_from_arguments(args)
    except ValueError as error:
        parser.error(str(error))

    from model.checkpoint import CheckpointError, load_checkpoint  # after argument checks: loading is slow

    try:
        translator = load_checkpoint(args.checkpoint, device=args.device)
    except (CheckpointError, ValueError) as error:
        parser.error(f"--checkpoint: {error}")
    for notice in translator.notices:
        print(notice, file=sys.stderr)

    scoring = Scoring(alpha=args.length_penalty)

    def emit(lines: list[str]) -> None:
        translations = translate_lines(
            translator, lines, args.beam, args.max_new_tokens, args.batch_size, scoring, sampling=sampling
        )
        for line in translations:
            print(line, flush=True)

    if args.text:
        emit(args.text)
    elif sys.stdin.isatty():  # interactive: answer each line as it is typed
        for line in sys.stdin:
            emit([line.rstrip("\n")])
    else:
        emit([line.rstrip("\n") for line in sys.stdin])


if __name__ == "__main__":
    main()
