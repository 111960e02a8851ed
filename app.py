"""Attention explorer: a Streamlit page over the scratch Transformer's captured attention.

Wiring only: widgets -> model (load_checkpoint, Translator.trace) -> viz figure builders ->
page. The model is loaded once per (checkpoint, device) and shared by every session; a
trace is computed once per (checkpoint, device, sentence, settings) and cached, so stepping
through decoding or switching views never runs the model again. Only the view on screen
builds its figures.

The page's state lives in the URL (URL_KEYS), so a link opens exactly the view it was copied
from: on a page's first run and on the browser's Back/Forward the URL sets the widgets
(``remember``), on every other run the widgets set the URL (``write_url``, which adds a
browser history entry). A view is a small function of the page context, listed in VIEWS.

Run with ``streamlit run app.py``; set ATTENTION_EXPLORER_CHECKPOINTS to read checkpoint
folders from somewhere other than checkpoints/ next to this file.
"""

from __future__ import annotations

import os

# Sessions run in parallel threads, so each request runs its tensor operations on one CPU thread:
# several intra-op threads per request oversubscribe a classroom server's cores
# (benchmarks/README.md). Set before torch is first imported; OMP_NUM_THREADS from the
# environment wins. Calling torch.set_num_threads at run time instead would only change the
# calling thread's OpenMP pool and make results differ in the last bits between threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")
import html
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial, wraps
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

import viz
from model import load_checkpoint
from model.admission import shared_gate
from model.checkpoint import CheckpointEntry, CheckpointError, find_snapshots, read_card, scan_checkpoints
from model.decoding import BeamTree
from model.head_stats import (
    STATISTICS,
    batch_head_statistics,
    mean_head_statistics,
    sentences_from_text,
    trace_head_statistics,
)
from model.internals import AttentionStages
from model.interventions import (
    ABLATION_MODES,
    KIND_LABELS,
    POSITIONAL_STACKS,
    AblationComparison,
    HeadImportance,
    HeadRef,
    PositionalComparison,
    all_heads,
    compare_ablation,
    compare_positional,
    head_importance,
)
from model.pairs import attention_pair
from model.trace import Trace
from model.translator import Translator
from viz.export import LessonSection, lesson_html
from viz.head_stats import STATISTIC_LABELS
from viz.interventions import EXPERIMENT_LABELS
from viz.quiz import Guess, StepTruth, piece_text, score_step, step_truth, total_score
from viz.text import (
    CAVEAT,
    EXPLANATIONS,
    card_examples,
    describe_card,
    escape_markdown,
    example_pairs,
    file_cap_notice,
    no_snapshots,
    pieces_markdown,
    stage_label,
)

CHECKPOINTS_ENV = "ATTENTION_EXPLORER_CHECKPOINTS"
DEFAULT_CHECKPOINT = "multi30k-en-de"
DEVICES = {"auto": "Auto", "cpu": "CPU", "cuda": "CUDA"}
ATTENTION_VIEWS = {
    "encoder": "Encoder self-attention",
    "decoder": "Decoder self-attention",
    "cross": "Cross-attention",
}
DISPLAYS = {"single": "Single head", "grid": "All heads", "heads": "Head view", "aggregates": "Aggregates"}
DISPLAY_TOGGLES = {"merge_words": False, "show_special": True, "annotate": False}  # key -> default
ALL_QUERIES = -1  # head view: draw the lines of every query token
AVERAGE_HEADS = -1  # quiz: the mean over the layer's heads decides where the model looks
BOOLEANS = [False, True]
# Session keys that are also URL parameters, in the order they appear in the URL.
URL_KEYS = (
    "checkpoint",
    "sentence",
    "view",
    "display",
    "layer",
    "head",
    "step",
    "step_layer",
    "quiz_head",
    "evolution_kind",
    "experiment",
    "module_kind",
    "query_row",
    "fork_step",
    "fork_token",
    "fork_word",
    "beam_node",
    "show_pruned",
    "statistic",
    "stats_source",
    "pair_sentence",
    "ablate",
    "ablation_mode",
    "pe_experiment",
    "pe_stacks",
    "pe_seed",
    "presenter",
    "device",
    "decoding",
    "beam_size",
    "max_len",
    "merge_words",
    "show_special",
    "annotate",
    "teacher_forcing",
    "target",
)
STATS_SOURCES = {"sentence": "This sentence", "file": "A file of sentences"}
PE_EXPERIMENTS = {"no-pe": "Remove the positional encoding", "shuffle": "Shuffle the source words"}
ABLATION_LABELS = {"zero": "zeros", "mean": "its mean output"}
# A shared classroom server computes an uploaded file's sentences one by one; more would hold it up.
MAX_FILE_SENTENCES = 100
TOP_HEADS = 3  # the importance view's "switch off the most important heads" button
# Presenter mode: larger text everywhere (Streamlit sizes text in rem) and the full width for the view.
# The header stays: it holds the button that opens a collapsed sidebar. A constant: no user text
# ever reaches st.html.
PRESENTER_CSS = """<style>
html { font-size: 22px; }
[data-testid="stMainBlockContainer"] { padding: 1rem 2rem; max-width: none; }
[data-testid="stMarkdownContainer"] h3 { font-size: 2.2rem; }
</style>"""


def checkpoints_dir() -> Path:
    return Path(os.environ.get(CHECKPOINTS_ENV) or Path(__file__).resolve().parent / "checkpoints")


def folder_stamp(folder: Path, pattern: str = "*/*") -> tuple[tuple[str, float], ...]:
    """Names and modification times of the files under ``folder``: a cache key that changes when a checkpoint does.

    The default pattern reads a folder of checkpoints; ``"*"`` reads one checkpoint folder.
    """
    if not folder.is_dir():
        return ()
    return tuple(sorted((str(path.relative_to(folder)), path.stat().st_mtime) for path in folder.glob(pattern)))


def checkpoint_stamp(folder: str | Path) -> tuple[tuple[str, float], ...]:
    return folder_stamp(Path(folder), "*")


@st.cache_data(show_spinner="Checking checkpoint folders…")
def list_checkpoints(folder: str, stamp: tuple[tuple[str, float], ...]) -> list[CheckpointEntry]:
    """Every sub-folder, validated fully (model.checkpoint.scan_checkpoints); ``stamp`` only keys the cache."""
    return scan_checkpoints(folder)


@st.cache_resource(show_spinner="Loading the model…", max_entries=8)
def load_translator(path: str, device: str, stamp: tuple[tuple[str, float], ...]) -> Translator:
    """One model per (checkpoint, device), shared read-only by every session; ``stamp`` only keys the cache.

    Room for a few checkpoints with their training snapshots (the training-evolution view).
    """
    return load_checkpoint(path, device=device)


@st.cache_data(show_spinner="Translating…", max_entries=256)
def compute_trace(
    path: str,
    device: str,
    stamp: tuple[tuple[str, float], ...],
    text: str,
    beam_size: int,
    max_len: int | None,
    target: str | None,
    target_ids: tuple[int, ...] | None = None,
) -> Trace:
    translator = load_translator(path, device, stamp)
    return translator.trace(
        text,
        beam_size=beam_size,
        max_len=max_len,
        target=target,
        target_ids=None if target_ids is None else list(target_ids),
    )


# Experiments: each is cached on the page's trace key (checkpoint, device, stamp, sentence, decoding settings)
# and its own choices, so a class that looks at the same sentence computes it once.
TraceKey = tuple[str, str, tuple[tuple[str, float], ...], str, int, int | None, str | None]


@st.cache_data(show_spinner="Decoding the what-if…", max_entries=256)
def compute_fork(key: TraceKey, step: int, token: int | str) -> Trace:
    """The page's trace forked at ``step`` with ``token`` (an id from its top-k, or a typed word)."""
    return load_translator(*key[:3]).fork(compute_trace(*key), step, token)


@st.cache_data(show_spinner="Searching…", max_entries=64)
def compute_beam_tree(key: TraceKey, beam_size: int) -> BeamTree:
    path, device, stamp, text, _, max_len, _ = key
    return load_translator(path, device, stamp).beam_tree(text, beam_size=beam_size, max_len=max_len)


@st.cache_data(show_spinner="Reading the beam…", max_entries=256)
def compute_beam_node_trace(key: TraceKey, beam_size: int, node_id: int) -> Trace:
    return load_translator(*key[:3]).beam_node_trace(compute_beam_tree(key, beam_size), node_id)


@st.cache_data(show_spinner="Opening the head…", max_entries=256)
def compute_stages(key: TraceKey, module_name: str, head: int, step: int) -> AttentionStages:
    return load_translator(*key[:3]).attention_stages(compute_trace(*key), module_name, head, step)


@st.cache_data(max_entries=256)
def trace_statistics(key: TraceKey) -> list[dict[str, Any]]:
    """Every head's statistics over the page's trace (what the attention views show)."""
    return trace_head_statistics(compute_trace(*key))


@st.cache_data(show_spinner=False, max_entries=4096)
def sentence_statistics(
    path: str, device: str, stamp: tuple[tuple[str, float], ...], text: str, beam_size: int, max_len: int | None
) -> list[dict[str, Any]]:
    """One sentence of an uploaded file: its statistics table (small), cached per sentence."""
    translator = load_translator(path, device, stamp)
    return batch_head_statistics(translator, [text], beam_size=beam_size, max_len=max_len)


@st.cache_data(show_spinner="Switching heads off…", max_entries=256)
def compute_ablation(key: TraceKey, heads: tuple[HeadRef, ...], mode: str) -> AblationComparison:
    path, device, stamp, text, beam_size, max_len, _ = key
    translator = load_translator(path, device, stamp)
    return compare_ablation(translator, text, list(heads), mode=mode, beam_size=beam_size, max_len=max_len)


@st.cache_data(show_spinner="Ranking the heads…", max_entries=256)
def compute_importance(key: TraceKey, mode: str) -> HeadImportance:
    """Every head's importance for the model's own translation (the cached free trace: no second translation)."""
    path, device, stamp, text, beam_size, max_len, _ = key
    own = compute_trace(path, device, stamp, text, beam_size, max_len, None)
    translator = load_translator(path, device, stamp)
    return head_importance(translator, text, target_ids=own.target_ids[1:], mode=mode)


@st.cache_data(show_spinner="Translating without word order…", max_entries=256)
def compute_positional(key: TraceKey, experiment: str, stacks: tuple[str, ...], seed: int) -> PositionalComparison:
    path, device, stamp, text, beam_size, max_len, _ = key
    translator = load_translator(path, device, stamp)
    return compare_positional(
        translator, text, experiment, seed=seed, beam_size=beam_size, max_len=max_len, stacks=stacks
    )


# --- state: widgets <-> URL ---


def url_text(value: Any) -> str:
    """A value as the URL writes it: booleans as true/false, a list (multi-select) comma-separated, else str()."""
    if isinstance(value, list):
        return ",".join(url_text(item) for item in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def valid(value: Any, options: list[Any] | None) -> bool:
    """Whether a widget value is one of ``options`` (each item of it, for a multi-select); None: any text."""
    if options is None:
        return True
    if isinstance(value, list):
        return all(item in options for item in value)
    return value in options


def from_url(raw: str, default: Any, options: list[Any] | None) -> Any:
    """A URL value as the widget value it writes (url_text), the default when it is not valid.

    A multi-select (a list default) keeps the valid items, in the URL's order.
    """
    if options is None:
        return raw
    if isinstance(default, list):
        by_text = {url_text(option): option for option in options}
        return list(dict.fromkeys(by_text[part] for part in raw.split(",") if part in by_text))
    return next((option for option in options if url_text(option) == raw), default)


def read_url() -> None:
    """Decide whether this run takes its state from the URL: on the page's first run and on Back/Forward.

    On those runs every URL key is set from the URL (``remember``), and a key the URL leaves out
    goes back to its default. On every other run the widgets are the truth and the URL follows.
    """
    context = get_script_run_ctx()
    first_run = "url_defaults" not in st.session_state
    # Streamlit marks the runs that the browser's Back and Forward start (the flag its own
    # query-bound widgets use; not public API, hence getattr).
    if not first_run and not getattr(context, "is_history_navigation", False):
        st.session_state.url_request = None
        return
    url = st.query_params.to_dict()
    st.session_state.url_request = url
    st.session_state.setdefault("url_defaults", {})
    for key in URL_KEYS:
        if key not in url:
            st.session_state.pop(key, None)


def remember(key: str, default: Any, options: list[Any] | None = None) -> None:
    """Give a widget its value before it is drawn, from the URL when this run reads it, else keep it valid.

    Widgets get their values only through st.session_state (never a ``value=`` argument as
    well), so a value set here, by a callback or from the URL never conflicts with a default.
    ``options`` lists the valid values (a URL value must be one of them, by its url_text);
    None means any text. A list default marks a multi-select, whose value is a list of options.
    The default is recorded so that the URL can leave it out.
    """
    st.session_state.url_defaults[key] = default
    requested = st.session_state.get("url_request")
    if requested is not None and key in URL_KEYS:
        raw = requested.get(key)
        st.session_state[key] = default if raw is None else from_url(raw, default, options)
    elif key not in st.session_state or not valid(st.session_state[key], options):
        st.session_state[key] = default


def write_url() -> None:
    """Put every URL key whose value is not its default into the URL.

    Streamlit adds a browser history entry when a run changes the URL, so Back returns to the
    state before; a run that restores from the URL leaves it as it is.
    """
    defaults = st.session_state.url_defaults
    wanted = {
        key: url_text(st.session_state[key])
        for key in URL_KEYS
        if key in defaults and key in st.session_state and st.session_state[key] != defaults[key]
    }
    if wanted != st.query_params.to_dict():
        st.query_params.from_dict(wanted)
    st.session_state.url_request = None


def write_url_after_fragment() -> None:
    """A fragment's own rerun (not its part of a full run) writes the URL it changed, e.g. the step."""
    if not st.session_state.full_run:
        write_url()


def presenting() -> bool:
    return bool(st.session_state.get("presenter"))


# --- callbacks (they run before the next script run, so they may set widget values) ---


def use_example() -> None:
    """Copy the picked example into the sentence box and clear the picker, which acts as a menu."""
    if st.session_state.example:
        st.session_state.sentence = st.session_state.example
        st.session_state.example = None


def use_example_pair(pairs: list[tuple[str, str]]) -> None:
    """Copy the picked pair into the sentence box and the second sentence's box; the picker acts as a menu."""
    if st.session_state.pair_example is not None:
        st.session_state.sentence, st.session_state.pair_sentence = pairs[st.session_state.pair_example]
        st.session_state.pair_example = None


def set_ablated(keys: list[str]) -> None:
    st.session_state.ablate = keys


def prefill_target() -> None:
    """Start teacher forcing from the model's own translation, for the user to edit."""
    if st.session_state.teacher_forcing and not st.session_state.get("target"):
        st.session_state.target = st.session_state.get("translation", "")


def move_step(delta: int, n_steps: int) -> None:
    st.session_state.step = min(max(st.session_state.get("step", 0) + delta, 0), n_steps - 1)


def go_to_step(step: int) -> None:
    st.session_state.step = step


def reveal(step: int) -> None:
    """Record the quiz guesses made at ``step``; the page then shows the truth and the score."""
    guess = Guess(where=st.session_state.get(f"quiz_where_{step}"), what=st.session_state.get(f"quiz_what_{step}"))
    st.session_state.quiz["answers"][step] = guess


def restart_quiz() -> None:
    st.session_state.quiz["answers"] = {}
    st.session_state.step = 0
    for key in [key for key in st.session_state if key.startswith(("quiz_where_", "quiz_what_"))]:
        del st.session_state[key]


# --- building blocks of the views ---


def show_figure(figure: go.Figure, name: str, lesson: list[LessonSection] | None = None, explanation: str = "") -> None:
    """A chart whose toolbar camera button downloads it as ``name``.png, enlarged in presenter mode.

    With ``lesson``, the chart (at normal size) and ``explanation`` also go into the lesson export.
    """
    shown = viz.enlarge(figure) if presenting() else figure
    st.plotly_chart(shown, theme=None, config=viz.chart_config(name), key=f"chart-{name}")
    if lesson is not None:
        lesson.append(LessonSection(html.unescape(figure.layout.title.text or name), explanation, figure))


def how_to_read(*topics: str, caveat: bool = True) -> str:
    """The view's "How to read this" panel (open on a normal page, folded in presenter mode); returns its text."""
    text = "\n\n".join(EXPLANATIONS[topic] for topic in topics)
    with st.expander("How to read this", expanded=not presenting(), icon=":material/school:"):
        st.markdown(text)
        if caveat:
            st.caption(CAVEAT)
    return text


def layer_and_head_pickers(stack_shape: tuple[int, ...]) -> tuple[int, int]:
    n_layers, n_heads = stack_shape[:2]
    layers, heads = list(range(n_layers)), list(range(n_heads))
    remember("layer", 0, layers)
    remember("head", 0, heads)
    picker_layer, picker_head = st.columns(2)
    layer = picker_layer.selectbox("Layer", layers, format_func=lambda n: f"layer {n}", key="layer")
    head = picker_head.selectbox("Head", heads, format_func=lambda n: f"head {n}", key="head")
    return layer, head


# --- page sections ---


def presenter_toggle() -> None:
    remember("presenter", False, BOOLEANS)
    st.sidebar.toggle("Presenter mode", key="presenter", help=EXPLANATIONS["presenter"])
    if presenting():
        st.html(PRESENTER_CSS)


def sidebar_checkpoint() -> tuple[CheckpointEntry, Translator, str]:
    st.sidebar.header("Model")
    folder = checkpoints_dir()
    entries = list_checkpoints(str(folder), folder_stamp(folder))
    usable = {entry.name: entry for entry in entries if not entry.error}
    skipped = [entry for entry in entries if entry.error]
    if not usable:
        st.error(
            f"No usable checkpoint in {folder}. Each checkpoint is a folder with config.json, "
            "model.safetensors, a tokenizer model and card.json."
        )
        st.stop()
    names = list(usable)
    asked = (st.session_state.get("url_request") or {}).get("checkpoint")
    remember("checkpoint", DEFAULT_CHECKPOINT if DEFAULT_CHECKPOINT in usable else names[0], names)
    name = st.sidebar.selectbox("Checkpoint", names, key="checkpoint")
    if asked is not None and asked not in usable:
        st.warning(f"Checkpoint “{escape_markdown(asked)}” is not available; using {escape_markdown(name)}.")
    entry = usable[name]
    st.sidebar.caption(describe_card(entry.card))
    remember("device", "auto", list(DEVICES))
    if not presenting():
        with st.sidebar.expander(f"All checkpoints ({len(usable)} usable, {len(skipped)} skipped)"):
            for usable_entry in usable.values():
                st.markdown(f"**{escape_markdown(usable_entry.name)}**: {describe_card(usable_entry.card)}")
            for skipped_entry in skipped:
                st.markdown(
                    f"Skipped **{escape_markdown(skipped_entry.name)}**: {escape_markdown(skipped_entry.error)}"
                )
        st.sidebar.radio(
            "Device", list(DEVICES), format_func=DEVICES.get, horizontal=True, key="device", persist_state="page"
        )
    device = st.session_state.device
    translator = load_translator(entry.path, device, checkpoint_stamp(entry.path))
    if not presenting():
        st.sidebar.caption(f"Running on: **{translator.device}**")
    for notice in translator.notices:
        st.sidebar.warning(notice)
    return entry, translator, device


def sidebar_settings(max_len: int) -> dict[str, Any]:
    """Decoding and display settings; presenter mode hides them but keeps their values."""
    remember("decoding", "greedy", ["greedy", "beam"])
    remember("beam_size", 5, list(range(2, 11)))
    remember("max_len", None, [None, *range(1, max_len - 1)])
    for key, default in DISPLAY_TOGGLES.items():
        remember(key, default, BOOLEANS)
    if not presenting():
        st.sidebar.header("Decoding")
        st.sidebar.radio(
            "Search",
            ["greedy", "beam"],
            format_func=str.capitalize,
            horizontal=True,
            key="decoding",
            persist_state="page",
        )
        if st.session_state.decoding == "beam":
            st.sidebar.slider("Beam size", 2, 10, key="beam_size", persist_state="page")
        st.sidebar.number_input(
            "Max output tokens",
            min_value=1,
            max_value=max_len - 2,
            value=None,
            placeholder="automatic",
            key="max_len",
            persist_state="page",
        )
        st.sidebar.header("Display")
        st.sidebar.toggle("Merge subwords into words", key="merge_words", persist_state="page")
        st.sidebar.toggle("Show special tokens", key="show_special", help=EXPLANATIONS["special"], persist_state="page")
        st.sidebar.toggle("Write the weights in the cells", key="annotate", persist_state="page")
    state = st.session_state
    return {
        "beam_size": state.beam_size if state.decoding == "beam" else 1,
        "max_len": state.max_len,
        **{key: state[key] for key in DISPLAY_TOGGLES},
    }


def source_section(card: dict[str, Any]) -> tuple[str, str | None]:
    examples = card_examples(card)
    if not presenting():
        st.selectbox(
            "Example sentences",
            examples,
            index=None,
            placeholder="Pick an example…",
            key="example",
            on_change=use_example,
        )
    remember("sentence", examples[0])
    text = st.text_area("Source sentence", key="sentence", height=80)
    remember("teacher_forcing", False, BOOLEANS)
    remember("target", "")
    if not presenting():
        forced = st.toggle(
            "Teacher forcing: type the target myself",
            key="teacher_forcing",
            help=EXPLANATIONS["teacher_forcing"],
            on_change=prefill_target,
            persist_state="page",
        )
        if forced:
            st.text_input("Target sentence (the model reads these tokens)", key="target", persist_state="page")
    target = st.session_state.target if st.session_state.teacher_forcing else None
    return text, target or None


def results_section(page: dict[str, Any], hide_output: bool) -> None:
    """Tokens, translation and how sure the model was; ``hide_output`` keeps the translation for the quiz to reveal."""
    trace, file_stem = page["trace"], page["file_stem"]
    if trace.settings.get("notice"):
        st.warning(trace.settings["notice"])
    if trace.settings.get("truncated"):
        st.warning(
            f"The sentence has {trace.settings['source_pieces_before_truncation']} pieces; only the first "
            f"{len(trace.source_pieces) - 1} fit the model and were used."
        )
    if not presenting():
        st.markdown("**Tokenization** (pieces with their ids; ▁ starts a word)")
        st.dataframe(
            pd.DataFrame([trace.source_pieces, [str(i) for i in trace.source_ids]], index=["piece", "id"]),
            width="stretch",
        )
    if hide_output:
        st.markdown(f"**Translation** ({page['mode']}): hidden during the quiz; guess it step by step below.")
    else:
        st.markdown(f"**Translation** ({page['mode']})")
        st.markdown(f"### {escape_markdown(trace.translation) or '(empty)'}")
    if presenting():
        return
    if not hide_output:
        show_figure(
            viz.token_probabilities(trace.predicted_pieces, trace.step_probs, title="Probability of each output token"),
            f"{file_stem}-probabilities",
            page["lesson"]["translation"],
        )
    # The files are written only when a button is clicked (deferred data), not on every rerun.
    left, middle, right = st.columns(3)
    left.download_button(
        "Download trace (JSON)", trace.to_json, f"{file_stem}.json", "application/json", on_click="ignore"
    )
    middle.download_button(
        "Download trace (NPZ)", trace.to_npz_bytes, f"{file_stem}.npz", "application/octet-stream", on_click="ignore"
    )
    right.download_button(
        "Download lesson (HTML)",
        partial(lesson_file, page),
        f"{file_stem}-lesson.html",
        "text/html",
        on_click="ignore",
        help=EXPLANATIONS["export"],
        key="lesson_download",
    )


def lesson_file(page: dict[str, Any]) -> str:
    """The lesson export of what the page shows now (its step section follows the fragment's reruns)."""
    trace, lesson = page["trace"], page["lesson"]
    facts = [
        ("Checkpoint", page["entry"].name),
        ("Source sentence", trace.source_text),
        ("Translation", trace.translation),
        ("Decoding", page["mode"]),
    ]
    sections = [*lesson["translation"], *lesson["steps"], *lesson["view"]]
    return lesson_html("Attention explorer: a lesson on one sentence", sections, facts=facts, caveat=CAVEAT)


# --- taking turns: many sessions, few cores ---


@contextmanager
def admitted() -> Iterator[None]:
    """Run the page (or a fragment) when its turn comes: first come, first served, one run per core.

    Thirty runs started at once on two cores all finish late together; in turns, the early
    arrivals finish early and the last no later (model.admission). A run that has to wait says so.
    """
    gate = shared_gate()
    with ExitStack() as turn:
        if gate.is_full() and not gate.holds():
            ahead = gate.waiting()
            with st.spinner(f"Busy with other sessions: {f'{ahead} ahead of you' if ahead else 'you are next'}…"):
                turn.enter_context(gate)
        else:
            turn.enter_context(gate)
        yield


def in_turn(view: Callable[..., None]) -> Callable[..., None]:
    """A fragment's own reruns take their turn like page runs (inside a page run it already has one)."""

    @wraps(view)
    def run(*args: Any, **kwargs: Any) -> None:
        with admitted():
            view(*args, **kwargs)

    return run


# --- views: each draws itself from the page context (see page()) ---


@st.fragment
@in_turn
def steps_view(page: dict[str, Any]) -> None:
    """Step navigation reruns only this fragment: the rest of the page and the model stay put."""
    trace, display, file_stem = page["trace"], page["display"], page["file_stem"]
    n_steps = trace.n_steps
    remember("step", 0, list(range(n_steps)))
    buttons = [
        ("First", ":material/first_page:", "step_first", "Home", go_to_step, (0,)),
        ("Previous", ":material/chevron_left:", "step_previous", "Left", move_step, (-1, n_steps)),
        ("Next", ":material/chevron_right:", "step_next", "Right", move_step, (1, n_steps)),
        ("Last", ":material/last_page:", "step_last", "End", go_to_step, (n_steps - 1,)),
    ]
    # Presenter mode puts the layer picker in the buttons' row and leaves out the slider (keys step).
    columns = st.columns(len(buttons) + presenting())
    for column, (label, icon, key, shortcut, callback, args) in zip(columns, buttons, strict=False):
        column.button(label, icon=icon, key=key, on_click=callback, args=args, shortcut=shortcut, width="stretch")
    if n_steps > 1 and not presenting():
        st.slider("Output step", 0, n_steps - 1, key="step")
    layers = list(range(trace.attention_stack("cross").shape[0]))
    remember("step_layer", layers[-1], layers)
    layer = (columns[-1] if presenting() else st).selectbox(
        "Decoder layer",
        layers,
        format_func=lambda n: f"layer {n}",
        key="step_layer",
        label_visibility="collapsed" if presenting() else "visible",
    )
    step = viz.decoding_step(trace, st.session_state.step, layer)
    explanation = how_to_read("step")
    st.markdown(f"**Step {step.step + 1} of {n_steps}.** Decoder input so far: {pieces_markdown(step.decoder_input)}")
    st.markdown(
        f"Predicted next token: {pieces_markdown([step.predicted])} with probability {step.predicted_probability:.3f}"
    )
    lesson = page["lesson"]["steps"] = []  # this fragment's charts replace the ones of its previous run
    # side by side on a normal page; one under the other, at full width, in presenter mode
    top, source = (st.container(), st.container()) if presenting() else st.columns([1, 2])
    with top:
        show_figure(
            viz.top_k_figure(
                step.top_pieces,
                step.top_probabilities,
                step.chosen_rank,
                title=f"Step {step.step + 1}: most likely next tokens",
            ),
            f"{file_stem}-step{step.step}-topk",
            lesson,
            explanation,
        )
    with source:
        show_figure(
            viz.step_attention(
                step.cross_rows,
                trace.source_pieces,
                **display,
                title=f"Cross-attention of this step over the source, layer {layer}",
            ),
            f"{file_stem}-step{step.step}-cross",
            lesson,
        )
    show_figure(
        viz.step_attention(
            step.self_rows, step.decoder_input, **display, title=f"Decoder self-attention of this step, layer {layer}"
        ),
        f"{file_stem}-step{step.step}-self",
        lesson,
    )
    write_url_after_fragment()


def attention_view(page: dict[str, Any], kind: str) -> None:
    trace, display, file_stem, lesson = page["trace"], page["display"], page["file_stem"], page["lesson"]["view"]
    axes = viz.attention_axes(trace, kind)
    remember("display", "single", list(DISPLAYS))
    mode = st.segmented_control("Show", list(DISPLAYS), format_func=DISPLAYS.get, required=True, key="display")
    layer, head = layer_and_head_pickers(axes.stack.shape)
    topics = [kind, mode]
    if mode == "aggregates" and kind != "encoder":
        topics.append("rollout_decoder" if kind == "decoder" else "rollout_cross")
    explanation = how_to_read(*topics)
    name = f"{file_stem}-{kind}-{mode}"
    # grid cells and head-view lines are too small to write numbers in
    grid_display = {key: value for key, value in display.items() if key != "annotate"}
    if mode == "single":
        figure = viz.attention_heatmap(
            axes.stack[layer, head],
            axes.query_pieces,
            axes.key_pieces,
            **display,
            title=f"{ATTENTION_VIEWS[kind]}: layer {layer}, head {head}",
        )
        show_figure(figure, f"{name}-L{layer}H{head}", lesson, explanation)
    elif mode == "grid":
        figure = viz.attention_grid(
            axes.stack, axes.query_pieces, axes.key_pieces, **grid_display, title=ATTENTION_VIEWS[kind]
        )
        show_figure(figure, name, lesson, explanation)
    elif mode == "heads":
        queries = viz.select_tokens(axes.stack[layer], axes.query_pieces, axes.key_pieces, **grid_display).query_tokens
        heads = list(range(axes.stack.shape[1]))
        lines_from, heads_drawn = st.columns(2)
        remember("head_view_query", ALL_QUERIES, [ALL_QUERIES, *range(len(queries))])
        query = lines_from.selectbox(
            "Lines from",
            [ALL_QUERIES, *range(len(queries))],
            format_func=lambda q: "every query token" if q == ALL_QUERIES else f"{q}: {queries[q]}",
            key="head_view_query",
        )
        if not set(st.session_state.get("head_view_heads", [None])) <= set(heads):
            st.session_state.head_view_heads = heads
        chosen_heads = heads_drawn.multiselect(
            "Heads drawn", heads, format_func=lambda n: f"head {n}", key="head_view_heads"
        )
        figure = viz.head_view(
            axes.stack[layer],
            axes.query_pieces,
            axes.key_pieces,
            heads=chosen_heads,
            query=None if query == ALL_QUERIES else query,
            **grid_display,
            title=f"{ATTENTION_VIEWS[kind]}: layer {layer}, all heads",
        )
        show_figure(figure, f"{name}-L{layer}", lesson, explanation)
    else:
        figure = viz.aggregate_figure(
            axes.stack,
            layer,
            axes.query_pieces,
            axes.key_pieces,
            rollout=kind != "cross",
            **display,
            title=f"{ATTENTION_VIEWS[kind]}: aggregates",
        )
        show_figure(figure, f"{name}-L{layer}", lesson, explanation)


def positional_view(page: dict[str, Any]) -> None:
    trace, file_stem, lesson = page["trace"], page["file_stem"], page["lesson"]["view"]
    side = st.radio("Side", ["encoder", "decoder"], format_func=str.capitalize, horizontal=True, key="positional_side")
    encoding = trace.positional[f"{side}.positional"]
    pieces = trace.source_pieces if side == "encoder" else trace.decoder_input_pieces
    d_model = encoding.shape[1]
    dimensions = st.multiselect(
        "Dimensions to plot",
        list(range(d_model)),
        default=sorted({0, 1, 4, 5, d_model // 2, d_model - 1}),
        key="positional_dimensions",
    )
    explanation = how_to_read("positional", caveat=False)
    name = f"{file_stem}-{side}-positional"
    show_figure(
        viz.positional_matrix(encoding, pieces, title="Positional encoding added at each position"),
        f"{name}-matrix",
        lesson,
        explanation,
    )
    show_figure(
        viz.positional_curves(encoding, dimensions, title="Chosen dimensions along the sentence"),
        f"{name}-curves",
        lesson,
    )
    show_figure(
        viz.positional_similarity(encoding, pieces, title="Similarity of positions (dot products)"),
        f"{name}-similarity",
        lesson,
    )
    show_figure(
        viz.encoding_norms(encoding, trace.embedding_norms[side], pieces, title="Size of position vs. size of token"),
        f"{name}-norms",
        lesson,
    )


@st.fragment
@in_turn
def quiz_view(page: dict[str, Any]) -> None:
    """Predict, then reveal: guesses are kept per sentence, layer and head, and scored by viz.quiz."""
    trace, display, file_stem = page["trace"], page["display"], page["file_stem"]
    n_steps = trace.n_steps
    n_layers, n_heads = trace.attention_stack("cross").shape[:2]
    layers, head_choices = list(range(n_layers)), [AVERAGE_HEADS, *range(n_heads)]
    remember("step", 0, list(range(n_steps)))
    remember("step_layer", layers[-1], layers)
    remember("quiz_head", AVERAGE_HEADS, head_choices)
    how_to_read("quiz")
    left, right = st.columns(2)
    layer = left.selectbox("Decoder layer", layers, format_func=lambda n: f"layer {n}", key="step_layer")
    chosen = right.selectbox(
        "Which attention counts",
        head_choices,
        format_func=lambda h: "mean over the heads" if h == AVERAGE_HEADS else f"head {h}",
        key="quiz_head",
    )
    head = None if chosen == AVERAGE_HEADS else chosen
    quiz_key = (page["entry"].name, trace.source_text, tuple(trace.target_ids), layer, head)
    if st.session_state.get("quiz", {}).get("key") != quiz_key:
        st.session_state.quiz = {"key": quiz_key, "answers": {}}
    answers: dict[int, Guess] = st.session_state.quiz["answers"]
    total = total_score(score_step(step_truth(trace, s, layer, head), guess) for s, guess in answers.items())
    st.markdown(
        f"**Score: {total.right} of {total.asked}** · where it looks {total.where_right}/{total.where_asked}"
        f" · what it writes {total.what_right}/{total.what_asked}"
    )
    step = st.session_state.step
    truth = step_truth(trace, step, layer, head)
    st.markdown(
        f"**Step {step + 1} of {n_steps}.** The decoder has read {pieces_markdown(trace.target_pieces[: step + 1])}"
    )
    if step not in answers:
        where = st.pills(
            "Where will it look in the source?",
            list(range(len(truth.words))),
            format_func=lambda i: escape_markdown(truth.words[i]),
            key=f"quiz_where_{step}",
        )
        what = st.pills(
            "Which token will it write?",
            truth.candidates,
            format_func=lambda piece: escape_markdown(piece_text(piece)),
            key=f"quiz_what_{step}",
        )
        st.button(
            "Reveal",
            icon=":material/visibility:",
            type="primary",
            key="quiz_reveal",
            on_click=reveal,
            args=(step,),
            disabled=where is None and what is None,
        )
    else:
        quiz_result(truth, answers[step], trace.step_probs[step])
        rows = trace.attention_stack("cross")[layer, :, step, :]
        source, top = (st.container(), st.container()) if presenting() else st.columns([2, 1])
        with source:
            show_figure(
                viz.step_attention(
                    rows,
                    trace.source_pieces,
                    **{**display, "merge_words": True},
                    title=f"Where it looked, layer {layer}",
                ),
                f"{file_stem}-quiz-step{step}-cross",
            )
        with top:
            answer = viz.decoding_step(trace, step, layer)
            show_figure(
                viz.top_k_figure(
                    answer.top_pieces, answer.top_probabilities, answer.chosen_rank, title="What it could write"
                ),
                f"{file_stem}-quiz-step{step}-topk",
            )
        if step < n_steps - 1:
            st.button(
                "Next step",
                icon=":material/chevron_right:",
                type="primary",
                key="quiz_next",
                on_click=move_step,
                args=(1, n_steps),
                shortcut="Right",
            )
        else:
            st.success(f"That was the last step. Final score: {total.right} of {total.asked}.")
    st.button("Start again", icon=":material/restart_alt:", key="quiz_restart", on_click=restart_quiz)
    write_url_after_fragment()


def quiz_result(truth: StepTruth, guess: Guess, probability: float) -> None:
    """What the model really did at this step, next to the student's guesses."""
    score = score_step(truth, guess)
    top_word = escape_markdown(truth.words[truth.looked_at])
    top_weight = truth.weights[truth.looked_at]
    looked = f"It looked most at **{top_word}** (weight {top_weight:.2f})."
    if score.where_right is None:
        st.info(looked)
    elif score.where_right:
        st.success(f"Right: you picked **{top_word}**. {looked}")
    else:
        picked = escape_markdown(truth.words[guess.where])
        st.error(f"You picked **{picked}** (weight {score.weight_on_guess:.2f}). {looked}")
    produced = escape_markdown(piece_text(truth.produced))
    wrote = f"It wrote **{produced}** (probability {probability:.2f})."
    if score.what_right is None:
        st.info(wrote)
    elif score.what_right:
        st.success(f"Right: {wrote}")
    else:
        st.error(f"You picked **{escape_markdown(piece_text(guess.what))}**. {wrote}")


def training_stages(
    page: dict[str, Any], snapshots: dict[str, Path]
) -> tuple[dict[str, Trace], list[tuple[str, str, str]]]:
    """Each training stage's trace (``snapshots``: find_snapshots of the page's checkpoint), teacher-forced with
    this page's output tokens so that every stage reads the same tokens (keyed by the stage's label, oldest first),
    and a table row of its own free translation."""
    trace = page["trace"]
    forced_ids = tuple(trace.target_ids[1:])  # BOS left out
    aligned, translations = {}, []
    for stage, path in snapshots.items():
        card = read_card(path)
        label = stage_label(stage, card)
        run = partial(compute_trace, str(path), page["device"], checkpoint_stamp(path), trace.source_text)
        try:
            aligned[label] = run(1, None, None, forced_ids)
            free = run(page["beam_size"], page["max_len"], None)
        except (CheckpointError, ValueError) as error:
            st.warning(f"The {escape_markdown(stage)} stage cannot be used: {escape_markdown(str(error))}")
            continue
        translations.append((label, free.translation, card.get("description", "")))
    return aligned, translations


def evolution_view(page: dict[str, Any]) -> None:
    """The same head at each training stage, side by side, and each stage's own translation."""
    entry, display, lesson = page["entry"], page["display"], page["lesson"]["view"]
    explanation = how_to_read("evolution")
    snapshots = find_snapshots(entry.path)
    if len(snapshots) == 1:
        st.info(no_snapshots(entry.name))
        return
    remember("evolution_kind", "cross", list(ATTENTION_VIEWS))
    kind = st.segmented_control(
        "Attention", list(ATTENTION_VIEWS), format_func=ATTENTION_VIEWS.get, required=True, key="evolution_kind"
    )
    aligned, translations = training_stages(page, snapshots)
    final_axes = viz.attention_axes(page["trace"], kind)
    layer, head = layer_and_head_pickers(final_axes.stack.shape)
    panels = []
    for label, stage_trace in aligned.items():
        axes = viz.attention_axes(stage_trace, kind)
        if (axes.query_pieces, axes.key_pieces, axes.stack.shape) != (
            final_axes.query_pieces,
            final_axes.key_pieces,
            final_axes.stack.shape,
        ):
            st.warning(f"The stage “{escape_markdown(label)}” has another tokenizer or model shape; it is left out.")
            continue
        panels.append((label, axes.stack[layer, head]))
    figure = viz.evolution_figure(
        panels,
        final_axes.query_pieces,
        final_axes.key_pieces,
        **display,
        title=f"{ATTENTION_VIEWS[kind]}: layer {layer}, head {head}, during training",
    )
    show_figure(figure, f"{page['file_stem']}-{kind}-evolution-L{layer}H{head}", lesson, explanation)
    st.markdown("**The translation at each stage** (each stage translating on its own)")
    st.dataframe(
        pd.DataFrame(translations, columns=["stage", "translation", "about this stage"]),
        hide_index=True,
        width="stretch",
    )
    rows = [(label, translation) for label, translation, _ in translations]
    lesson.append(LessonSection("The translation at each stage", rows=rows))


# --- experiments: one view with a sub-selector; each experiment is a small function of the page context ---


def module_pickers(trace: Trace) -> tuple[str, int, int]:
    """Attention kind, layer and head of an experiment that shows one head (URL: module_kind, layer, head)."""
    remember("module_kind", "cross", list(ATTENTION_VIEWS))
    kind = st.segmented_control(
        "Attention", list(ATTENTION_VIEWS), format_func=ATTENTION_VIEWS.get, required=True, key="module_kind"
    )
    layer, head = layer_and_head_pickers(trace.attention_stack(kind).shape)
    return kind, layer, head


def translations_markdown(rows: list[tuple[str, str]]) -> str:
    """Labelled translations, one per line; the texts escaped (they come from the user and the model)."""
    return "  \n".join(f"**{label}:** {escape_markdown(text) or '(empty)'}" for label, text in rows)


def show_translations(rows: list[tuple[str, str]], title: str, lesson: list[LessonSection]) -> None:
    st.markdown(translations_markdown(rows))
    lesson.append(LessonSection(title, rows=rows))


def whatif_experiment(page: dict[str, Any]) -> None:
    """Fork the translation at one step with another token and let the model continue."""
    trace, file_stem, lesson, config = page["trace"], page["file_stem"], page["lesson"]["view"], page["config"]
    explanation = how_to_read("whatif")
    steps = list(range(trace.n_steps))
    remember("fork_step", 0, steps)
    pick_step, pick_token, type_word = st.columns(3)
    step = pick_step.selectbox(
        "Fork at step",
        steps,
        format_func=lambda s: f"step {s}: {piece_text(trace.predicted_pieces[s])}",
        key="fork_step",
    )
    candidates = {
        int(token): (piece, float(probability))
        for token, piece, probability in zip(
            trace.topk_ids[step], trace.topk_pieces[step], trace.topk_probs[step], strict=True
        )
        if int(token) not in (config.pad_id, config.bos_id)  # the decoder never writes these
    }
    written = trace.target_ids[step + 1]
    remember("fork_token", next((t for t in candidates if t != written), written), list(candidates))
    token_id = pick_token.selectbox(
        "Write instead",
        list(candidates),
        format_func=lambda t: (
            f"{piece_text(candidates[t][0])} ({candidates[t][1]:.2f})"
            + (", as in the original" if t == written else "")
        ),
        key="fork_token",
    )
    remember("fork_word", "")
    word = type_word.text_input("…or type a word", key="fork_word", help="A typed word replaces the pick.")
    try:
        forked = compute_fork(page["trace_key"], step, word.strip() or token_id)
    except ValueError as error:
        st.error(escape_markdown(str(error)))
        return
    notice = viz.fork_info(forked)["notice"]
    if notice:
        st.info(escape_markdown(notice))
    show_translations([("Original", trace.translation), ("What if", forked.translation)], "What if…?", lesson)
    show_figure(
        viz.fork_tokens_figure(trace, forked, title="Original and what-if, token by token"),
        f"{file_stem}-whatif-step{step}",
        lesson,
        explanation,
    )
    kind, layer, head = module_pickers(trace)
    figures = viz.fork_attention_figures(
        trace, forked, HeadRef(kind, layer, head).module_name, head, annotate=page["display"]["annotate"]
    )
    for column, figure, name in zip(st.columns(2), figures, ("original", "whatif"), strict=True):
        with column:
            show_figure(figure, f"{file_stem}-whatif-step{step}-{kind}-L{layer}H{head}-{name}", lesson)


def beam_experiment(page: dict[str, Any]) -> None:
    """Every hypothesis beam search examined, and where one beam looked when it chose its token."""
    display, file_stem, lesson = page["display"], page["file_stem"], page["lesson"]["view"]
    explanation = how_to_read("beam_tree")
    beam_size = st.session_state.beam_size
    st.caption(f"Beam size {beam_size}, as set in the sidebar (Search: Beam).")
    remember("show_pruned", True, BOOLEANS)
    show_pruned = st.toggle("Show pruned candidates", key="show_pruned")
    tree = compute_beam_tree(page["trace_key"], beam_size)
    show_figure(
        viz.beam_tree_figure(tree, show_pruned=show_pruned, title=f"Beam search (beam {beam_size}): every hypothesis"),
        f"{file_stem}-beam{beam_size}-tree",
        lesson,
        explanation,
    )
    nodes = list(range(1, len(tree.nodes)))
    remember("beam_node", tree.results()[0].id, nodes)
    pick_node, pick_layer = st.columns([2, 1])
    node_id = pick_node.selectbox(
        "Where did this beam look?",
        nodes,
        format_func=lambda n: (
            f"step {tree.nodes[n].step}, rank {tree.nodes[n].rank + 1}: "
            f"{piece_text(tree.nodes[n].piece)} ({tree.nodes[n].status})"
        ),
        key="beam_node",
    )
    node_trace = compute_beam_node_trace(page["trace_key"], beam_size, node_id)
    layers = list(range(node_trace.attention_stack("cross").shape[0]))
    remember("layer", 0, layers)
    layer = pick_layer.selectbox("Decoder layer", layers, format_func=lambda n: f"layer {n}", key="layer")
    rows = node_trace.attention_stack("cross")[layer, :, tree.trace_row(node_id), :]  # (heads, source tokens)
    show_figure(
        viz.step_attention(
            rows, node_trace.source_pieces, **display, title=f"Cross-attention when this beam chose it, layer {layer}"
        ),
        f"{file_stem}-beam{beam_size}-node{node_id}-L{layer}",
        lesson,
    )


def internals_experiment(page: dict[str, Any]) -> None:
    """The stages of scaled dot-product attention for one head and one query row, each with its shape."""
    trace, file_stem, lesson = page["trace"], page["file_stem"], page["lesson"]["view"]
    explanation = how_to_read("internals")
    kind, layer, head = module_pickers(trace)
    queries = viz.attention_axes(trace, kind).query_pieces
    rows = list(range(len(queries)))
    remember("query_row", 0, rows)
    row = st.selectbox(
        "Query row" if kind == "encoder" else "Query row (decoding step)",
        rows,
        format_func=lambda r: f"{r}: {piece_text(queries[r])}",
        key="query_row",
    )
    stages = compute_stages(page["trace_key"], HeadRef(kind, layer, head).module_name, head, row)
    figures = viz.attention_stage_figures(stages)
    name = f"{file_stem}-{kind}-L{layer}H{head}-row{row}"
    for group in (("q", "k", "v"), ("scores", "scaled"), ("mask", "masked"), ("softmax", "contributions", "output")):
        for column, stage in zip(st.columns(len(group)), group, strict=True):
            with column:
                show_figure(figures[stage], f"{name}-{stage}", lesson, explanation if stage == "q" else "")


def file_statistics(page: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The statistics table over an uploaded file's sentences (at most MAX_FILE_SENTENCES), with progress."""
    upload = st.file_uploader("A text file, one sentence per line", type=["txt"], key="stats_file")
    if upload is None:
        st.info("Upload a text file (UTF-8, one sentence per line) to average the statistics over its sentences.")
        return None
    try:
        sentences = sentences_from_text(upload.getvalue(), source=upload.name)
    except ValueError as error:
        st.error(escape_markdown(str(error)))
        return None
    used = sentences[:MAX_FILE_SENTENCES]
    if len(used) < len(sentences):
        st.warning(file_cap_notice(len(sentences), len(used)))
    path, device, stamp, _, beam_size, max_len, _ = page["trace_key"]
    progress = st.progress(0.0, text="Translating the file's sentences…")
    tables = []
    for done, sentence in enumerate(used, start=1):
        shared_gate().pass_turn()  # a long file lets other sessions' runs in between, not after it all
        tables.append(sentence_statistics(path, device, stamp, sentence, beam_size, max_len))
        progress.progress(done / len(used), text=f"Sentence {done} of {len(used)}")
    progress.empty()
    st.caption(f"Mean over {len(used)} sentences of {escape_markdown(upload.name)}, each translated by the model.")
    return mean_head_statistics(tables)


def stats_experiment(page: dict[str, Any]) -> None:
    """Every head's statistics as a layers × heads heatmap per attention kind, and a sortable table."""
    file_stem, lesson = page["file_stem"], page["lesson"]["view"]
    explanation = how_to_read("head_stats")
    remember("stats_source", "sentence", list(STATS_SOURCES))
    remember("statistic", "entropy", list(STATISTICS))
    pick_source, pick_statistic = st.columns(2)
    source = pick_source.segmented_control(
        "Over", list(STATS_SOURCES), format_func=STATS_SOURCES.get, required=True, key="stats_source"
    )
    statistic = pick_statistic.selectbox(
        "Statistic", list(STATISTICS), format_func=STATISTIC_LABELS.get, key="statistic"
    )
    table = trace_statistics(page["trace_key"]) if source == "sentence" else file_statistics(page)
    if table is None:
        return
    panels = [st.container() for _ in ATTENTION_VIEWS] if presenting() else st.columns(len(ATTENTION_VIEWS))
    for panel, kind in zip(panels, ATTENTION_VIEWS, strict=True):
        with panel:
            show_figure(
                viz.head_stats_heatmap(table, statistic, KIND_LABELS[kind]),
                f"{file_stem}-stats-{source}-{statistic}-{kind}",
                lesson,
                explanation if kind == "encoder" else "",
            )
    st.dataframe(
        viz.head_stats_frame(table),
        hide_index=True,
        width="stretch",
        column_config={label: st.column_config.NumberColumn(format="%.3f") for label in STATISTIC_LABELS.values()},
    )


def pair_experiment(page: dict[str, Any]) -> None:
    """The page's sentence beside a second one: both translations, one head on each, and their difference."""
    trace, display, file_stem, lesson = page["trace"], page["display"], page["file_stem"], page["lesson"]["view"]
    explanation = how_to_read("pairs")
    pairs = example_pairs(page["entry"].card.get("source_language"))
    if pairs and not presenting():
        st.selectbox(
            "Example pairs",
            list(range(len(pairs))),
            index=None,
            format_func=lambda n: f"{pairs[n][0]}  /  {pairs[n][1]}",
            placeholder="Pick a minimal pair…",
            key="pair_example",
            on_change=use_example_pair,
            args=(pairs,),
        )
    remember("pair_sentence", "")
    text = st.text_input("Second sentence (compared with the source sentence above)", key="pair_sentence")
    if not text.strip():
        st.info("Type a second sentence, or pick an example pair, to compare the two.")
        return
    path, device, stamp, _, beam_size, max_len, _ = page["trace_key"]
    second = compute_trace(path, device, stamp, text, beam_size, max_len, None)
    show_translations([("First", trace.translation), ("Second", second.translation)], "Minimal pair", lesson)
    kind, layer, head = module_pickers(trace)
    pair = attention_pair(trace, second, HeadRef(kind, layer, head).module_name, head)
    tokens = {key: display[key] for key in ("merge_words", "show_special")}
    name = f"{file_stem}-pair-{kind}-L{layer}H{head}"
    show_figure(viz.pair_heatmaps(pair, **tokens), f"{name}-both", lesson, explanation)
    show_figure(viz.pair_difference_heatmap(pair, **tokens), f"{name}-difference", lesson)


def ablation_experiment(page: dict[str, Any]) -> None:
    """Switch heads off and compare translations; every head's importance as a heatmap and a ranking."""
    file_stem, lesson = page["file_stem"], page["lesson"]["view"]
    explanation = how_to_read("ablation", "importance", caveat=False)
    heads = {f"{ref.kind}.{ref.layer}.{ref.head}": ref for ref in all_heads(page["config"])}  # URL value -> head
    remember("ablation_mode", "zero", list(ABLATION_MODES))
    mode = st.segmented_control(
        "Replace a removed head's output by",
        list(ABLATION_MODES),
        format_func=ABLATION_LABELS.get,
        required=True,
        key="ablation_mode",
    )
    importance = compute_importance(page["trace_key"], mode)
    if importance.notice:
        st.warning(importance.notice)
    show_figure(
        viz.importance_heatmap(importance), f"{file_stem}-importance-{mode}", lesson, EXPLANATIONS["importance"]
    )
    with st.expander("Ranking of the heads (table)"):
        st.dataframe(viz.importance_frame(importance), hide_index=True, width="stretch", key="importance_table")
    keys = {ref: key for key, ref in heads.items()}
    most_important = [keys[ref] for ref, _ in importance.ranking()[:TOP_HEADS]]
    remember("ablate", [], list(heads))
    pick_heads, top_button = st.columns([3, 1], vertical_alignment="bottom")
    chosen = pick_heads.multiselect(
        "Heads to switch off", list(heads), format_func=lambda key: heads[key].label, key="ablate"
    )
    top_button.button(
        f"The {TOP_HEADS} most important",
        icon=":material/block:",
        key="ablate_top",
        on_click=set_ablated,
        args=(most_important,),
        width="stretch",
    )
    if not chosen:
        st.info("Pick heads to switch off (or take the most important ones) to see the translation without them.")
        return
    comparison = compute_ablation(page["trace_key"], tuple(heads[key] for key in chosen), mode)
    show_translations(
        [("Original", comparison.original.translation), ("Heads switched off", comparison.ablated.translation)],
        "Heads switched off",
        lesson,
    )
    show_figure(viz.ablation_tokens_figure(comparison), f"{file_stem}-ablation-{mode}-tokens", lesson, explanation)
    show_figure(viz.probability_change_figure(comparison), f"{file_stem}-ablation-{mode}-probabilities", lesson)


def word_order_experiment(page: dict[str, Any]) -> None:
    """Translate without the positional encoding, or with the source words shuffled, beside the original."""
    display, file_stem, lesson = page["display"], page["file_stem"], page["lesson"]["view"]
    explanation = how_to_read("word_order")
    remember("pe_experiment", "no-pe", list(PE_EXPERIMENTS))
    experiment = st.segmented_control(
        "Experiment", list(PE_EXPERIMENTS), format_func=PE_EXPERIMENTS.get, required=True, key="pe_experiment"
    )
    stacks, seed = POSITIONAL_STACKS, 0
    if experiment == "no-pe":
        remember("pe_stacks", list(POSITIONAL_STACKS), list(POSITIONAL_STACKS))
        stacks = tuple(
            st.pills(
                "Remove it from",
                list(POSITIONAL_STACKS),
                selection_mode="multi",
                format_func=str.capitalize,
                key="pe_stacks",
            )
        )
        if not stacks:
            st.info("Pick the encoder, the decoder or both.")
            return
    else:
        remember("pe_seed", 0, list(range(1000)))
        seed = st.number_input("Shuffle number (the same number gives the same order)", 0, 999, key="pe_seed")
    comparison = compute_positional(page["trace_key"], experiment, stacks, seed)
    label = EXPERIMENT_LABELS[experiment]
    rows = [("Original", comparison.original.translation), (label.capitalize(), comparison.modified.translation)]
    if experiment == "shuffle":
        rows.insert(1, ("Shuffled sentence", comparison.modified.source_text))
    show_translations(rows, f"Translation {label}", lesson)
    show_figure(viz.positional_tokens_figure(comparison), f"{file_stem}-{experiment}-tokens", lesson, explanation)
    kind, layer, head = module_pickers(page["trace"])
    figure = viz.positional_attention_figure(
        comparison,
        HeadRef(kind, layer, head).module_name,
        head,
        **{key: display[key] for key in ("merge_words", "show_special")},
    )
    show_figure(figure, f"{file_stem}-{experiment}-{kind}-L{layer}H{head}", lesson)


EXPERIMENTS: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "whatif": ("What if…?", whatif_experiment),
    "beam": ("Beam search tree", beam_experiment),
    "internals": ("Inside one head", internals_experiment),
    "stats": ("Head statistics", stats_experiment),
    "pair": ("Minimal pairs", pair_experiment),
    "ablation": ("Switch heads off", ablation_experiment),
    "word_order": ("Without word order", word_order_experiment),
}
# These compare the model's own translations, so a typed target (teacher forcing) does not reach them.
OWN_TRANSLATION_EXPERIMENTS = ("beam", "pair", "ablation", "word_order")


def experiments_view(page: dict[str, Any]) -> None:
    remember("experiment", "whatif", list(EXPERIMENTS))
    choice = st.segmented_control(
        "Experiment", list(EXPERIMENTS), format_func=lambda key: EXPERIMENTS[key][0], required=True, key="experiment"
    )
    if not presenting():
        st.caption(EXPLANATIONS["experiments"])
    if page["trace"].settings["mode"] == "forced" and choice in OWN_TRANSLATION_EXPERIMENTS:
        st.caption("This experiment uses the model's own translation, not the target typed for teacher forcing.")
    EXPERIMENTS[choice][1](page)


VIEWS: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "steps": ("Decoding steps", steps_view),
    **{kind: (label, partial(attention_view, kind=kind)) for kind, label in ATTENTION_VIEWS.items()},
    "positional": ("Positional encoding", positional_view),
    "quiz": ("Quiz: predict, then reveal", quiz_view),
    "evolution": ("Training evolution", evolution_view),
    "experiments": ("Experiments", experiments_view),
}


def page() -> None:
    presenter_toggle()
    if not presenting():
        st.title("Attention explorer")
    entry, translator, device = sidebar_checkpoint()
    settings = sidebar_settings(translator.config.max_len)
    display = {key: settings[key] for key in DISPLAY_TOGGLES}
    text, target = source_section(entry.card)
    if not text.strip():
        st.session_state.translation = ""
        st.info("Type a sentence in the box above (or pick an example) to see its translation and attention.")
        return
    trace_key = (
        entry.path,
        device,
        checkpoint_stamp(entry.path),
        text,
        settings["beam_size"],
        settings["max_len"],
        target,
    )
    trace = compute_trace(*trace_key)
    if st.session_state.teacher_forcing and target is None:
        st.info(
            "Type a target sentence to see the attention the model gives it; until then the model translates freely."
        )
    st.session_state.translation = trace.translation
    modes = {
        "greedy": "greedy search",
        "beam": f"beam search (beam {trace.settings['beam_size']})",
        "forced": "teacher forcing",
    }
    context = {
        "entry": entry,
        "device": device,
        "config": translator.config,
        "trace": trace,
        "trace_key": trace_key,  # what the experiments' cached results are keyed on
        "display": display,
        "beam_size": settings["beam_size"],
        "max_len": settings["max_len"],
        "file_stem": entry.name,
        "mode": modes[trace.settings["mode"]],
        "lesson": {"translation": [], "steps": [], "view": []},  # the charts drawn, for the lesson export
    }
    # Presenter mode shows one view at a time, decoding steps among them; a normal page always shows
    # the steps, except under the quiz, which must not show the answers (nor the translation) before the guess.
    views = [key for key in VIEWS if presenting() or key != "steps"]
    remember("view", views[0], views)
    quiz = st.session_state.view == "quiz"
    results_section(context, hide_output=quiz)
    if not presenting() and not quiz:
        st.header("Step through decoding")
        steps_view(context)
    if not presenting():
        st.header("Explore attention")
    view = st.segmented_control("View", views, format_func=lambda key: VIEWS[key][0], required=True, key="view")
    VIEWS[view][1](context)


def main() -> None:
    st.set_page_config(page_title="Attention explorer", layout="wide")
    st.session_state.full_run = True  # fragments leave the URL to the full run's end
    with admitted():
        read_url()
        page()
        write_url()
    st.session_state.full_run = False


main()
