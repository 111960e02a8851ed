"""Attention explorer: a Streamlit page over the scratch Transformer's captured attention.

Wiring only: widgets -> model (load_checkpoint, Translator.trace) -> viz figure builders ->
page. The model is loaded once per (checkpoint, device) and shared by every session; a
trace is computed once per (checkpoint, device, sentence, settings) and cached, so stepping
through decoding or switching views never runs the model again. Only the view on screen
builds its figures.

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
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import viz
from model import load_checkpoint
from model.checkpoint import CheckpointEntry, scan_checkpoints
from model.trace import Trace
from model.translator import Translator
from viz.text import (
    CAVEAT,
    EXPLANATIONS,
    describe_card,
    escape_markdown,
    example_sentences,
    pieces_markdown,
)

CHECKPOINTS_ENV = "ATTENTION_EXPLORER_CHECKPOINTS"
DEFAULT_CHECKPOINT = "multi30k-en-de"
DEVICES = {"auto": "Auto", "cpu": "CPU", "cuda": "CUDA"}
VIEWS = {
    "encoder": "Encoder self-attention",
    "decoder": "Decoder self-attention",
    "cross": "Cross-attention",
    "positional": "Positional encoding",
}
DISPLAYS = {"single": "Single head", "grid": "All heads", "heads": "Head view", "aggregates": "Aggregates"}
ALL_QUERIES = -1  # head view: draw the lines of every query token


def checkpoints_dir() -> Path:
    return Path(os.environ.get(CHECKPOINTS_ENV) or Path(__file__).resolve().parent / "checkpoints")


def folder_stamp(folder: Path) -> tuple[tuple[str, float], ...]:
    """Names and modification times of the files under ``folder``: a cache key that changes when a checkpoint does."""
    if not folder.is_dir():
        return ()
    return tuple(sorted((str(path.relative_to(folder)), path.stat().st_mtime) for path in folder.glob("*/*")))


@st.cache_data(show_spinner="Checking checkpoint folders…")
def list_checkpoints(folder: str, stamp: tuple[tuple[str, float], ...]) -> list[CheckpointEntry]:
    """Every sub-folder, validated fully (model.checkpoint.scan_checkpoints); ``stamp`` only keys the cache."""
    return scan_checkpoints(folder)


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def load_translator(path: str, device: str, stamp: tuple[tuple[str, float], ...]) -> Translator:
    """One model per (checkpoint, device), shared read-only by every session; ``stamp`` only keys the cache."""
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
) -> Trace:
    return load_translator(path, device, stamp).trace(text, beam_size=beam_size, max_len=max_len, target=target)


def show_figure(figure: go.Figure, name: str) -> None:
    """A chart whose toolbar camera button downloads it as ``name``.png."""
    st.plotly_chart(figure, theme=None, config=viz.chart_config(name), key=f"chart-{name}")


def remember(key: str, options: list[Any], default: Any) -> None:
    """Give a widget its first value, and keep it valid when its options change (other checkpoint, shorter trace).

    Widgets get their values only through st.session_state (never a ``value=`` argument as
    well), so a value set here, by a callback or from the URL never conflicts with a default.
    """
    if st.session_state.get(key) not in options:
        st.session_state[key] = default


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


# --- page sections ---


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
    # Read before the selectbox: Streamlit drops a URL value that is not an option, silently.
    asked = st.query_params.get("checkpoint")
    remember("checkpoint", names, DEFAULT_CHECKPOINT if DEFAULT_CHECKPOINT in usable else names[0])
    name = st.sidebar.selectbox("Checkpoint", names, key="checkpoint", bind="query-params")
    if asked is not None and asked not in usable:
        st.warning(f"Checkpoint “{escape_markdown(asked)}” is not available; using {escape_markdown(name)}.")
    entry = usable[name]
    st.sidebar.caption(describe_card(entry.card))
    with st.sidebar.expander(f"All checkpoints ({len(usable)} usable, {len(skipped)} skipped)"):
        for usable_entry in usable.values():
            st.markdown(f"**{escape_markdown(usable_entry.name)}**: {describe_card(usable_entry.card)}")
        for skipped_entry in skipped:
            st.markdown(f"Skipped **{escape_markdown(skipped_entry.name)}**: {escape_markdown(skipped_entry.error)}")
    device = st.sidebar.radio(
        "Device", list(DEVICES), format_func=DEVICES.get, horizontal=True, key="device", bind="query-params"
    )
    translator = load_translator(entry.path, device, folder_stamp(Path(entry.path)))
    st.sidebar.caption(f"Running on: **{translator.device}**")
    for notice in translator.notices:
        st.sidebar.warning(notice)
    return entry, translator, device


def sidebar_settings(max_len: int) -> dict[str, Any]:
    st.sidebar.header("Decoding")
    decoding = st.sidebar.radio(
        "Search", ["greedy", "beam"], format_func=str.capitalize, horizontal=True, key="decoding"
    )
    beam_size = st.sidebar.slider("Beam size", 2, 10, 5, key="beam_size") if decoding == "beam" else 1
    limit = st.sidebar.number_input(
        "Max output tokens", min_value=1, max_value=max_len - 2, value=None, placeholder="automatic", key="max_len"
    )
    st.sidebar.header("Display")
    return {
        "beam_size": beam_size,
        "max_len": limit,
        "merge_words": st.sidebar.toggle("Merge subwords into words", key="merge_words"),
        "show_special": st.sidebar.toggle(
            "Show special tokens", value=True, key="show_special", help=EXPLANATIONS["special"]
        ),
        "annotate": st.sidebar.toggle("Write the weights in the cells", key="annotate"),
    }


def source_section(card: dict[str, Any]) -> tuple[str, str | None]:
    examples = example_sentences(card.get("source_language"))
    st.selectbox(
        "Example sentences", examples, index=None, placeholder="Pick an example…", key="example", on_change=use_example
    )
    st.session_state.setdefault("sentence", examples[0])
    text = st.text_area("Source sentence", key="sentence", height=80, bind="query-params")
    forced = st.toggle(
        "Teacher forcing: type the target myself",
        key="teacher_forcing",
        help=EXPLANATIONS["teacher_forcing"],
        on_change=prefill_target,
    )
    target = st.text_input("Target sentence (the model reads these tokens)", key="target") if forced else None
    return text, target or None


def results_section(trace: Trace, file_stem: str) -> None:
    if trace.settings.get("notice"):
        st.warning(trace.settings["notice"])
    if trace.settings.get("truncated"):
        st.warning(
            f"The sentence has {trace.settings['source_pieces_before_truncation']} pieces; only the first "
            f"{len(trace.source_pieces) - 1} fit the model and were used."
        )
    st.markdown("**Tokenization** (pieces with their ids; ▁ starts a word)")
    st.dataframe(
        pd.DataFrame([trace.source_pieces, [str(i) for i in trace.source_ids]], index=["piece", "id"]), width="stretch"
    )
    mode = {
        "greedy": "greedy search",
        "beam": f"beam search (beam {trace.settings['beam_size']})",
        "forced": "teacher forcing",
    }
    st.markdown(f"**Translation** ({mode[trace.settings['mode']]})")
    st.markdown(f"### {escape_markdown(trace.translation) or '(empty)'}")
    show_figure(
        viz.token_probabilities(trace.predicted_pieces, trace.step_probs, title="Probability of each output token"),
        f"{file_stem}-probabilities",
    )
    # The files are written only when a button is clicked (deferred data), not on every rerun.
    left, right = st.columns(2)
    left.download_button(
        "Download trace (JSON)", trace.to_json, f"{file_stem}.json", "application/json", on_click="ignore"
    )
    right.download_button(
        "Download trace (NPZ)", trace.to_npz_bytes, f"{file_stem}.npz", "application/octet-stream", on_click="ignore"
    )


@st.fragment
def decoding_steps(trace: Trace, display: dict[str, Any], file_stem: str) -> None:
    """Step navigation reruns only this fragment: the rest of the page and the model stay put."""
    n_steps = trace.n_steps
    remember("step", list(range(n_steps)), 0)
    buttons = [
        ("First", ":material/first_page:", "step_first", go_to_step, (0,)),
        ("Previous", ":material/chevron_left:", "step_previous", move_step, (-1, n_steps)),
        ("Next", ":material/chevron_right:", "step_next", move_step, (1, n_steps)),
        ("Last", ":material/last_page:", "step_last", go_to_step, (n_steps - 1,)),
    ]
    for column, (label, icon, key, callback, args) in zip(st.columns(len(buttons)), buttons, strict=True):
        column.button(label, icon=icon, key=key, on_click=callback, args=args, width="stretch")
    if n_steps > 1:
        st.slider("Output step", 0, n_steps - 1, key="step", bind="query-params")
    layers = list(range(trace.attention_stack("cross").shape[0]))
    remember("step_layer", layers, layers[-1])
    layer = st.selectbox("Decoder layer", layers, format_func=lambda n: f"layer {n}", key="step_layer")
    step = viz.decoding_step(trace, st.session_state.get("step", 0), layer)
    st.markdown(f"**Step {step.step + 1} of {n_steps}.** Decoder input so far: {pieces_markdown(step.decoder_input)}")
    st.markdown(
        f"Predicted next token: {pieces_markdown([step.predicted])} with probability {step.predicted_probability:.3f}"
    )
    top, source = st.columns([1, 2])
    with top:
        show_figure(
            viz.top_k_figure(
                step.top_pieces, step.top_probabilities, step.chosen_rank, title="Most likely next tokens"
            ),
            f"{file_stem}-step{step.step}-topk",
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
        )
    show_figure(
        viz.step_attention(
            step.self_rows, step.decoder_input, **display, title=f"Decoder self-attention of this step, layer {layer}"
        ),
        f"{file_stem}-step{step.step}-self",
    )


def attention_view(trace: Trace, kind: str, display: dict[str, Any], file_stem: str) -> None:
    axes = viz.attention_axes(trace, kind)
    n_layers, n_heads = axes.stack.shape[:2]
    remember("display", list(DISPLAYS), "single")
    mode = st.segmented_control("Show", list(DISPLAYS), format_func=DISPLAYS.get, required=True, key="display")
    layers, heads = list(range(n_layers)), list(range(n_heads))
    remember("layer", layers, 0)
    remember("head", heads, 0)
    picker_layer, picker_head = st.columns(2)
    layer = picker_layer.selectbox(
        "Layer", layers, format_func=lambda n: f"layer {n}", key="layer", bind="query-params"
    )
    head = picker_head.selectbox("Head", heads, format_func=lambda n: f"head {n}", key="head", bind="query-params")
    name = f"{file_stem}-{kind}-{mode}"
    figure_column, text_column = st.columns([3, 1])
    with text_column:
        st.markdown(EXPLANATIONS[kind])
        st.markdown(EXPLANATIONS[mode])
        if mode == "aggregates" and kind != "encoder":
            st.markdown(EXPLANATIONS["rollout_decoder" if kind == "decoder" else "rollout_cross"])
        st.caption(CAVEAT)
    with figure_column:
        # grid cells and head-view lines are too small to write numbers in
        grid_display = {key: value for key, value in display.items() if key != "annotate"}
        if mode == "single":
            figure = viz.attention_heatmap(
                axes.stack[layer, head],
                axes.query_pieces,
                axes.key_pieces,
                **display,
                title=f"{VIEWS[kind]}: layer {layer}, head {head}",
            )
            show_figure(figure, f"{name}-L{layer}H{head}")
        elif mode == "grid":
            show_figure(
                viz.attention_grid(axes.stack, axes.query_pieces, axes.key_pieces, **grid_display, title=VIEWS[kind]),
                name,
            )
        elif mode == "heads":
            queries = viz.select_tokens(
                axes.stack[layer], axes.query_pieces, axes.key_pieces, **grid_display
            ).query_tokens
            lines_from, heads_drawn = st.columns(2)
            remember("head_view_query", [ALL_QUERIES, *range(len(queries))], ALL_QUERIES)
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
                title=f"{VIEWS[kind]}: layer {layer}, all heads",
            )
            show_figure(figure, f"{name}-L{layer}")
        else:
            figure = viz.aggregate_figure(
                axes.stack,
                layer,
                axes.query_pieces,
                axes.key_pieces,
                rollout=kind != "cross",
                **display,
                title=f"{VIEWS[kind]}: aggregates",
            )
            show_figure(figure, f"{name}-L{layer}")


def positional_view(trace: Trace, file_stem: str) -> None:
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
    figure_column, text_column = st.columns([3, 1])
    with text_column:
        st.markdown(EXPLANATIONS["positional"])
    with figure_column:
        name = f"{file_stem}-{side}-positional"
        show_figure(
            viz.positional_matrix(encoding, pieces, title="Positional encoding added at each position"),
            f"{name}-matrix",
        )
        show_figure(
            viz.positional_curves(encoding, dimensions, title="Chosen dimensions along the sentence"), f"{name}-curves"
        )
        show_figure(
            viz.positional_similarity(encoding, pieces, title="Similarity of positions (dot products)"),
            f"{name}-similarity",
        )
        show_figure(
            viz.encoding_norms(
                encoding, trace.embedding_norms[side], pieces, title="Size of position vs. size of token"
            ),
            f"{name}-norms",
        )


def main() -> None:
    st.set_page_config(page_title="Attention explorer", layout="wide")
    st.title("Attention explorer")
    entry, translator, device = sidebar_checkpoint()
    settings = sidebar_settings(translator.config.max_len)
    display = {key: settings[key] for key in ("merge_words", "show_special", "annotate")}
    text, target = source_section(entry.card)
    if not text.strip():
        st.session_state.translation = ""
        st.info("Type a sentence in the box above (or pick an example) to see its translation and attention.")
        return
    trace = compute_trace(
        entry.path, device, folder_stamp(Path(entry.path)), text, settings["beam_size"], settings["max_len"], target
    )
    if st.session_state.get("teacher_forcing") and target is None:
        st.info(
            "Type a target sentence to see the attention the model gives it; until then the model translates freely."
        )
    st.session_state.translation = trace.translation
    file_stem = entry.name
    results_section(trace, file_stem)
    st.header("Step through decoding")
    st.caption(EXPLANATIONS["step"])
    decoding_steps(trace, display, file_stem)
    st.header("Explore attention")
    remember("view", list(VIEWS), "encoder")
    view = st.segmented_control(
        "View", list(VIEWS), format_func=VIEWS.get, required=True, key="view", bind="query-params"
    )
    if view == "positional":
        positional_view(trace, file_stem)
    else:
        attention_view(trace, view, display, file_stem)


main()
