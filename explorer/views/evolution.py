"""Training evolution: the same head for the same sentence at each training stage, side by side."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

import viz
from explorer.compute import ModelKey, TraceKey, compute_trace
from explorer.context import PageContext
from explorer.widgets import attention_kind_picker, how_to_read, layer_and_head_pickers, show_figure
from explorer.wording import STAGE_NAMES, escape_markdown, no_snapshots, stage_label
from model.checkpoint import CheckpointError, find_snapshots, read_card
from model.heads import head_title
from model.trace import Trace
from viz.export import HandoutSection


def training_stages(
    ctx: PageContext, snapshots: dict[str, Path]
) -> tuple[dict[str, Trace], list[tuple[str, str, str]]]:
    """Each training stage's trace (``snapshots``: find_snapshots of the page's checkpoint), teacher-forced with
    this page's output tokens so that every stage reads the same tokens (keyed by the stage's name, "early in
    training", oldest first: the chart's panel titles), and a table row of its own free translation (labelled
    with the update count as well, "early in training (update 200)")."""
    page_key = ctx.trace_key
    forced_ids = tuple(ctx.trace.target_ids[1:])  # BOS left out
    aligned, translations = {}, []
    for stage, path in snapshots.items():
        card = read_card(path)
        label = stage_label(stage, card)
        free = TraceKey(
            ModelKey.of(path, page_key.model.device), ctx.trace.source_text, page_key.beam_size, page_key.max_new_tokens
        )
        try:
            aligned[STAGE_NAMES.get(stage, stage)] = compute_trace(
                TraceKey(free.model, free.text, 1, None, target_ids=forced_ids)
            )
            own = compute_trace(free)
        except (CheckpointError, ValueError) as error:
            st.warning(f"The {escape_markdown(stage)} stage cannot be used: {escape_markdown(str(error))}")
            continue
        translations.append((label, own.translation, card.description or ""))
    return aligned, translations


def render(ctx: PageContext) -> None:
    """The same head at each training stage, side by side, and each stage's own translation."""
    handout = ctx.handout.view
    explanation = how_to_read("evolution")
    snapshots = find_snapshots(ctx.entry.path)
    if len(snapshots) == 1:
        st.info(no_snapshots(ctx.entry.name))
        return
    kind = attention_kind_picker("evolution_kind")
    aligned, translations = training_stages(ctx, snapshots)
    final_axes = viz.attention_axes(ctx.trace, kind)
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
        **ctx.token_style.options(),
        # the head alone: the panels ("untrained", "early in training", "finished model") say when, and a
        # longer title reaches the chart's toolbar in presenter mode
        title=head_title(kind, layer, head),
    )
    show_figure(figure, f"{ctx.file_stem}-{kind}-evolution-L{layer}H{head}", handout, explanation)
    st.markdown("**The translation at each stage** (each stage translating on its own)")
    st.dataframe(
        pd.DataFrame(translations, columns=["stage", "translation", "about this stage"]),
        hide_index=True,
        width="stretch",
    )
    rows = [(label, translation) for label, translation, _ in translations]
    handout.append(HandoutSection("The translation at each stage", rows=rows))
