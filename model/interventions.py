"""Interventions: switch attention heads off, remove the positional encoding, shuffle the source words.

Head ablation. A head's output is its weighted sum of values, (B, H, Tq, d_k) before the
heads are concatenated and mixed by ``out_proj``; removing head h replaces its slice by zeros
("zero") or by that head's mean output ("mean"), so the module's output loses exactly
``out_proj.weight[:, h*d_k:(h+1)*d_k] @ head_output_h`` (mean: gets the mean's term instead).
Everything downstream sees the change; everything upstream is untouched.

Mean ablation needs each head's mean output beforehand, because incremental decoding calls
every module once per step with one query row: ``mean_head_outputs`` pools every position of
teacher-forced passes of one or more sentences (by default the sentence itself, forced on its
original translation: the head keeps its average contribution to this sentence and loses
what it says about each position).

Head importance. Removing one head and measuring how much the log-probability of the
original translation falls, teacher-forced, says how much the model relies on that head for
this translation. ``head_importance`` does it for every head in one batched pass: the
sentence is repeated once per head plus one baseline row, and each batch row loses a
different head (the edit sees the batch dimension).

Positional encoding. ``without_positional_encoding`` zeroes the sinusoidal encoding added to
the embeddings; ``shuffle_source_words`` reorders the source. Without positions, encoder
self-attention cannot tell word order at all (its output for a permuted source is the same
vectors permuted).

Every experiment runs through ``model.capture.intervene``: the edit lives in the current
thread's context only, so the model shared by every session is never changed.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from model.capture import intervene
from model.config import TransformerConfig
from model.pairs import AttentionPair, attention_pair
from model.trace import Trace
from model.transformer import Transformer

if TYPE_CHECKING:
    from model.translator import Translator

ATTENTION_KINDS = ("encoder", "decoder", "cross")
MODULE_NAMES = {
    "encoder": "encoder.layers.{layer}.self_attn",
    "decoder": "decoder.layers.{layer}.self_attn",
    "cross": "decoder.layers.{layer}.cross_attn",
}
KIND_LABELS = {"encoder": "encoder self", "decoder": "decoder self", "cross": "cross"}
ABLATION_MODES = ("zero", "mean")
POSITIONAL_EXPERIMENTS = ("no-pe", "shuffle")
POSITIONAL_STACKS = ("encoder", "decoder")

# Attention module name -> (heads, d_k) mean output of each head.
HeadMeans = dict[str, torch.Tensor]


@dataclass(frozen=True)
class HeadRef:
    """One attention head: its kind ("encoder" / "decoder" self-attention or "cross"), layer and head."""

    kind: str
    layer: int
    head: int

    def __post_init__(self) -> None:
        if self.kind not in ATTENTION_KINDS:
            raise ValueError(f"kind must be one of {ATTENTION_KINDS}, not {self.kind!r}")
        for name in ("layer", "head"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, not {value!r}")

    @property
    def module_name(self) -> str:
        """The attention module the head belongs to, e.g. "decoder.layers.1.cross_attn"."""
        return MODULE_NAMES[self.kind].format(layer=self.layer)

    @property
    def label(self) -> str:
        """Plain text for a picker or a table, e.g. "cross L1 H2"."""
        return f"{KIND_LABELS[self.kind]} L{self.layer} H{self.head}"


def layer_count(config: TransformerConfig, kind: str) -> int:
    """Layers that have attention of ``kind``."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind must be one of {ATTENTION_KINDS}, not {kind!r}")
    return config.n_encoder_layers if kind == "encoder" else config.n_decoder_layers


def all_heads(config: TransformerConfig, kinds: Sequence[str] = ATTENTION_KINDS) -> list[HeadRef]:
    """Every head of the given kinds, in kind, layer, head order."""
    return [
        HeadRef(kind, layer, head)
        for kind in kinds
        for layer in range(layer_count(config, kind))
        for head in range(config.n_heads)
    ]


def check_heads(config: TransformerConfig, heads: Sequence[HeadRef]) -> list[HeadRef]:
    """The heads, in order and without repeats; a head this model does not have is refused."""
    checked: list[HeadRef] = []
    for ref in heads:
        if not isinstance(ref, HeadRef):
            raise ValueError(f"heads must be HeadRef values, not {ref!r}")
        if ref.layer >= layer_count(config, ref.kind) or ref.head >= config.n_heads:
            raise ValueError(
                f"{ref.label} is not in this model ({layer_count(config, ref.kind)} {ref.kind} layers, "
                f"{config.n_heads} heads)"
            )
        if ref not in checked:
            checked.append(ref)
    return checked


def _check_mode(mode: str, heads: Sequence[HeadRef], means: HeadMeans | None) -> None:
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
    _check_mode(mode, heads, means)
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
    _check_mode(mode, [ref for heads in rows for ref in heads], means)
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
    beam_size: int = 5,
    max_len: int | None = None,
) -> HeadMeans:
    """Each head's mean output, (heads, d_k) per attention module, over every position of teacher-forced passes.

    Sentence i is forced on ``outputs[i]`` (target ids, BOS left out, as ``Translator.trace``'s
    ``target_ids``), or on its own translation (``beam_size``, ``max_len``) when ``outputs`` is None.
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
            output = translator.trace(text, beam_size, max_len).target_ids[1:]
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


def _outside(length: int, spans: list[tuple[int, int]]) -> list[bool]:
    """Per position of a sequence of ``length``: True when no [start, end) span covers it."""
    outside = [True] * length
    for start, end in spans:
        outside[start:end] = [False] * (end - start)
    return outside


@dataclass
class TokenDiff:
    """Two token sequences aligned by difflib: which tokens of each changed.

    ``opcodes`` are difflib.SequenceMatcher's (tag, i1, i2, j1, j2): tag "equal", "replace",
    "delete" (only in ``original``) or "insert" (only in ``other``).
    """

    original: list[str]
    other: list[str]
    opcodes: list[tuple[str, int, int, int, int]]

    @property
    def identical(self) -> bool:
        return self.original == self.other

    @property
    def original_changed(self) -> list[bool]:
        """Per original token: True when it is not kept in ``other``."""
        return _outside(len(self.original), [(i1, i2) for tag, i1, i2, _, _ in self.opcodes if tag == "equal"])

    @property
    def other_changed(self) -> list[bool]:
        """Per token of ``other``: True when it is new (not kept from ``original``)."""
        return _outside(len(self.other), [(j1, j2) for tag, _, _, j1, j2 in self.opcodes if tag == "equal"])

    def columns(self) -> list[tuple[int | None, int | None]]:
        """Both sequences laid out side by side: (original index, other index) per column, None for a gap.

        Kept tokens share a column; a replaced stretch takes as many columns as its longer side.
        """
        columns: list[tuple[int | None, int | None]] = []
        for _, i1, i2, j1, j2 in self.opcodes:
            for offset in range(max(i2 - i1, j2 - j1)):
                columns.append((i1 + offset if i1 + offset < i2 else None, j1 + offset if j1 + offset < j2 else None))
        return columns


def token_diff(original: Sequence[str], other: Sequence[str]) -> TokenDiff:
    """Align two piece sequences (difflib, no junk heuristic: every token counts)."""
    matcher = difflib.SequenceMatcher(None, list(original), list(other), autojunk=False)
    return TokenDiff(list(original), list(other), [tuple(op) for op in matcher.get_opcodes()])


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
    beam_size: int = 5,
    max_len: int | None = None,
    means: HeadMeans | None = None,
    top_k: int = 5,
) -> AblationComparison:
    """Translate ``text`` as is and with ``heads`` removed; diff the outputs and score the original's tokens.

    ``mode="mean"`` without ``means`` uses each head's mean over this sentence forced on its
    original translation (``mean_head_outputs``).
    """
    heads = check_heads(translator.config, heads)
    original = translator.trace(text, beam_size, max_len, top_k)
    output = original.target_ids[1:]
    if mode == "mean" and means is None:
        means = mean_head_outputs(translator, [text], [output])
    with ablate_heads(translator.model, heads, mode, means):
        ablated = translator.trace(text, beam_size, max_len, top_k)
        forced = translator.trace(text, beam_size, top_k=top_k, target_ids=output)
    record = {"heads": [asdict(ref) for ref in heads], "mode": mode}
    ablated.settings["ablation"] = record
    forced.settings["ablation"] = record
    diff = token_diff(original.predicted_pieces, ablated.predicted_pieces)
    return AblationComparison(heads, mode, original, ablated, forced, diff)


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
    if len(ids) > config.max_len - 1:
        raise ValueError(f"the translation has {len(ids)} tokens; the model reads at most {config.max_len - 1}")
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
    mode: str,
    means: HeadMeans | None,
) -> torch.Tensor:
    """(len(rows),) log-probability of ``gold`` with row r's heads removed; one forward pass."""
    count = len(rows)
    with ablate_heads_by_row(model, rows, mode, means):
        logits = model(src.expand(count, -1), decoder_input.expand(count, -1))  # (N, T, V)
    log_probs = logits.float().log_softmax(dim=-1)
    return log_probs.gather(-1, gold.expand(count, -1)[..., None])[..., 0].sum(dim=-1).cpu()  # (N,)


def head_importance(
    translator: Translator,
    text: str,
    *,
    target_ids: Sequence[int] | None = None,
    kinds: Sequence[str] = ATTENTION_KINDS,
    mode: str = "zero",
    means: HeadMeans | None = None,
    beam_size: int = 5,
    max_len: int | None = None,
    batch_size: int = 64,
) -> HeadImportance:
    """The drop in log-probability of the translation when each head of ``kinds`` alone is removed.

    ``target_ids`` is the output to score (BOS left out, e.g. ``trace.target_ids[1:]``); None
    translates ``text`` with ``beam_size`` and ``max_len`` first. The sentence is repeated once
    per head plus one untouched baseline row and every row loses its own head, so all heads
    cost one teacher-forced pass of ``batch_size`` rows at most (more rows are split into
    passes; on a GPU out-of-memory error the passes are halved, and at one row the whole
    computation moves to the CPU with a notice). Token
    probabilities are the plain softmax of the logits, as ``Trace.step_probs``.
    """
    config = translator.config
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if target_ids is None:
        target_ids = translator.trace(text, beam_size, max_len).target_ids[1:]
    output = _output_ids(translator, target_ids)
    heads = all_heads(config, kinds)
    if mode == "mean" and means is None:
        means = mean_head_outputs(translator, [text], [output])
    _check_mode(mode, heads, means)
    source = translator.source_ids(text).ids
    rows: list[list[HeadRef]] = [[]] + [[ref] for ref in heads]  # row 0: the baseline

    def score_rows(model: Transformer, device: torch.device) -> list[torch.Tensor]:
        src = torch.tensor([source], dtype=torch.long, device=device)  # (1, S)
        decoder_input = torch.tensor([[config.bos_id] + output[:-1]], dtype=torch.long, device=device)  # (1, T)
        gold = torch.tensor([output], dtype=torch.long, device=device)  # (1, T)
        scores: list[torch.Tensor] = []
        start, size = 0, batch_size
        while start < len(rows):
            chunk = rows[start : start + size]
            try:
                scores.append(_row_log_probs(model, src, decoder_input, gold, chunk, mode, means))
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
    full_target = [config.bos_id] + output
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


@contextmanager
def without_positional_encoding(model: Transformer, stacks: Sequence[str] = POSITIONAL_STACKS) -> Iterator[None]:
    """Add a zero positional encoding in ``stacks`` ("encoder", "decoder") inside the block, in this thread only.

    The embeddings then carry no position: encoder self-attention sees the source as a bag of
    pieces, and the decoder tells its steps apart only through the causal mask.
    """
    unknown = [stack for stack in stacks if stack not in POSITIONAL_STACKS]
    if unknown or not stacks:
        raise ValueError(f"stacks must be a non-empty selection of {POSITIONAL_STACKS}, not {tuple(stacks)!r}")
    names = {f"{stack}.positional" for stack in stacks}

    def edit(name: str, kind: str, value: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(value) if kind == "positional" and name in names else value

    with intervene(model, edit):
        yield


def word_order(count: int, seed: int = 0) -> list[int]:
    """A seeded shuffle of range(count): position in the original of each shuffled word.

    It always moves at least one word when there are two or more, so a shuffle is never the
    sentence itself.
    """
    rng = random.Random(seed)
    identity = list(range(count))
    order = identity[:]
    rng.shuffle(order)
    while count > 1 and order == identity:
        rng.shuffle(order)
    return order


def shuffle_source_words(text: str, seed: int = 0) -> str:
    """The whitespace-separated words of ``text`` in a seeded random order (punctuation stays on its word)."""
    words = text.split()
    return " ".join(words[i] for i in word_order(len(words), seed))


@dataclass
class PositionalComparison:
    """A translation beside the same sentence without positional encoding, or with its words shuffled.

    ``modified`` is the experiment's trace: for "no-pe" the same source translated with the
    encoding zeroed in ``stacks`` (its ``positional`` arrays are the zeros that were added);
    for "shuffle" the shuffled sentence (``modified.source_text``), whose word i is the
    original's word ``word_order[i]``. ``diff`` aligns the two outputs.
    """

    experiment: str
    original: Trace
    modified: Trace
    diff: TokenDiff
    stacks: tuple[str, ...]  # "no-pe": where the encoding was removed; "shuffle": empty
    seed: int | None  # "shuffle" only
    word_order: list[int]  # "shuffle" only; empty for "no-pe"

    def attention_pair(self, module_name: str, head: int) -> AttentionPair:
        """One head's attention in the original and in the experiment, aligned where their pieces match."""
        return attention_pair(self.original, self.modified, module_name, head)


def compare_positional(
    translator: Translator,
    text: str,
    experiment: str = "no-pe",
    seed: int = 0,
    beam_size: int = 5,
    max_len: int | None = None,
    stacks: Sequence[str] = POSITIONAL_STACKS,
    top_k: int = 5,
) -> PositionalComparison:
    """Translate ``text`` as is and under a positional experiment: "no-pe" (encoding removed in ``stacks``)
    or "shuffle" (source words in a seeded random order, the model unchanged)."""
    if experiment not in POSITIONAL_EXPERIMENTS:
        raise ValueError(f"experiment must be one of {POSITIONAL_EXPERIMENTS}, not {experiment!r}")
    original = translator.trace(text, beam_size, max_len, top_k)
    if experiment == "no-pe":
        with without_positional_encoding(translator.model, stacks):
            modified = translator.trace(text, beam_size, max_len, top_k)
        removed_from, used_seed, order = tuple(stacks), None, []
        record = {"experiment": experiment, "stacks": list(removed_from)}
    else:
        order = word_order(len(text.split()), seed)
        modified = translator.trace(shuffle_source_words(text, seed), beam_size, max_len, top_k)
        removed_from, used_seed = (), seed
        record = {"experiment": experiment, "seed": seed, "word_order": order}
    modified.settings["positional_experiment"] = record
    diff = token_diff(original.predicted_pieces, modified.predicted_pieces)
    return PositionalComparison(experiment, original, modified, diff, removed_from, used_seed, order)
