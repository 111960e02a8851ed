"""Cached model calls: one model per checkpoint and device for every session, each result computed once.

The model is loaded once per (checkpoint, device) and shared read-only by every session, as long as it fits
the server's memory budget (explorer.open_models, one per server through st.cache_resource); a trace is
computed once per sentence and settings (st.cache_data), so stepping through decoding or switching views
never runs the model again. Every experiment is cached on the page's TraceKey and its own choices, so a
class looking at the same sentence computes it once. Keys are small frozen dataclasses (Streamlit hashes
their fields).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import streamlit as st
from streamlit import runtime

from explorer.open_models import OpenModels, memory_budget_bytes, weight_bytes
from model import load_checkpoint
from model.analysis.ablation import AblationComparison, compare_ablation
from model.analysis.activations import (
    Activations,
    LogitLens,
    UnitExamples,
    logit_lens,
    trace_activations,
    unit_examples,
)
from model.analysis.attribution import Attribution, attribute
from model.analysis.domain import SourceWords
from model.analysis.figure_one import box_numbers
from model.analysis.head_stats import batch_head_statistics, readable_cross_head, trace_head_statistics
from model.analysis.importance import HeadImportance, head_importance
from model.analysis.internals import AttentionStages, attention_stages
from model.analysis.samples import Draw, SampleTable, explain_sampled_trace, sample_again
from model.analysis.word_order import WordOrderComparison, compare_word_order
from model.checkpoint import CheckpointEntry, architecture, read_config, scan_checkpoints
from model.decoding.beam_tree import BeamTree
from model.decoding.languages import NO_LANGUAGES, LanguagePair, using_languages
from model.decoding.sampling import Sampling
from model.decoding.scoring import Scoring
from model.heads import HeadRef
from model.trace import Trace
from model.training.pool import TrainingPool, default_slots
from model.transformer import Transformer
from model.translator import Translator

TRAININGS_ENV = "ATTENTION_EXPLORER_TRAININGS"  # trainings the Train view runs at once on this server
CHECKPOINTS_ENV = "ATTENTION_EXPLORER_CHECKPOINTS"  # read checkpoints from here instead of checkpoints/
REPO = Path(__file__).resolve().parents[1]

Stamp = tuple[tuple[str, float], ...]
Result = TypeVar("Result")


def checkpoints_dir() -> Path:
    """The folder of checkpoint folders the page lists."""
    return Path(os.environ.get(CHECKPOINTS_ENV) or REPO / "checkpoints")


def folder_stamp(folder: Path, pattern: str = "*/*") -> Stamp:
    """Names and modification times of the files under ``folder``: a cache key that changes when a checkpoint does.

    The default pattern reads a folder of checkpoints; ``"*"`` reads one checkpoint folder.
    """
    if not folder.is_dir():
        return ()
    return tuple(sorted((str(path.relative_to(folder)), path.stat().st_mtime) for path in folder.glob(pattern)))


@dataclass(frozen=True)
class ModelKey:
    """One checkpoint folder on one device; ``stamp`` changes when the folder's files do."""

    path: str
    device: str
    stamp: Stamp

    @classmethod
    def of(cls, path: str | Path, device: str) -> ModelKey:
        return cls(str(path), device, folder_stamp(Path(path), "*"))


@dataclass(frozen=True)
class TraceKey:
    """One trace: a sentence through a model with decoding settings, optionally teacher-forced.

    ``target`` is a typed target sentence, ``target_ids`` given output ids (the training-evolution
    view forces every stage onto the same tokens).
    """

    model: ModelKey
    text: str
    beam_size: int
    max_new_tokens: int | None
    target: str | None = None
    target_ids: tuple[int, ...] | None = None
    scoring: Scoring | None = None  # None: our search; else e.g. the model's authors' (model.decoding.authors)
    sampling: Sampling | None = None  # each token drawn instead of searched
    languages: LanguagePair = NO_LANGUAGES  # a many-language model's pair; every call on this key reads it

    def free(self) -> TraceKey:
        """The same sentence and settings, translated by the model itself."""
        return replace(self, target=None, target_ids=None)

    def with_text(self, text: str) -> TraceKey:
        """Another sentence with the same model and decoding settings, translated by the model itself."""
        return replace(self.free(), text=text)


def in_its_languages(compute: Callable[..., Result]) -> Callable[..., Result]:
    """``compute(key, ...)`` run with the key's languages for every call in it (the trace's, and those of the
    analyses that translate again): under st.cache_data, so the cache keys on the languages and runs once."""

    @functools.wraps(compute)
    def in_languages(key: TraceKey, *args: Any, **kwargs: Any) -> Result:
        with using_languages(key.languages):
            return compute(key, *args, **kwargs)

    return in_languages


@st.cache_data(show_spinner="Checking checkpoint folders…")
def list_checkpoints(folder: str, stamp: Stamp) -> list[CheckpointEntry]:
    """Every sub-folder, checked as loading it would (model.checkpoint.scan_checkpoints); ``stamp`` only keys the
    cache."""
    return scan_checkpoints(folder)


@st.cache_resource(show_spinner=False)
def open_models() -> OpenModels[Translator]:
    """The server's open models, one per (checkpoint, device), within ATTENTION_EXPLORER_MODEL_MEMORY_MB."""
    return OpenModels(
        memory_budget_bytes(),
        load=lambda key: load_checkpoint(key.path, device=key.device),
        size=lambda translator: weight_bytes(translator.model),
        estimate=lambda key: weight_bytes(meta_model(key.path)),
    )


def meta_model(folder: str) -> Transformer:
    """The checkpoint's architecture with no weights (model.checkpoint.architecture): its size, known before it is
    loaded."""
    return architecture(read_config(Path(folder)))


def load_translator(key: ModelKey) -> Translator:
    """The model of (checkpoint, device), shared read-only by every session; loaded when it is not open, closing the
    least recently used others when the memory budget needs it."""
    return open_models().get(key)


@st.cache_resource(show_spinner=False, max_entries=8)
def source_words(key: ModelKey) -> SourceWords | None:
    """The checkpoint's training word counts (source_words.json), shared read-only; None when it has none."""
    return SourceWords.load(key.path)


@st.cache_data(show_spinner="Translating…", max_entries=256)
@in_its_languages
def compute_trace(key: TraceKey) -> Trace:
    return load_translator(key.model).trace(
        key.text,
        beam_size=key.beam_size,
        max_new_tokens=key.max_new_tokens,
        target=key.target,
        target_ids=None if key.target_ids is None else list(key.target_ids),
        scoring=key.scoring,
        sampling=key.sampling,
    )


@st.cache_data(show_spinner=False, max_entries=256)
@in_its_languages
def compute_draws(key: TraceKey) -> list[Draw]:
    """How each token of the page's sampled trace was drawn (model.analysis.samples.explain_sampled_trace)."""
    return explain_sampled_trace(load_translator(key.model), compute_trace(key))


@st.cache_data(show_spinner="Sampling…", max_entries=64)
@in_its_languages
def compute_samples(key: TraceKey, draws: int) -> SampleTable:
    """The page's sentence sampled ``draws`` times with its sampling settings, beside greedy and beam search."""
    if key.sampling is None:
        raise ValueError("the page is not sampling")
    return sample_again(
        load_translator(key.model),
        key.text,
        key.sampling,
        draws,
        max_new_tokens=key.max_new_tokens,
        scoring=key.scoring,
    )


@st.cache_data(show_spinner="Decoding the what-if…", max_entries=256)
@in_its_languages
def compute_fork(key: TraceKey, step: int, token: int | str) -> Trace:
    """The page's trace forked at ``step`` with ``token`` (an id from its top-k, or a typed word)."""
    return load_translator(key.model).fork(compute_trace(key), step, token)


@st.cache_data(show_spinner="Searching…", max_entries=64)
@in_its_languages
def compute_beam_tree(key: TraceKey, beam_size: int) -> BeamTree:
    return load_translator(key.model).beam_tree(key.text, beam_size, key.max_new_tokens, scoring=key.scoring)


@st.cache_data(show_spinner="Reading the beam…", max_entries=256)
@in_its_languages
def compute_beam_node_trace(key: TraceKey, beam_size: int, node_id: int) -> Trace:
    return load_translator(key.model).beam_node_trace(compute_beam_tree(key, beam_size), node_id)


@st.cache_data(show_spinner="Opening the head…", max_entries=256)
@in_its_languages
def compute_stages(key: TraceKey, module_name: str, head: int, step: int) -> AttentionStages:
    return attention_stages(load_translator(key.model), compute_trace(key), module_name, head, step)


@st.cache_data(show_spinner="Attributing…", max_entries=256)
@in_its_languages
def compute_attribution(key: TraceKey, method: str) -> Attribution:
    return attribute(load_translator(key.model), compute_trace(key), method)


@st.cache_data(show_spinner=False, max_entries=16)
@in_its_languages
def compute_activations(key: TraceKey) -> Activations:
    """Every box of Figure 1 for the page's trace (model.analysis.activations.trace_activations), for the views of the
    boxes. Few are kept: one holds every hook point of the sentence (megabytes for a model of opus-mt's size)."""
    return trace_activations(load_translator(key.model), compute_trace(key))


@st.cache_data(show_spinner=False, max_entries=256)
@in_its_languages
def compute_box_numbers(key: TraceKey) -> dict[str, list[float]]:
    """The map's live number of each box for the page's trace (model.analysis.figure_one.box_numbers). Read off an
    uncached pass: the map is drawn for every sentence typed, and only its numbers are kept."""
    translator = load_translator(key.model)
    trace = compute_trace(key)
    return box_numbers(translator.model.config, trace, trace_activations(translator, trace))


@st.cache_data(show_spinner="Reading each layer…", max_entries=64)
@in_its_languages
def compute_lens(key: TraceKey) -> LogitLens:
    return logit_lens(load_translator(key.model), compute_trace(key))


@st.cache_data(show_spinner="Running the examples…", max_entries=32)
def compute_unit_examples(key: ModelKey, sentences: tuple[str, ...], stack: str, layer: int) -> UnitExamples:
    """One layer's feed-forward units over the checkpoint's example sentences."""
    return unit_examples(load_translator(key), sentences, stack, layer)


@st.cache_data(max_entries=256)
@in_its_languages
def trace_statistics(key: TraceKey) -> list[dict[str, Any]]:
    """Every head's statistics over the page's trace (what the attention views show)."""
    return trace_head_statistics(compute_trace(key))


@st.cache_data(show_spinner=False, max_entries=4096)
@in_its_languages
def sentence_statistics(key: TraceKey) -> list[dict[str, Any]]:
    """One sentence of an uploaded file: its statistics table (small), cached per sentence."""
    translator = load_translator(key.model)
    return batch_head_statistics(
        translator,
        [key.text],
        beam_size=key.beam_size,
        max_new_tokens=key.max_new_tokens,
        scoring=key.scoring,
        sampling=key.sampling,
    )


@st.cache_data(show_spinner="Finding a readable head…", max_entries=64)
def readable_head(key: ModelKey, examples: tuple[str, ...]) -> tuple[int, int]:
    """The cross-attention (layer, head) that reads most like a word alignment over ``examples`` (greedy):
    model.analysis.head_stats.readable_cross_head, computed once per checkpoint and examples."""
    return readable_cross_head(batch_head_statistics(load_translator(key), examples, beam_size=1))


@st.cache_data(show_spinner="Switching heads off…", max_entries=256)
@in_its_languages
def compute_ablation(key: TraceKey, heads: tuple[HeadRef, ...], mode: str) -> AblationComparison:
    translator = load_translator(key.model)
    return compare_ablation(
        translator,
        key.text,
        list(heads),
        mode,
        key.beam_size,
        key.max_new_tokens,
        scoring=key.scoring,
        sampling=key.sampling,
    )


@st.cache_data(show_spinner="Ranking the heads…", max_entries=256)
@in_its_languages
def compute_importance(key: TraceKey, mode: str) -> HeadImportance:
    """Every head's importance for the model's own translation (the cached free trace: no second translation)."""
    own = compute_trace(key.free())
    return head_importance(load_translator(key.model), key.text, target_ids=own.target_ids[1:], mode=mode)


@st.cache_data(show_spinner="Translating without word order…", max_entries=256)
@in_its_languages
def compute_word_order(key: TraceKey, experiment: str, stacks: tuple[str, ...], seed: int) -> WordOrderComparison:
    translator = load_translator(key.model)
    return compare_word_order(
        translator,
        key.text,
        experiment,
        seed=seed,
        beam_size=key.beam_size,
        max_new_tokens=key.max_new_tokens,
        stacks=stacks,
        scoring=key.scoring,
        sampling=key.sampling,
    )


def trained_folder(owner: str) -> Path:
    """Where a session keeps the models it trained and opened in the other views (gone with the session)."""
    return Path(tempfile.gettempdir()) / "attention-explorer-trained" / owner.replace("/", "-")


def session_alive(owner: str) -> bool:
    """Whether the browser session of a training's owner ("session id/random", explorer.views.train.owner) is still
    connected; always True outside a Streamlit server (tests, scripts)."""
    return not runtime.exists() or runtime.get_instance().is_active_session(owner.split("/")[0])


def forget_session(owner: str) -> None:
    shutil.rmtree(trained_folder(owner), ignore_errors=True)


@st.cache_resource(show_spinner=False)
def training_pool() -> TrainingPool:
    """The server's toy trainings: at most ATTENTION_EXPLORER_TRAININGS at once (default: one per core but one),
    each in its own process; a session's training ends soon after the session does."""
    raw = os.environ.get(TRAININGS_ENV, "").strip()
    if raw and not (raw.isdigit() and int(raw) >= 1):
        raise ValueError(f"{TRAININGS_ENV} must be a whole number of trainings at once, 1 or more, not {raw!r}")
    return TrainingPool(int(raw) if raw else default_slots(), alive=session_alive, on_gone=forget_session)
