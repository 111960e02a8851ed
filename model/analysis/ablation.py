"""Head ablation: switch attention heads off and compare the translation with the original.

A head's output is its weighted sum of values, (B, H, Tq, d_k) before the heads are
concatenated and mixed by ``out_proj``; removing head h replaces its slice by zeros ("zero")
or by that head's mean output ("mean"), so the module's output loses exactly
``out_proj.weight[:, h*d_k:(h+1)*d_k] @ head_output_h`` (mean: gets the mean's term instead).
Everything downstream sees the change; everything upstream is untouched.

Mean ablation needs each head's mean output beforehand, because incremental decoding calls
every module once per step with one query row: ``mean_head_outputs`` pools every position of
teacher-forced passes of one or more sentences (by default the sentence itself, forced on its
original translation: the head keeps its average contribution to this sentence and loses
what it says about each position).

Every ablation runs through ``model.capture.intervene``: the edit lives in the current
thread's context only, so the model shared by every session is never changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from model.analysis.alignment import TokenDiff, token_diff
from model.analysis.pairs import AttentionPair, attention_pair
from model.capture import intervene
from model.decoding.sampling import Sampling
from model.decoding.scoring import Scoring
from model.decoding.search import DEFAULT_BEAM_SIZE
from model.heads import HeadRef, check_heads
from model.trace import DEFAULT_TOP_K, Trace
from model.transformer import Transformer

if TYPE_CHECKING:
    from model.translator import Translator

ABLATION_MODES = ("zero", "mean")

# Attention module name -> (heads, d_k) mean output of each head.
HeadMeans = dict[str, torch.Tensor]


def check_ablation(mode: str, heads: Sequence[HeadRef], means: HeadMeans | None) -> None:
    """Refuse an unknown ``mode``, and mean ablation without the mean outputs of every module of ``heads``."""
    if mode not in ABLATION_MODES:
        raise ValueError(f"mode must be one of {ABLATION_MODES}, not {mode!r}")
    if mode == "mean":
        missing = sorted({ref.module_name for ref in heads} - set(means or {}))
        if missing:
            raise ValueError(f"mean ablation needs the mean head outputs of {', '.join(missing)}")


def _replace_heads(
    value: torch.Tensor, rows: slice | torch.Tensor, heads: torch.Tensor, mode: str, mean: torch.Tensor | None
) -> torch.Tensor:
    """value (B, H, Tq, dk) with value[rows, heads] zeroed or set to the heads' means.

    ``rows`` is slice(None) (every batch row loses every head in ``heads``) or one row index per head index.
    """
    value = value.clone()  # the probed tensor is the module's own: never write into it
    heads = heads.to(value.device)
    rows = rows if isinstance(rows, slice) else rows.to(value.device)
    if mode == "zero":
        value[rows, heads] = 0.0
    else:
        assert mean is not None, "check_ablation refuses a mean ablation without the heads' means"
        value[rows, heads] = mean.to(value)[heads].unsqueeze(-2)  # (n, 1, dk), broadcast over queries
    return value


@contextmanager
def ablate_heads(
    model: Transformer, heads: Sequence[HeadRef], mode: str = "zero", means: HeadMeans | None = None
) -> Iterator[None]:
    """Remove ``heads`` in every forward pass inside the block, in this thread only.

    ``mode="zero"`` replaces each head's output by zeros, ``mode="mean"`` by ``means[module][head]``
    (see ``mean_head_outputs``) at every query position. Decoding, tracing and plain forward
    passes all see the heads removed. With no heads the model runs untouched (not even the
    attention path changes), so the results equal the original's exactly.
    """
    heads = check_heads(model.config, heads)
    check_ablation(mode, heads, means)
    by_module: dict[str, list[int]] = {}
    for ref in heads:
        by_module.setdefault(ref.module_name, []).append(ref.head)
    indices = {name: torch.tensor(chosen) for name, chosen in by_module.items()}

    def edit(name: str, kind: str, value: torch.Tensor) -> torch.Tensor:
        if kind != "head_output" or name not in indices:
            return value
        return _replace_heads(value, slice(None), indices[name], mode, (means or {}).get(name))

    with intervene(model, edit) if heads else nullcontext():
        yield


@contextmanager
def ablate_heads_by_row(
    model: Transformer, rows: Sequence[Sequence[HeadRef]], mode: str = "zero", means: HeadMeans | None = None
) -> Iterator[None]:
    """Batch row r loses the heads ``rows[r]``: many ablations in one forward pass (an empty row is untouched).

    Every forward pass inside the block must have exactly ``len(rows)`` batch rows; this is for
    teacher-forced passes, not for beam search (which changes the batch).
    """
    rows = [check_heads(model.config, heads) for heads in rows]
    check_ablation(mode, [ref for heads in rows for ref in heads], means)
    pairs: dict[str, tuple[list[int], list[int]]] = {}
    for row, heads in enumerate(rows):
        for ref in heads:
            row_list, head_list = pairs.setdefault(ref.module_name, ([], []))
            row_list.append(row)
            head_list.append(ref.head)
    indices = {name: (torch.tensor(r), torch.tensor(h)) for name, (r, h) in pairs.items()}

    def edit(name: str, kind: str, value: torch.Tensor) -> torch.Tensor:
        if kind != "head_output" or name not in indices:
            return value
        if value.size(0) != len(rows):
            raise ValueError(f"{len(rows)} ablation rows were given for a batch of {value.size(0)}")
        row_index, head_index = indices[name]
        return _replace_heads(value, row_index, head_index, mode, (means or {}).get(name))

    with intervene(model, edit):
        yield


def mean_head_outputs(
    translator: Translator,
    texts: Sequence[str],
    outputs: Sequence[Sequence[int]] | None = None,
    beam_size: int = DEFAULT_BEAM_SIZE,
    max_new_tokens: int | None = None,
) -> HeadMeans:
    """Each head's mean output, (heads, d_k) per attention module, over every position of teacher-forced passes.

    Sentence i is forced on ``outputs[i]`` (target ids, BOS left out, as ``Translator.trace``'s
    ``target_ids``), or on its own translation (``beam_size``, ``max_new_tokens``) when ``outputs`` is None.
    All query positions of all sentences are pooled: encoder self-attention averages over
    source positions, decoder self- and cross-attention over decoder inputs (BOS to the last
    output token but one).
    """
    if outputs is not None and len(outputs) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(outputs)} outputs")
    if not texts:
        raise ValueError("give at least one sentence to average over")
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    for index, text in enumerate(texts):
        if outputs is not None:
            output = list(outputs[index])
        else:
            output = translator.trace(text, beam_size, max_new_tokens).target_ids[1:]
        for name, (total, count) in _forced_head_sums(translator, text, output).items():
            sums[name] = sums[name] + total if name in sums else total
            counts[name] = counts.get(name, 0) + count
    return {name: total / counts[name] for name, total in sums.items()}


def _forced_head_sums(translator: Translator, text: str, output: list[int]) -> dict[str, tuple[torch.Tensor, int]]:
    """Per attention module: each head's output summed over the positions of one forced pass, and the positions."""
    sums: dict[str, tuple[torch.Tensor, int]] = {}

    def record(name: str, kind: str, value: torch.Tensor) -> torch.Tensor:
        if kind == "head_output":  # (1, H, Tq, dk); kept per call, so a GPU-memory retry on the CPU counts once
            sums[name] = (value.float().sum(dim=(0, 2)).cpu(), value.size(0) * value.size(2))
        return value

    with intervene(translator.model, record):
        translator.trace(text, target_ids=output)
    return sums


def log_probability(step_probs: np.ndarray) -> float:
    """Log-probability of a whole output from its per-step probabilities (float32 underflow counts as the
    smallest positive float32, so a token the model rules out gives a large finite number, not -inf)."""
    probs = np.maximum(np.asarray(step_probs, dtype=np.float64), np.finfo(np.float32).tiny)
    return float(np.log(probs).sum())


@dataclass
class AblationComparison:
    """The original translation beside the one made with ``heads`` removed.

    ``forced`` is the model with the heads removed, teacher-forced on the original
    translation: ``forced.step_probs[t]`` is the probability it gives the original's token t,
    to compare with ``original.step_probs[t]``. ``diff`` aligns the output pieces of
    ``original`` and ``ablated``.
    """

    heads: list[HeadRef]
    mode: str
    original: Trace
    ablated: Trace
    forced: Trace
    diff: TokenDiff

    @property
    def probability_change(self) -> np.ndarray:
        """(T,) probability of each original token with the heads removed minus without."""
        return self.forced.step_probs - self.original.step_probs

    @property
    def log_prob_drop(self) -> float:
        """How much the log-probability of the original translation falls when the heads are removed."""
        return log_probability(self.original.step_probs) - log_probability(self.forced.step_probs)

    def attention_pair(self, module_name: str, head: int) -> AttentionPair:
        """One head's attention in the original and in the ablated translation (draw with viz.pairs)."""
        return attention_pair(self.original, self.ablated, module_name, head)


def compare_ablation(
    translator: Translator,
    text: str,
    heads: Sequence[HeadRef],
    mode: str = "zero",
    beam_size: int = DEFAULT_BEAM_SIZE,
    max_new_tokens: int | None = None,
    *,
    means: HeadMeans | None = None,
    top_k: int = DEFAULT_TOP_K,
    scoring: Scoring | None = None,
    sampling: Sampling | None = None,
) -> AblationComparison:
    """Translate ``text`` as is and with ``heads`` removed; diff the outputs and score the original's tokens.

    ``mode="mean"`` without ``means`` uses each head's mean over this sentence forced on its
    original translation (``mean_head_outputs``). ``scoring`` and ``sampling``: as in Translator.trace (a sampled
    translation is sampled again with the heads removed, from the same seed).
    """
    heads = check_heads(translator.config, heads)
    original = translator.trace(text, beam_size, max_new_tokens, top_k, scoring=scoring, sampling=sampling)
    output = original.target_ids[1:]
    if mode == "mean" and means is None:
        means = mean_head_outputs(translator, [text], [output])
    with ablate_heads(translator.model, heads, mode, means):
        ablated = translator.trace(text, beam_size, max_new_tokens, top_k, scoring=scoring, sampling=sampling)
        forced = translator.trace(text, beam_size, top_k=top_k, target_ids=output, scoring=scoring)
    record = {"name": "ablation", "heads": [asdict(ref) for ref in heads], "mode": mode}
    ablated.outcome.experiment = forced.outcome.experiment = record
    diff = token_diff(original.predicted_pieces, ablated.predicted_pieces)
    return AblationComparison(heads, mode, original, ablated, forced, diff)
