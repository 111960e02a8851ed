"""Embedding + positions: per piece the scaled token embedding, the positional encoding added to it and their sum,
the first layer's input (the bottom boxes of Figure 1)."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_activations
from explorer.context import PageContext
from explorer.state import EMBEDDING_PARTS, bind
from explorer.widgets import how_to_read, show_figure, stack_picker
from model.analysis.figure_one import position_share

PART_LABELS = {"token": "Token embedding", "position": "Positional encoding", "sum": "Their sum"}


def render(ctx: PageContext) -> None:
    stack = stack_picker()
    read = compute_activations(ctx.trace_key)
    pieces = read.source_pieces if stack == "encoder" else read.decoder_pieces
    token = read.point(stack, None, "hook_embed")
    total = read.point(stack, None, "hook_embed_pos")
    explanation = how_to_read("embedding", caveat=False)
    share = position_share(read, stack)
    st.markdown(
        f"Of the first {stack} layer's input, position is on average **{share.mean():.0%}** "
        f"(‖position‖ / (‖token‖ + ‖position‖); from {share.min():.0%} to {share.max():.0%} over the pieces)."
    )
    name = f"{ctx.file_stem}-{stack}-embedding"
    show_figure(
        viz.embedding_norms_figure(token, total - token, pieces, title="Token, position and their sum, per piece"),
        f"{name}-norms",
        ctx.handout.view,
        explanation,
    )
    bind("embedding_part")
    part = st.segmented_control(
        "Vector", EMBEDDING_PARTS, format_func=PART_LABELS.get, required=True, key="embedding_part"
    )
    values = {"token": token, "position": total - token, "sum": total}[part]
    show_figure(
        viz.dimensions_heatmap(values, pieces, title=f"{PART_LABELS[part]}, dimension by dimension", what="value"),
        f"{name}-{part}",
        ctx.handout.view,
    )
