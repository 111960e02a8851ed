"""Without word order: translate without the positional encoding, or with the source words shuffled."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_word_order
from explorer.context import PageContext
from explorer.state import bind
from explorer.widgets import how_to_read, module_pickers, show_figure, show_translations
from explorer.wording import WORD_ORDER_VARIANT_NAMES
from model.analysis.word_order import WORD_ORDER_VARIANTS
from model.heads import STACKS, HeadRef
from viz.word_order import WORD_ORDER_LABELS


def render(ctx: PageContext) -> None:
    file_stem, handout = ctx.file_stem, ctx.handout.view
    explanation = how_to_read("word_order")
    bind("word_order_variant")
    variant = st.segmented_control(
        "Experiment",
        WORD_ORDER_VARIANTS,
        format_func=WORD_ORDER_VARIANT_NAMES.get,
        required=True,
        key="word_order_variant",
    )
    stacks, seed = STACKS, 0
    if variant == "no-pe":
        bind("word_order_stacks")
        stacks = tuple(
            st.pills(
                "Remove it from", STACKS, selection_mode="multi", format_func=str.capitalize, key="word_order_stacks"
            )
        )
        if not stacks:
            st.info("Pick the encoder, the decoder or both.")
            return
    else:
        bind("word_order_seed")
        seed = st.number_input("Shuffle number (the same number gives the same order)", 0, 999, key="word_order_seed")
    comparison = compute_word_order(ctx.trace_key, variant, stacks, seed)
    label = WORD_ORDER_LABELS[variant]
    rows = [("Original", comparison.original.translation), (label.capitalize(), comparison.modified.translation)]
    if variant == "shuffle":
        rows.insert(1, ("Shuffled sentence", comparison.modified.source_text))
    show_translations(rows, f"Translation {label}", handout)
    show_figure(viz.word_order_tokens_figure(comparison), f"{file_stem}-{variant}-tokens", handout, explanation)
    kind, layer, head = module_pickers(ctx.trace)
    figure = viz.word_order_attention_figure(
        comparison, HeadRef(kind, layer, head).module_name, head, **ctx.token_style.without_numbers()
    )
    show_figure(figure, f"{file_stem}-{variant}-{kind}-L{layer}H{head}", handout)
