"""What a training run starts from, read and checked before its first step: the corpus, the tokenizer, the model's
configuration, the --init-from checkpoint it continues, and the options that depend on them (--subword-sampling
needs a tokenizer that samples; --cpu-bf16 pays only on a CPU with bf16 units). model.training.train's ``set_up``
puts them together.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch

from model.checkpoint import CheckpointError, build_model, read_card
from model.config import TransformerConfig
from model.tokenizer import Tokenizer, train_sentencepiece
from model.training.data import read_parallel, split_file
from model.training.distributed import Run
from model.training.options import DEFAULT_DROPOUT


def load_corpus(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict]:
    """Training and validation pairs from --data or the explicit files, and the paths they came from."""
    if args.data:
        paths = {
            "train_src": split_file(args.data, args.train_split, args.src_lang),
            "train_tgt": split_file(args.data, args.train_split, args.tgt_lang),
            "valid_src": split_file(args.data, args.valid_split, args.src_lang),
            "valid_tgt": split_file(args.data, args.valid_split, args.tgt_lang),
        }
    else:
        paths = {k: getattr(args, k) for k in ("train_src", "train_tgt", "valid_src", "valid_tgt")}
        missing = [k for k, v in paths.items() if not v]
        if missing:
            raise SystemExit(
                f"give --data or all of --train-src --train-tgt --valid-src --valid-tgt (missing {missing})"
            )
    train = read_parallel(paths["train_src"], paths["train_tgt"])
    valid = read_parallel(paths["valid_src"], paths["valid_tgt"])
    return train, valid, {k: str(v) for k, v in paths.items()}


def get_tokenizer(args: argparse.Namespace, out: Path, train: list[tuple[str, str]], run: Run) -> Tokenizer:
    """Train once (rank 0) and save into the run folder; later calls and other ranks load it."""
    if run.main and not ((out / "tokenizer.model").exists() or (out / "source.model").exists()):
        sources, targets = [s for s, _ in train], [t for _, t in train]

        def trained(sentences: list[str]) -> bytes:
            return train_sentencepiece(
                sentences, args.vocab_size, args.tokenizer_type, normalization=args.normalization
            )

        if args.separate_vocab:
            tokenizer = Tokenizer.from_model_bytes(trained(sources), trained(targets))
        else:
            tokenizer = Tokenizer.from_model_bytes(trained(sources + targets))
        tokenizer.save(out)
    run.barrier()
    return Tokenizer.load(out)


def make_config(args: argparse.Namespace, tokenizer: Tokenizer) -> TransformerConfig:
    """The model's hyper-parameters: the model options with the tokenizer's vocabulary sizes and ids, or
    the --init-from checkpoint's own (saved with the run's arguments), with the dropout options given."""
    # an args.json may predate the attention and activation dropout options
    dropouts = {name: getattr(args, name, None) for name in ("dropout", "attention_dropout", "activation_dropout")}
    if getattr(args, "init_config", None):
        config = TransformerConfig.from_dict(args.init_config)
        return replace(config, **{name: value for name, value in dropouts.items() if value is not None})
    tie = not args.no_tie
    return TransformerConfig(
        src_vocab_size=tokenizer.vocab_size("source"),
        tgt_vocab_size=tokenizer.vocab_size("target"),
        d_model=args.d_model,
        n_heads=args.heads,
        n_encoder_layers=args.layers,
        n_decoder_layers=args.decoder_layers or args.layers,
        d_ff=args.d_ff,
        dropout=DEFAULT_DROPOUT if args.dropout is None else args.dropout,
        attention_dropout=dropouts["attention_dropout"],
        activation_dropout=dropouts["activation_dropout"],
        activation=args.activation,
        norm_first=args.norm_first,
        final_norm=args.final_norm,
        max_len=args.max_len,
        share_embeddings=tie and tokenizer.joint,
        tie_output=tie,
        output_bias=not tie,
        **tokenizer.special_ids(),
    )


def read_start_checkpoint(args: argparse.Namespace) -> tuple[dict[str, torch.Tensor], Tokenizer]:
    """For --init-from: the checkpoint's weights (fp32) and tokenizer. Its architecture and training history
    go into the run's arguments (args.json), where a --resume of the new run finds them. A checkpoint whose
    card names other languages than --src-lang / --tgt-lang is refused: its tokenizer and weights would not fit."""
    try:
        model, tokenizer = build_model(Path(args.init_from))
        card = read_card(Path(args.init_from))
    except CheckpointError as error:
        raise SystemExit(f"--init-from: {error}") from error
    languages = card.languages
    if None not in languages and languages != (args.src_lang, args.tgt_lang):
        raise SystemExit(
            f"--init-from: {args.init_from} translates {languages[0]} -> {languages[1]}, "
            f"not {args.src_lang} -> {args.tgt_lang} (--src-lang, --tgt-lang)"
        )
    args.init_config = model.config.to_dict()
    args.init_history = [run.to_dict() for run in card.runs()]
    return model.state_dict(), tokenizer


def check_subword_sampling(tokenizer: Tokenizer, pair: tuple[str, str], sampling: float) -> None:
    """Refuse --subword-sampling for a tokenizer with one segmentation per text (char and word models); its range
    is checked when the options are parsed (options.subword_sampling)."""
    try:
        tokenizer.encode(pair[0], "source", sampling)
        tokenizer.encode(pair[1], "target", sampling)
    except RuntimeError as error:
        raise SystemExit(
            f"--subword-sampling needs a BPE or unigram tokenizer; this one cannot sample segmentations ({error})"
        ) from error


def cpu_has_bf16_units() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX), where --cpu-bf16 pays."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's, private: absent means unknown
    return any(getattr(torch.cpu, name, lambda: True)() for name in checks)
