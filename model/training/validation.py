"""Validation during training: the loss per target token, and the BLEU of greedy translations."""

from __future__ import annotations

import sacrebleu
import torch

from model.config import TransformerConfig
from model.training.data import Example, collate, token_batches
from model.training.loss import logits_cross_entropy
from model.transformer import Transformer
from model.translator import Translator


@torch.inference_mode()
def validation_loss(
    model: Transformer, examples: list[Example], config: TransformerConfig, device: torch.device
) -> float:
    """Mean cross-entropy per target token (no label smoothing) over ``examples``."""
    total, tokens = 0.0, 0
    for batch in token_batches(examples, 8000, seed=0):
        src, tgt = collate([examples[i] for i in batch], config.pad_id, config.source_pad_id)
        src, tgt = src.to(device), tgt.to(device)
        logits = model(src, tgt[:, :-1])
        total += float(logits_cross_entropy(logits, tgt[:, 1:], config.pad_id, label_smoothing=0.0))
        tokens += int((tgt[:, 1:] != config.pad_id).sum())
    return total / max(tokens, 1)


def greedy_bleu(translator: Translator, pairs: list[tuple[str, str]]) -> float:
    """Corpus BLEU (sacreBLEU defaults) of greedy translations of the sources against the targets."""
    hypotheses = translator.translate_batch([s for s, _ in pairs], beam_size=1)
    return sacrebleu.corpus_bleu(hypotheses, [[t for _, t in pairs]]).score
