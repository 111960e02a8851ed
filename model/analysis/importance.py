"""Head importance: how much one translation relies on each attention head.

Removing one head and measuring how much the log-probability of the original translation
falls, teacher-forced, says how much the model relies on that head for this translation.
``head_importance`` does it for every head in one batched pass: the sentence is repeated once
per head plus one baseline row, and each batch row loses a different head
(``model.analysis.ablation.ablate_heads_by_row``: the edit sees the batch dimension).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from model.analysis.ablation import HeadMeans, ablate_heads_by_row, check_ablation, mean_head_outputs
from model.decoding.search import DEFAULT_BEAM_SIZE, next_token_log_probs
from model.heads import ATTENTION_KINDS, HeadRef, all_heads, layer_count
from model.transformer import Transformer
from model.translator import DEFAULT_BATCH_SIZE

if TYPE_CHECKING:
    from model.translator import Translator


@dataclass
class HeadImportance:
    """How much each head matters to one translation.

    ``drops[kind]`` is (layers, heads): log P(translation | model) - log P(translation | model
    without that head alone), teacher-forced, natural log, summed over the output tokens (EOS
    included). Positive: the model relies on the head for this translation; about 0: removing it
    changes nothing; negative: the translation becomes more likely without it.
    """

    source_text: str
    source_pieces: list[str]
    target_ids: list[int]  # BOS + the output that was scored
    target_pieces: list[str]
    mode: str
    baseline_log_prob: float  # log P(translation | model), every head present
    drops: dict[str, np.ndarray]
    notice: str | None = None  # set when a GPU ran out of memory and the CPU computed the drops

    def ranking(self) -> list[tuple[HeadRef, float]]:
        """Every head with its drop, largest first (ties keep kind, layer, head order)."""
        ranked = [
            (HeadRef(kind, layer, head), float(grid[layer, head]))
            for kind, grid in self.drops.items()
            for layer in range(grid.shape[0])
            for head in range(grid.shape[1])
        ]
        return sorted(ranked, key=lambda item: -item[1])


def _output_ids(translator: Translator, ids: Sequence[int]) -> list[int]:
    ids = [int(token) for token in ids]
    config = translator.config
    if not ids:
        raise ValueError("the translation is empty: there is nothing to score")
    if len(ids) > config.max_sequence_tokens:
        raise ValueError(f"the translation has {len(ids)} tokens; the model reads at most {config.max_sequence_tokens}")
    if any(not 0 <= token < config.tgt_vocab_size for token in ids):
        raise ValueError("target_ids holds ids outside the target vocabulary")
    return ids


@torch.inference_mode()
def _row_log_probs(
    model: Transformer,
    src: torch.Tensor,
    decoder_input: torch.Tensor,
    gold: torch.Tensor,
    rows: list[list[HeadRef]],
    *,
    mode: str,
    means: HeadMeans | None,
) -> torch.Tensor:
    """(len(rows),) log-probability of ``gold`` with row r's heads removed; one forward pass."""
    count = len(rows)
    with ablate_heads_by_row(model, rows, mode, means):
        logits = model(src.expand(count, -1), decoder_input.expand(count, -1))  # (N, T, V)
    log_probs = next_token_log_probs(model, logits)
    return log_probs.gather(-1, gold.expand(count, -1)[..., None])[..., 0].sum(dim=-1).cpu()  # (N,)


def head_importance(
    translator: Translator,
    text: str,
    *,
    target_ids: Sequence[int] | None = None,
    kinds: Sequence[str] = ATTENTION_KINDS,
    mode: str = "zero",
    means: HeadMeans | None = None,
    beam_size: int = DEFAULT_BEAM_SIZE,
    max_new_tokens: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> HeadImportance:
    """The drop in log-probability of the translation when each head of ``kinds`` alone is removed.

    ``target_ids`` is the output to score (BOS left out, e.g. ``trace.target_ids[1:]``); None
    translates ``text`` with ``beam_size`` and ``max_new_tokens`` first. The sentence is repeated once
    per head plus one untouched baseline row and every row loses its own head, so all heads
    cost one teacher-forced pass of ``batch_size`` rows at most (more rows are split into
    passes; on a GPU out-of-memory error the passes are halved, and at one row the whole
    computation moves to the CPU with a notice). Token
    probabilities are those decoding chooses from (never-generated tokens masked), as ``Trace.step_probs``.
    """
    config = translator.config
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if target_ids is None:
        target_ids = translator.trace(text, beam_size, max_new_tokens).target_ids[1:]
    output = _output_ids(translator, target_ids)
    heads = all_heads(config, kinds)
    if mode == "mean" and means is None:
        means = mean_head_outputs(translator, [text], [output])
    check_ablation(mode, heads, means)
    source = translator.source_ids(text).ids
    rows: list[list[HeadRef]] = [[]] + [[ref] for ref in heads]  # row 0: the baseline

    def score_rows(model: Transformer, device: torch.device) -> list[torch.Tensor]:
        src = torch.tensor([source], dtype=torch.long, device=device)  # (1, S)
        decoder_input = torch.tensor([[config.start_id] + output[:-1]], dtype=torch.long, device=device)  # (1, T)
        gold = torch.tensor([output], dtype=torch.long, device=device)  # (1, T)
        scores: list[torch.Tensor] = []
        start, size = 0, batch_size
        while start < len(rows):
            chunk = rows[start : start + size]
            try:
                scores.append(_row_log_probs(model, src, decoder_input, gold, chunk, mode=mode, means=means))
            except torch.OutOfMemoryError:
                if size == 1:
                    raise  # Translator.run retries the whole computation on a CPU copy
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                size = max(1, size // 2)
                continue
            start += len(chunk)
        return scores

    scores, notice = translator.run(score_rows)
    log_probs = torch.cat(scores).double()  # (1 + heads,)
    drops_flat = (log_probs[0] - log_probs[1:]).numpy()
    drops: dict[str, np.ndarray] = {}
    offset = 0
    for kind in kinds:
        count = layer_count(config, kind) * config.n_heads
        drops[kind] = drops_flat[offset : offset + count].reshape(layer_count(config, kind), config.n_heads)
        offset += count
    full_target = [config.start_id] + output
    return HeadImportance(
        source_text=text,
        source_pieces=translator.tokenizer.pieces(source, "source"),
        target_ids=full_target,
        target_pieces=translator.tokenizer.pieces(full_target, "target"),
        mode=mode,
        baseline_log_prob=float(log_probs[0]),
        drops=drops,
        notice=notice,
    )
