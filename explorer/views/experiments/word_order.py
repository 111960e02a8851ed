"""Without word order: translate without the positional encoding, or with the source words shuffled."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_positional
from explorer.context import PageContext
from explorer.copy import PE_EXPERIMENT_NAMES
from explorer.state import bind
from explorer.widgets import how_to_read, module_pickers, show_figure, show_translations
from model.analysis.positional import POSITIONAL_EXPERIMENTS, POSITIONAL_STACKS
from model.heads import HeadRef
from viz.interventions import EXPERIMENT_LABELS


def render(ctx: PageContext) -> None:
    file_stem, lesson = ctx.file_stem, ctx.lesson.view
    explanation = how_to_read("word_order")
    bind("pe_experiment")
    experiment = st.segmented_control(
        "Experiment", POSITIONAL_EXPERIMENTS, format_func=PE_EXPERIMENT_NAMES.get, required=True, key="pe_experiment"
    )
    stacks, seed = POSITIONAL_STACKS, 0
    if experiment == "no-pe":
        bind("pe_stacks")
        stacks = tuple(
            st.pills(
                "Remove it from", POSITIONAL_STACKS, selection_mode="multi", format_func=str.capitalize, key="pe_stacks"
            )
        )
        if not stacks:
            st.info("Pick the encoder, the decoder or both.")
            return
    else:
        bind("pe_seed")
        seed = st.number_input("Shuffle number (the same number gives the same order)", 0, 999, key="pe_seed")
    comparison = compute_positional(ctx.trace_key, experiment, stacks, seed)
    label = EXPERIMENT_LABELS[experiment]
    rows = [("Original", comparison.original.translation), (label.capitalize(), comparison.modified.translation)]
    if experiment == "shuffle":
        rows.insert(1, ("Shuffled sentence", comparison.modified.source_text))
    show_translations(rows, f"Translation {label}", lesson)
    show_figure(viz.positional_tokens_figure(comparison), f"{file_stem}-{experiment}-tokens", lesson, explanation)
    kind, layer, head = module_pickers(ctx.trace)
    figure = viz.positional_attention_figure(
        comparison, HeadRef(kind, layer, head).module_name, head, **ctx.display.tokens()
    )
    show_figure(figure, f"{file_stem}-{experiment}-{kind}-L{layer}H{head}", lesson)
