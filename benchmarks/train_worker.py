"""One timed stretch of training steps, run in its own process on the ``model`` package of any source tree.

``python benchmarks/train_worker.py --tree PATH --checkpoint DIR --data DIR [...]`` prints one JSON line:
target tokens per second over ``--steps`` steps of ``python -m model.train``'s step (token-bucketed
Multi30k batches, AdamW, label smoothing 0.1, clipping), after warm-up steps. It imports ``model``
from ``--tree``, so a git worktree of an older commit is timed by the same script as this one: the
training benchmark (benchmarks.training_benchmarks) alternates the two in one run. Only functions
that older trees also have are used (load_checkpoint, the data helpers, train_step, Transformer), and the
step is called as each tree's train_step takes it (a TranslationLoss since the fused loss, the model before), with
the optimiser each tree's model.train makes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Time training steps of the model package in --tree.")
    parser.add_argument("--tree", type=Path, required=True, help="source tree whose model/ package is timed")
    parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint: its architecture and tokenizer")
    parser.add_argument("--data", type=Path, required=True, help="Multi30k folder ({split}.{lang}[.gz])")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument(
        "--max-tokens", type=int, default=3072, help="padded tokens per batch (model.train --max-tokens)"
    )
    parser.add_argument(
        "--cpu-bf16", action="store_true", help="bf16 autocast, as model.train --cpu-bf16 (trees that have it)"
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()
    sys.path.insert(0, str(args.tree.resolve()))

    import torch

    from model import load_checkpoint
    from model.training import optimization
    from model.training.data import collate, encode_examples, read_parallel, split_file, token_batches
    from model.transformer import Transformer

    try:
        from model.training.loss import TranslationLoss
    except ImportError:  # a tree from before the fused loss: its train_step takes the model and the loss options
        TranslationLoss = None  # noqa: N806 - the class's name, or None

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    translator = load_checkpoint(args.checkpoint, device="cpu")
    card = translator.card  # a model.card.Card; a plain dict in trees from before it
    languages = (
        (card.get("source_language", "en"), card.get("target_language", "de"))
        if isinstance(card, dict)
        else (card.source_language or "en", card.target_language or "de")
    )
    # the whole split, as model.train batches it: a subset sorts fewer sentences of each length into a batch, so
    # its batches pad more and its steps are slower a real token than the training loop this worker is meant to time
    pairs = read_parallel(*(split_file(args.data, "train", language) for language in languages))
    config = translator.config
    examples = encode_examples(pairs, translator.tokenizer, config)
    batches = token_batches(examples, args.max_tokens, seed=1)[: args.warmup + args.steps]
    model = Transformer(config).train()
    optimizer = (
        optimization.make_optimizer(model.parameters(), 1e-4, 0.0)
        if hasattr(optimization, "make_optimizer")  # python -m model.train's optimiser, fused since make_optimizer
        else torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
    )
    translation_loss = TranslationLoss(model, config.pad_id, label_smoothing=0.1) if TranslationLoss else None
    tokens, start = 0, 0.0
    for index, batch in enumerate(batches):
        if index == args.warmup:
            tokens, start = 0, time.perf_counter()
        src, tgt = collate([examples[i] for i in batch], config.pad_id)
        target_tokens = int((tgt[:, 1:] != config.pad_id).sum())
        tokens += target_tokens
        if TranslationLoss is None:  # an older train_step: the model and the loss options
            arguments = (model, model.parameters(), optimizer, src, tgt, config.pad_id)
            options = {"label_smoothing": 0.1}
        else:
            arguments, options = (translation_loss, model.parameters(), optimizer, src, tgt), {}
        loss = optimization.train_step(
            *arguments, **options, clip_norm=1.0, use_amp=args.cpu_bf16, loss_divisor=target_tokens
        )
        float(loss)  # model.train reads every step's loss
    seconds = time.perf_counter() - start
    print(json.dumps({"tokens_per_s": tokens / seconds, "tokens": tokens, "seconds": seconds}))


if __name__ == "__main__":
    main()
