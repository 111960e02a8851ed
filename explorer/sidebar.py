"""The sidebar: presenter mode, the checkpoint and device, decoding and display settings."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from explorer import views
from explorer.components import assistive
from explorer.compute import (
    ModelKey,
    checkpoints_dir,
    folder_stamp,
    list_checkpoints,
    load_translator,
    open_models,
)
from explorer.context import TokenStyle
from explorer.explanations import EXPLANATIONS
from explorer.state import (
    BEAM_SIZES,
    DEVICES,
    SAMPLING_SETTINGS,
    SEARCHES,
    SEED_RANGE,
    TEMPERATURE_RANGE,
    TOKEN_STYLE_TOGGLES,
    TOP_K_RANGE,
    TOP_P_RANGE,
    bind,
    presenting,
)
from explorer.wording import DEVICE_NAMES, LANGUAGE_NAMES, describe_card, escape_markdown, language_label
from model.checkpoint import CheckpointEntry, read_card
from model.decoding.authors import AuthorsDecoding
from model.decoding.languages import NO_LANGUAGES, LanguagePair
from model.decoding.sampling import Sampling
from model.decoding.scoring import Scoring
from model.translator import Translator

DEFAULT_CHECKPOINT = "multi30k-en-de"
# The page starts just under Streamlit's header (3.75rem high) instead of 6rem down: the first screen holds the
# sentence, its translation and an attention heatmap. A constant: no user text ever reaches st.html.
PAGE_CSS = f"""<style>
[data-testid="stMainBlockContainer"] {{ padding-top: 3.5rem; }}
{assistive.HIDDEN_CSS}
</style>"""
# Presenter mode: larger text everywhere (Streamlit sizes text in rem) and the full width for the view.
# The header stays: it holds the button that opens a collapsed sidebar; the top padding keeps the
# slide's first line below it (3.75rem high). A constant: no user text ever reaches st.html.
PRESENTER_CSS = f"""<style>
html {{ font-size: 22px; }}
[data-testid="stMainBlockContainer"] {{ padding: 4.5rem 2rem 1rem; max-width: none; }}
[data-testid="stMarkdownContainer"] h3 {{ font-size: 1.6rem; padding: 0.25rem 0; }}
{assistive.HIDDEN_CSS}
</style>"""


@dataclass(frozen=True)
class Decoding:
    """How the model translates: beam size 1 is greedy search; ``max_new_tokens`` None lets the model decide;
    ``scoring`` None is our search, else how the model's authors rank, stop and end (model.decoding.authors);
    ``sampling``: each token drawn instead (model.decoding.Sampling)."""

    beam_size: int
    max_new_tokens: int | None
    scoring: Scoring | None = None
    sampling: Sampling | None = None


def prefill_target() -> None:
    """Start teacher forcing from the model's own translation, for the user to edit."""
    if st.session_state.teacher_forcing and not st.session_state.get("target"):
        st.session_state.target = st.session_state.get("translation", "")


def note_switch() -> None:
    """Mark the run after a checkpoint change, when the sentence may no longer suit the model (page.fit_sentence)."""
    st.session_state.checkpoint_switched = True


def start_presentation() -> None:
    """Presenter mode begins the presentation at its first view (the decoding steps) and its first step, where the
    arrow keys step through the translation; leaving it keeps the view on screen."""
    if st.session_state.presenter:
        st.session_state.view = views.choices(presenting=True)[0]
        st.session_state.step = 0


def presenter_toggle() -> DeltaGenerator | None:
    """The presenter-mode toggle. Returns where the sentence box and the view picker go: None for the page's own flow;
    in presenter mode a slot in the sidebar under the toggle, so that the main area is the slide (the translation
    and the view) and a 1280x800 projector shows the step's attention without scrolling."""
    bind("presenter")
    if not presenting():
        st.sidebar.title("Attention explorer")
        st.html(PAGE_CSS)
    st.sidebar.toggle("Presenter mode", key="presenter", help=EXPLANATIONS["presenter"], on_change=start_presentation)
    if not presenting():
        return None
    st.html(PRESENTER_CSS)
    return st.sidebar.container()


def trained_checkpoints() -> dict[str, CheckpointEntry]:
    """The models this session trained and opened (the Train view's "Explore this model"), while their folders
    exist."""
    entries = {}
    for name, path in st.session_state.get("trained_checkpoints", {}).items():
        if (Path(path) / "card.json").is_file():
            entries[name] = CheckpointEntry(name, path, read_card(path))
    return entries


def checkpoint_picker() -> tuple[CheckpointEntry, ModelKey, Translator]:
    """The checkpoint (its card, every folder's status) and the device: the entry, its cache key and the loaded model.

    Stops the page when no folder is usable.
    """
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
    trained = trained_checkpoints()
    usable.update(trained)
    names = list(usable)
    asked = (st.session_state.get("url_request") or {}).get("checkpoint")
    bind("checkpoint", DEFAULT_CHECKPOINT if DEFAULT_CHECKPOINT in usable else names[0], names)
    name = st.sidebar.selectbox(
        "Checkpoint",
        names,
        key="checkpoint",
        on_change=note_switch,
        format_func=lambda option: f"{option} (trained here)" if option in trained else option,
    )
    if asked is not None and asked not in usable:
        st.warning(f"Checkpoint “{escape_markdown(asked)}” is not available; using {escape_markdown(name)}.")
    entry = usable[name]
    st.sidebar.caption(describe_card(entry.card))
    bind("device")
    if not presenting():
        with st.sidebar.expander(f"All checkpoints ({len(usable)} usable, {len(skipped)} skipped)"):
            for usable_entry in usable.values():
                st.markdown(f"**{escape_markdown(usable_entry.name)}**: {describe_card(usable_entry.card)}")
            for skipped_entry in skipped:
                st.markdown(
                    f"Skipped **{escape_markdown(skipped_entry.name)}**: {escape_markdown(skipped_entry.error)}"
                )
        st.sidebar.radio(
            "Device", DEVICES, format_func=DEVICE_NAMES.get, horizontal=True, key="device", persist_state="page"
        )
    model_key = ModelKey.of(entry.path, st.session_state.device)  # stats the folder's files: once per run
    loading = st.spinner("Loading the model…") if model_key not in open_models() else nullcontext()
    with loading:
        translator = load_translator(model_key)
    if not presenting():
        st.sidebar.caption(f"Running on: **{translator.device}**")
    for notice in translator.notices:
        st.sidebar.warning(notice)
    return entry, model_key, translator


NO_LANGUAGE_CODE = ""  # the target-language picker's "none": the sentence goes to the model as typed


def target_language_picker(translator: Translator) -> str | None:
    """A multi-target model's target language (URL: target_language), read by the model as a leading ``>>xx<<``
    piece, opening on the card's target language when it is one of its codes. None for a model with one target
    language, or none picked."""
    card = translator.card
    codes = translator.tokenizer.language_codes()
    if not codes:
        return None
    options = [NO_LANGUAGE_CODE, *codes]
    bind("target_language", card.target_language if card.target_language in codes else NO_LANGUAGE_CODE, options)
    code = st.sidebar.selectbox(
        "Target language",
        options,
        format_func=lambda code: f">>{code}<< {LANGUAGE_NAMES.get(code, '')}".strip() if code else "none",
        key="target_language",
        help=EXPLANATIONS["target_language"],
    )
    return code or None


def language_pickers(translator: Translator) -> tuple[str | None, LanguagePair]:
    """A many-language model's source and target languages (URL: source_language, target_language), opening on the
    card's pair; or a multi-target Marian model's ``>>xx<<`` code (target_language_picker). (Marian's code or None,
    the pair or NO_LANGUAGES.)"""
    languages = translator.tokenizer.languages
    if languages is None:
        return target_language_picker(translator), NO_LANGUAGES
    codes = translator.tokenizer.language_codes()
    card = translator.card
    bind("source_language", card.source_language if card.source_language in codes else codes[0], codes)
    bind("target_language", card.target_language if card.target_language in codes else codes[-1], codes)
    pair = LanguagePair(
        *(
            st.sidebar.selectbox(label, codes, format_func=language_label, key=key, help=EXPLANATIONS["languages"])
            for label, key in (("Source language", "source_language"), ("Target language", "target_language"))
        )
    )
    return None, pair


def settings_controls(positions: int, authors: AuthorsDecoding | None) -> tuple[Decoding, TokenStyle]:
    """Decoding and display settings; presenter mode, and a view not about the sentence (the Train view), leave them
    out but keep their values. ``positions``: the model's (config.max_len), which bounds the output limit.
    ``authors``: an imported model's own decoding, offered as a preset that replaces the search settings."""
    if authors is not None:  # the preset's link only where the preset is: a model trained here has none
        bind("authors_decoding")
    bind("decoding")
    bind("beam_size")
    for key in SAMPLING_SETTINGS:
        bind(key)
    bind("max_new_tokens", None, [None, *range(1, positions - 1)])
    bind("teacher_forcing")
    for key in TOKEN_STYLE_TOGGLES:
        bind(key)
    as_authors = authors is not None and st.session_state.authors_decoding
    if not presenting() and sentence_view_chosen():
        st.sidebar.header("Decoding")
        if authors is not None:
            st.sidebar.toggle(
                "Decode as the model's authors do",
                key="authors_decoding",
                help=EXPLANATIONS["authors_decoding"],
                persist_state="page",
            )
            as_authors = st.session_state.authors_decoding
        if as_authors:
            st.sidebar.caption(authors_caption(authors))
        else:
            search_controls(positions)
        st.sidebar.toggle(
            "Teacher forcing: type the target myself",
            key="teacher_forcing",
            help=EXPLANATIONS["teacher_forcing"],
            on_change=prefill_target,
            persist_state="page",
        )
        st.sidebar.header("Display")
        st.sidebar.toggle("Merge subwords into words", key="merge_words", persist_state="page")
        st.sidebar.toggle("Show special tokens", key="show_special", help=EXPLANATIONS["special"], persist_state="page")
        st.sidebar.toggle("Write the weights in the cells", key="annotate", persist_state="page")
    state = st.session_state
    if as_authors:
        decoding = Decoding(authors.beam_size, authors.max_new_tokens, authors.scoring, authors.sampling)
    else:
        sampling = None
        if state.decoding == "sampling":
            sampling = Sampling(**{key: state[key] for key in SAMPLING_SETTINGS})
        decoding = Decoding(
            beam_size=state.beam_size if state.decoding == "beam" else 1,
            max_new_tokens=state.max_new_tokens,
            sampling=sampling,
        )
    return decoding, TokenStyle(**{key: state[key] for key in TOKEN_STYLE_TOGGLES})


def sentence_view_chosen() -> bool:
    """Whether the view this run draws is about the sentence: the Train view trains its own model, and the sentence's
    decoding and display settings do not apply to it."""
    choices = views.choices(presenting())
    return views.VIEWS[bind("view", choices[0], choices)].about_the_sentence


def search_controls(positions: int) -> None:
    """Our search: greedy, beam (its width) or sampling (its settings), and the output limit."""
    st.sidebar.radio(
        "Search", SEARCHES, format_func=str.capitalize, horizontal=True, key="decoding", persist_state="page"
    )
    if st.session_state.decoding == "beam":
        st.sidebar.slider("Beam size", BEAM_SIZES[0], BEAM_SIZES[-1], key="beam_size", persist_state="page")
    if st.session_state.decoding == "sampling":
        sampling_controls()
    st.sidebar.number_input(
        "Max output tokens",
        min_value=1,
        max_value=positions - 2,
        value=None,
        placeholder="automatic",
        key="max_new_tokens",
        persist_state="page",
    )


def sampling_controls() -> None:
    """Temperature, top-k, top-p and the seed: how each token is drawn (applied in that order, as generate does)."""
    low, high, step = TEMPERATURE_RANGE
    st.sidebar.slider(
        "Temperature", low, high, step=step, key="temperature", help=EXPLANATIONS["temperature"], persist_state="page"
    )
    top_k, top_p = st.sidebar.columns(2)
    top_k.number_input("Top-k", *TOP_K_RANGE, step=1, key="top_k", help=EXPLANATIONS["top_k"], persist_state="page")
    low, high, step = TOP_P_RANGE
    top_p.number_input(
        "Top-p", low, high, step=step, format="%.2f", key="top_p", help=EXPLANATIONS["top_p"], persist_state="page"
    )
    st.sidebar.number_input("Seed", *SEED_RANGE, step=1, key="seed", help=EXPLANATIONS["seed"], persist_state="page")


def authors_caption(authors: AuthorsDecoding) -> str:
    """What the authors' preset does, in words, and which of their settings it leaves out."""
    caption = f"As the model's authors decode (Hugging Face `generate` with their settings): {authors.describe()}."
    if authors.not_followed:  # read from the model's folder: shown as text, never as Markdown
        caption += f" Not followed here: {escape_markdown(', '.join(authors.not_followed))}."
    return caption
