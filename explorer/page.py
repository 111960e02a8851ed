"""The page around the views: the sentence box, the translation (with notices about it), tokens and downloads."""

from __future__ import annotations

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

import viz
from explorer.components import assistive, reconnect, svg_download
from explorer.compute import ModelKey, TraceKey, compute_trace, readable_head, source_words
from explorer.context import Handout, PageContext
from explorer.explanations import CAVEAT, EXPLANATIONS
from explorer.sidebar import (
    checkpoint_picker,
    language_pickers,
    presenter_toggle,
    settings_controls,
)
from explorer.state import bind, presenting
from explorer.widgets import show_figure
from explorer.wording import (
    LANGUAGE_NAMES,
    NO_TARGET_LANGUAGE,
    card_examples,
    domain_name,
    escape_markdown,
    learned_from,
    rare_words_line,
    unlike_training_notice,
)
from model.analysis.domain import domain_signals, unlike_training
from model.card import Card
from model.checkpoint import CheckpointEntry
from model.heads import parse_module_name
from model.tokenizer import starts_with_language_code, with_language_code
from model.trace import Trace
from model.translator import Translator
from viz.export import handout_html
from viz.tables import TABLE_CSS

DETAILS_LABEL = "Tokenization and how sure the model was of each token"  # the folded section under the view


def use_example() -> None:
    """Copy the picked example into the sentence box and clear the picker, which acts as a menu."""
    if st.session_state.example:
        st.session_state.sentence = st.session_state.example
        st.session_state.example = None


def source_section(card: Card, controls: DeltaGenerator | None) -> tuple[str, str | None]:
    """The sentence box (Enter translates) with example sentences beside it and, with teacher forcing, the target.

    In presenter mode the box alone, in ``controls`` (the sidebar's slot).
    """
    examples = card_examples(card)
    bind("sentence", examples[0])
    about_the_model = learned_from(card)
    if about_the_model and not presenting():
        st.caption(about_the_model)
    box, picker = (controls, None) if controls is not None else st.columns([3, 1], vertical_alignment="bottom")
    text = box.text_input("Source sentence", key="sentence", help=EXPLANATIONS["sentence"])
    if picker is not None:
        picker.selectbox(
            "Example sentences",
            examples,
            index=None,
            placeholder="Pick an example…",
            key="example",
            on_change=use_example,
        )
    bind("target")
    if st.session_state.teacher_forcing and not presenting():
        st.text_input("Target sentence (the model reads these tokens)", key="target", persist_state="page")
    target = st.session_state.target if st.session_state.teacher_forcing else None
    return text, target or None


def unsuitable(translator: Translator, language: str | None, text: str) -> str:
    """Why ``text``, written for a checkpoint reading ``language``, does not suit ``translator``'s model; "" if it does.

    It does not when the models read different languages (a toy task's symbols are not English), or
    when the tokenizer has no piece for part of it (<unk>): the model would translate nothing real.
    """
    reads = translator.card.source_language
    if language != reads and translator.tokenizer.languages is None:  # a many-language model reads them all
        return f"this model reads {LANGUAGE_NAMES.get(reads, reads or 'another language')}"
    pieces = translator.tokenizer.pieces(translator.source_ids(text).ids)
    unknown = sum(piece == "<unk>" for piece in pieces)
    return f"this model's tokenizer has no pieces for {unknown} of its parts (<unk>)" if unknown else ""


def fit_sentence(translator: Translator) -> None:
    """After a checkpoint switch, swap a sentence the new model cannot read for the model's own first example.

    Only on the switch: afterwards the person may type anything. The page says what happened and why.
    """
    switched = st.session_state.pop("checkpoint_switched", False)
    language = st.session_state.get("sentence_language")
    st.session_state.sentence_language = translator.card.source_language
    text = st.session_state.get("sentence", "")
    if not switched or not text.strip():
        return
    reason = unsuitable(translator, language, text)
    if reason:
        example = card_examples(translator.card)[0]
        st.session_state.sentence = example
        st.info(
            f"The sentence “{escape_markdown(text)}” does not suit this checkpoint ({escape_markdown(reason)}), "
            f"so it shows one of its own examples: “{escape_markdown(example)}”."
        )


def first_head(entry: CheckpointEntry, key: ModelKey) -> tuple[int, int]:
    """The cross-attention (layer, head) the page opens on: a toy card's clearest head (its ``toy_task.clearest_head``,
    scored against the task's known alignment), else the head that reads most like a word alignment over the card's
    examples."""
    clearest = entry.card.toy_task.clearest_head if entry.card.toy_task else None
    if clearest is not None:
        try:
            kind, layer = parse_module_name(clearest.module)
        except ValueError:  # a card that names no attention module: find a head instead
            kind, layer = "", 0
        if kind == "cross":
            return layer, clearest.head
    return readable_head(key, tuple(card_examples(entry.card)))


def open_page() -> PageContext | None:
    """The sidebar and the sentence, translated: the context every view draws from (None without a sentence)."""
    assistive.skip_link()
    controls = presenter_toggle()
    entry, model_key, translator = checkpoint_picker()
    language_code, languages = language_pickers(translator)
    fit_sentence(translator)
    decoding, token_style = settings_controls(translator.config.max_len, translator.authors_decoding)
    with st.sidebar:
        svg_download.mount()  # draws nothing: it adds the SVG button to every chart's toolbar
        assistive.reduce_motion()  # draws nothing either
    reconnect.mount()
    text, target = source_section(entry.card, controls)
    if not text.strip():
        st.session_state.translation = ""
        st.info("Type a sentence in the box above (or pick an example) to see its translation and attention.")
        return None
    multi_target = translator.tokenizer.language_codes() and translator.tokenizer.languages is None
    if multi_target and not (language_code or starts_with_language_code(text)):
        st.warning(NO_TARGET_LANGUAGE)
    text = with_language_code(text, language_code)
    trace_key = TraceKey(
        model_key,
        text,
        decoding.beam_size,
        decoding.max_new_tokens,
        target,
        scoring=decoding.scoring,
        sampling=decoding.sampling,
        languages=languages,
    )
    trace = compute_trace(trace_key)
    if st.session_state.teacher_forcing and target is None:
        st.info(
            "Type a target sentence to see the attention the model gives it; until then the model translates freely."
        )
    st.session_state.translation = trace.translation
    return PageContext(
        entry, translator.config, trace, trace_key, token_style, first_head(entry, model_key), Handout(), controls
    )


def cut_off_notice(trace: Trace) -> str:
    """Why a translation stopped before the model ended it, and how to let it finish."""
    if trace.settings.scoring:
        return (
            f"The translation was cut off: it reached the model's authors' limit of {trace.n_steps} output tokens "
            "before the model ended it (their settings end it with </s> there). Turn off *Decode as the model's "
            "authors do* and raise *Max output tokens* to let it finish."
        )
    return (
        f"The translation was cut off: it reached the limit of {trace.n_steps} output tokens before the model "
        "ended it. Raise *Max output tokens* in the sidebar to let it finish."
    )


def translation_section(ctx: PageContext, hide_output: bool) -> None:
    """The translation (or the typed target, marked as such) and any notice about the sentence; ``hide_output``
    keeps the translation for the quiz to reveal. Screen readers hear the translation and the notices' gist."""
    trace = ctx.trace
    spoken = []
    outcome = trace.outcome
    if outcome.notice:
        st.warning(outcome.notice)
        spoken.append(outcome.notice)
    if outcome.truncated:
        truncated = (
            f"The sentence has {outcome.source_pieces_before_truncation} pieces; only the first "
            f"{len(trace.source_pieces) - 1} fit the model and were used."
        )
        st.warning(truncated)
        spoken.append(truncated)
    if outcome.cut_off:
        cut_off = cut_off_notice(trace)
        st.warning(cut_off, icon=":material/content_cut:")
        spoken.append(cut_off.replace("*", ""))
    calibration = ctx.card.domain_section.calibration
    reasons = unlike_training(domain_signals(trace), calibration) if calibration is not None else []
    if reasons and trace.settings.mode != "forced":
        st.warning(unlike_training_notice(ctx.card, reasons), icon=":material/travel_explore:")
        spoken.append(f"Warning: this sentence is unlike the {domain_name(ctx.card)} this model learned from.")
    if hide_output:
        st.markdown(f"**Translation** ({ctx.mode}): hidden during the quiz; guess it step by step below.")
        spoken.insert(0, "Translation hidden during the quiz.")
    elif trace.settings.mode == "forced":
        st.markdown("**Your target** (teacher forcing: the model reads these tokens; it did not write them)")
        st.markdown(f"### :orange[{escape_markdown(trace.translation) or '(empty)'}]")
        spoken.insert(0, f"Your target: {trace.translation or '(empty)'}")
    else:
        # on the slide the sentence box is in the sidebar, which a teacher may fold away: the source goes with it
        source = f"“{escape_markdown(trace.source_text)}” → " if ctx.controls is not None else ""
        st.markdown(f"{source}**Translation** ({ctx.mode})")
        st.markdown(f"### {escape_markdown(trace.translation) or '(empty)'}")
        spoken.insert(0, f"Translation: {trace.translation or '(empty)'}")
    assistive.announce("translation", *spoken)
    words = source_words(ctx.trace_key.model)
    if words is not None and (rare := words.rare(trace.source_text)):
        st.caption(rare_words_line(ctx.card, rare, words.sentences))


def details_section(ctx: PageContext, hide_output: bool) -> None:
    """The downloads and, once opened, the sentence's pieces with their ids and how sure the model was of each
    token."""
    trace = ctx.trace
    st.header("Tokens and downloads")
    # Folded until opened, and then drawn: this section is below a 1280x800 screen, and a chart drawn costs every
    # edit a share of its redraw (a folded expander would still draw what it holds).
    details = st.expander(DETAILS_LABEL, key="details", on_change="rerun", width="stretch")
    if details.open:
        with details:
            # an HTML table rather than st.dataframe: the data grid loads a script of its own and draws a canvas,
            # and a screen reader reads a table's cells where a canvas says nothing
            st.html(TABLE_CSS + viz.table_html(viz.tokenization_table(trace.source_pieces, trace.source_ids)))
            if not hide_output:
                probabilities = viz.token_probabilities(
                    trace.predicted_pieces, trace.step_probs, title="Probability of each output token"
                )
                show_figure(probabilities, f"{ctx.file_stem}-probabilities", ctx.handout.translation)
    downloads(ctx)


def downloads(ctx: PageContext) -> None:
    """The trace as JSON or NPZ and the handout as HTML, written only when a button is clicked (deferred data)."""
    trace, file_stem = ctx.trace, ctx.file_stem
    left, middle, right = st.columns(3)
    left.download_button(
        "Download trace (JSON)", trace.to_json, f"{file_stem}.json", "application/json", on_click="ignore"
    )
    middle.download_button(
        "Download trace (NPZ)", trace.to_npz_bytes, f"{file_stem}.npz", "application/octet-stream", on_click="ignore"
    )
    right.download_button(
        "Download handout (HTML)",
        lambda: handout_file(ctx),
        f"{file_stem}-handout.html",
        "text/html",
        on_click="ignore",
        help=EXPLANATIONS["export"],
        key="handout_download",
    )


def handout_file(ctx: PageContext) -> str:
    """The handout export of what the page shows now (its step section follows the fragment's reruns)."""
    trace = ctx.trace
    facts = [
        ("Checkpoint", ctx.entry.name),
        ("Source sentence", trace.source_text),
        ("Translation", trace.translation),
        ("Decoding", ctx.mode),
    ]
    return handout_html(
        "Attention explorer: a handout on one sentence", ctx.handout.sections(), facts=facts, caveat=CAVEAT
    )
