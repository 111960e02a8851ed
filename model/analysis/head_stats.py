"""Head statistics: what each attention head does, as numbers one can sort and compare.

``head_statistics`` computes every statistic in STATISTICS (STATISTIC_DESCRIPTIONS says each in a line) for every
head of one attention module, each a mean over the real query rows (padding dropped, rows renormalised).
``trace_head_statistics`` makes one trace's table, ``batch_head_statistics`` averages the tables of many sentences
(each weighted by its query rows), and ``readable_cross_head`` picks the cross-attention head to show first.

Theory and references: docs/head-statistics.md
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from model.decoding.sampling import Sampling
from model.decoding.scoring import Scoring
from model.decoding.search import DEFAULT_BEAM_SIZE
from model.heads import ATTENTION_KINDS, KIND_LABELS, module_kind
from model.tokenizer import WORD_START
from model.trace import Trace

if TYPE_CHECKING:
    from model.translator import Translator

STATISTICS = ("entropy", "distance", "same", "previous", "next", "bos", "eos", "punctuation", "diagonality")
STATISTIC_DESCRIPTIONS = {
    "entropy": "entropy of each query's attention, in bits (0: one key; log2(keys): uniform)",
    "distance": "mean distance in tokens from the attended key to the query's position (cross: to the diagonal)",
    "same": "share on the query's own position (cross: the source piece on the length-scaled diagonal)",
    "previous": "share on the token just before the query's position (cross: before the diagonal)",
    "next": "share on the token just after the query's position (cross: after the diagonal); 0 when causal",
    "bos": "share on <s>",
    "eos": "share on </s>",
    "punctuation": "share on punctuation pieces",
    "diagonality": "share within one token (the default band) of the length-scaled diagonal: alignment-like",
}
# Statistics that are attention mass, so lie in [0, 1]; entropy and distance are not bounded by 1.
SHARE_STATISTICS = ("same", "previous", "next", "bos", "eos", "punctuation", "diagonality")

DIAGONAL_BAND = 1.0


@dataclass(frozen=True)
class SpecialPieces:
    """The pieces of the special tokens, as the tokenizer spells them."""

    pad: str = "<pad>"
    bos: str = "<s>"
    eos: str = "</s>"

    @classmethod
    def of_trace(cls, trace: Trace) -> SpecialPieces:
        """The trace's own spelling (model_info["special_pieces"] is pad, unk, bos, eos), else the defaults."""
        special = trace.model_info.get("special_pieces")
        if not special:
            return cls()
        pad, _unk, bos, eos = special
        return cls(pad=pad, bos=bos, eos=eos)


def is_punctuation(piece: str) -> bool:
    """True for a piece made only of punctuation characters, ignoring SentencePiece's word-start mark."""
    text = piece.replace(WORD_START, "")
    return bool(text) and all(unicodedata.category(char).startswith("P") for char in text)


def module_axes(trace: Trace, name: str) -> tuple[list[str], list[str]]:
    """Query and key pieces of a module's attention in ``trace``.

    Encoder: source pieces (</s> last) both ways. Decoder: the decoder inputs (<s> first, the
    last output token left out) as queries, and as keys for self-attention; cross-attention
    keys are the source pieces.
    """
    kind = module_kind(name)
    queries = trace.source_pieces if kind == "encoder_self" else trace.decoder_input_pieces
    keys = trace.decoder_input_pieces if kind == "decoder_self" else trace.source_pieces
    return list(queries), list(keys)


def _real_attention(
    weights: np.ndarray, query_pieces: Sequence[str], key_pieces: Sequence[str], pad: str
) -> tuple[np.ndarray, list[int], list[int]]:
    """Padding rows and columns dropped, rows renormalised: (heads, real queries, real keys) and the kept positions."""
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 3 or weights.shape[1:] != (len(query_pieces), len(key_pieces)):
        raise ValueError(
            f"weights must be (heads, {len(query_pieces)} queries, {len(key_pieces)} keys), got {weights.shape}"
        )
    queries = [i for i, piece in enumerate(query_pieces) if piece != pad]
    keys = [j for j, piece in enumerate(key_pieces) if piece != pad]
    if not queries or not keys:
        raise ValueError("no real tokens: every query or every key is padding")
    real = weights[:, queries][:, :, keys]  # (H, Q, K)
    totals = real.sum(axis=-1, keepdims=True)  # (H, Q, 1)
    if np.any(totals <= 0):
        raise ValueError("a query row gives no weight to any real (non-padding) key")
    return real / totals, queries, keys


def head_statistics(
    weights: np.ndarray,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    special: SpecialPieces | None = None,
    band: float = DIAGONAL_BAND,
) -> dict[str, np.ndarray]:
    """Every statistic of every head of one module: ``weights`` (heads, queries, keys) -> {statistic: (heads,)}.

    The pieces label the axes (they find padding, <s>, </s> and punctuation). Definitions:
    STATISTIC_DESCRIPTIONS and docs/head-statistics.md; positions are counted from the diagonal
    d(i) = i * (K - 1) / (Q - 1) (0 when Q = 1; d(i) = i for self-attention), and ``band`` is the
    half-width of the diagonal band for ``diagonality``, in key tokens. The result also holds
    ``queries``: the number of real query rows the means are over.
    """
    special = special or SpecialPieces()
    attention, queries, keys = _real_attention(weights, query_pieces, key_pieces, special.pad)
    n_heads, n_queries, n_keys = attention.shape
    key_positions = np.arange(n_keys)
    scale = (n_keys - 1) / (n_queries - 1) if n_queries > 1 else 0.0
    diagonal = np.arange(n_queries) * scale  # (Q,) d(i)
    nearest = np.floor(diagonal + 0.5).astype(int)  # (Q,) c(i)
    offset = key_positions[None, :] - diagonal[:, None]  # (Q, K) j - d(i)
    step = key_positions[None, :] - nearest[:, None]  # (Q, K) j - c(i)
    real_keys = [key_pieces[j] for j in keys]
    masks = {  # (Q, K) or (K,): which keys each share counts
        "same": step == 0,
        "previous": step == -1,
        "next": step == 1,
        "bos": np.array([piece == special.bos for piece in real_keys]),
        "eos": np.array([piece == special.eos for piece in real_keys]),
        "punctuation": np.array([is_punctuation(piece) for piece in real_keys]),
        "diagonality": np.abs(offset) <= band + 1e-9,  # tolerance: d(i) is a float
    }
    logs = np.log2(attention, out=np.zeros_like(attention), where=attention > 0)  # 0 log 0 = 0
    per_row = {  # (H, Q)
        "entropy": -(attention * logs).sum(axis=-1),
        "distance": (attention * np.abs(offset)).sum(axis=-1),
        **{name: (attention * mask).sum(axis=-1) for name, mask in masks.items()},
    }
    result = {name: per_row[name].mean(axis=-1) for name in STATISTICS}
    result["queries"] = np.full(n_heads, len(queries))
    return result


def trace_head_statistics(trace: Trace, *, band: float = DIAGONAL_BAND) -> list[dict[str, Any]]:
    """The statistics table of one Trace: one row per (kind, layer, head).

    Each row: ``kind`` (the kind's label in model.heads.KIND_LABELS: "encoder self", "decoder
    self", "cross"), ``layer``, ``head``, ``module``, every statistic in STATISTICS,
    ``queries`` (query rows counted) and ``sentences`` (1), ready for viz.head_stats or a DataFrame.
    """
    special = SpecialPieces.of_trace(trace)
    rows = []
    for kind in ATTENTION_KINDS:
        for layer, name in enumerate(trace.attention_names(kind)):
            query_pieces, key_pieces = module_axes(trace, name)
            stats = head_statistics(trace.attention[name], query_pieces, key_pieces, special=special, band=band)
            for head in range(len(stats["queries"])):
                row: dict[str, Any] = {"kind": KIND_LABELS[kind], "layer": layer, "head": head, "module": name}
                row.update({statistic: float(stats[statistic][head]) for statistic in STATISTICS})
                row["queries"] = int(stats["queries"][head])
                row["sentences"] = 1
                rows.append(row)
    return rows


def mean_head_statistics(tables: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Many tables (one per sentence) -> one: each statistic averaged, weighted by each table's query rows.

    Weighting by query rows makes the result the statistic over all query rows pooled, so a
    long sentence counts as much as its rows. ``queries`` and ``sentences`` are summed.
    """
    if not tables:
        raise ValueError("no tables to average")
    keys = [(row["kind"], row["layer"], row["head"]) for row in tables[0]]
    for table in tables[1:]:
        if [(row["kind"], row["layer"], row["head"]) for row in table] != keys:
            raise ValueError("tables come from models with different layers or heads")
    result = []
    for rows in zip(*tables, strict=True):
        weights = np.array([row["queries"] for row in rows], dtype=np.float64)
        merged = {name: rows[0][name] for name in ("kind", "layer", "head", "module")}
        for statistic in STATISTICS:
            merged[statistic] = float(np.average([row[statistic] for row in rows], weights=weights))
        merged["queries"] = int(weights.sum())
        merged["sentences"] = sum(row["sentences"] for row in rows)
        result.append(merged)
    return result


def sentences_from_text(text: str | bytes, source: str = "the text") -> list[str]:
    """One sentence per line, stripped, blank lines skipped; ValueError naming ``source`` when none is left.

    Bytes (e.g. an uploaded file) are read as UTF-8, undecodable bytes replaced.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    sentences = [line.strip() for line in text.splitlines() if line.strip()]
    if not sentences:
        raise ValueError(f"{source} has no sentences: it is empty or has only blank lines (one sentence per line)")
    return sentences


def read_sentences(path: str | Path) -> list[str]:
    """The sentences of a UTF-8 text file, one per line (see sentences_from_text)."""
    return sentences_from_text(Path(path).read_bytes(), source=str(path))


def batch_head_statistics(
    translator: Translator,
    sentences: Iterable[str],
    *,
    beam_size: int = DEFAULT_BEAM_SIZE,
    max_new_tokens: int | None = None,
    band: float = DIAGONAL_BAND,
    progress: Callable[[int, int], None] | None = None,
    scoring: Scoring | None = None,
    sampling: Sampling | None = None,
) -> list[dict[str, Any]]:
    """The statistics table over many sentences: each is translated and traced, then tables are averaged.

    Blank sentences are skipped (ValueError when none is left). The translation is the model's
    own (``beam_size``, ``max_new_tokens``, ``scoring``, ``sampling`` as in Translator.trace).
    ``progress(done, total)`` is called after each sentence. Averaging: see mean_head_statistics.
    """
    texts = [text.strip() for text in sentences if text.strip()]
    if not texts:
        raise ValueError("no sentences: give at least one non-blank sentence")
    tables = []
    for done, text in enumerate(texts, start=1):
        trace = translator.trace(
            text, beam_size=beam_size, max_new_tokens=max_new_tokens, scoring=scoring, sampling=sampling
        )
        tables.append(trace_head_statistics(trace, band=band))
        if progress is not None:
            progress(done, len(texts))
    return mean_head_statistics(tables)


def readable_cross_head(table: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """The (layer, head) of the cross-attention head that reads most like a word alignment: a first head to show.

    Highest ``diagonality`` (weight within one piece of the length-scaled diagonal), compared at
    two decimals so that near-ties go to the more focused head: the lower ``entropy``, then the
    later layer.
    """
    cross = [row for row in table if row["kind"] == KIND_LABELS["cross"]]
    if not cross:
        raise ValueError("the table has no cross-attention heads")
    best = max(cross, key=lambda row: (round(row["diagonality"], 2), -row["entropy"], row["layer"]))
    return int(best["layer"]), int(best["head"])
