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
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

import viz
from model import load_checkpoint
from model.checkpoint import CheckpointEntry, CheckpointError, find_snapshots, read_card, scan_checkpoints
from model.trace import Trace
from model.translator import Translator
from viz.export import LessonSection, lesson_html
from viz.quiz import Guess, StepTruth, piece_text, score_step, step_truth, total_score
from viz.text import (
    CAVEAT,
    EXPLANATIONS,
    describe_card,
    escape_markdown,
    example_sentences,
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


# --- state: widgets <-> URL ---


def url_text(value: Any) -> str:
    """A value as the URL writes it: booleans as true/false, everything else as str()."""
    return str(value).lower() if isinstance(value, bool) else str(value)


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
    None means any text. The default is recorded so that the URL can leave it out.
    """
    st.session_state.url_defaults[key] = default
    requested = st.session_state.get("url_request")
    if requested is not None and key in URL_KEYS:
        raw = requested.get(key)
        if raw is None:
            value = default
        elif options is None:
            value = raw
        else:
            value = next((option for option in options if url_text(option) == raw), default)
        st.session_state[key] = value
    elif key not in st.session_state or (options is not None and st.session_state[key] not in options):
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
    examples = example_sentences(card.get("source_language"))
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


# --- views: each draws itself from the page context (see page()) ---


@st.fragment
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


def training_stages(page: dict[str, Any]) -> tuple[dict[str, Trace], list[tuple[str, str, str]]]:
    """Each training stage's trace, teacher-forced with this page's output tokens so that every stage reads the
    same tokens (keyed by the stage's label, oldest first), and a table row of its own free translation."""
    trace = page["trace"]
    forced_ids = tuple(trace.target_ids[1:])  # BOS left out
    aligned, translations = {}, []
    for stage, path in find_snapshots(page["entry"].path).items():
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
    if len(find_snapshots(entry.path)) == 1:
        st.info(no_snapshots(entry.name))
        return
    remember("evolution_kind", "cross", list(ATTENTION_VIEWS))
    kind = st.segmented_control(
        "Attention", list(ATTENTION_VIEWS), format_func=ATTENTION_VIEWS.get, required=True, key="evolution_kind"
    )
    aligned, translations = training_stages(page)
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


VIEWS: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "steps": ("Decoding steps", steps_view),
    **{kind: (label, partial(attention_view, kind=kind)) for kind, label in ATTENTION_VIEWS.items()},
    "positional": ("Positional encoding", positional_view),
    "quiz": ("Quiz: predict, then reveal", quiz_view),
    "evolution": ("Training evolution", evolution_view),
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
    trace = compute_trace(
        entry.path, device, checkpoint_stamp(entry.path), text, settings["beam_size"], settings["max_len"], target
    )
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
        "trace": trace,
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
    read_url()
    page()
    write_url()
    st.session_state.full_run = False


main()
