"""The positional encoding: the sine/cosine matrix, chosen dimensions, similarity of positions, and its size."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.context import PageContext
from explorer.state import bind
from explorer.widgets import how_to_read, show_figure
from model.analysis.positional import POSITIONAL_STACKS


def render(ctx: PageContext) -> None:
    trace, lesson = ctx.trace, ctx.lesson.view
    bind("positional_side")
    side = st.radio("Side", POSITIONAL_STACKS, format_func=str.capitalize, horizontal=True, key="positional_side")
    encoding = trace.positional[f"{side}.positional"]
    pieces = trace.source_pieces if side == "encoder" else trace.decoder_input_pieces
    d_model = encoding.shape[1]
    all_dimensions = list(range(d_model))
    bind("positional_dimensions", sorted({0, 1, 4, 5, d_model // 2, d_model - 1} & set(all_dimensions)), all_dimensions)
    dimensions = st.multiselect("Dimensions to plot", all_dimensions, key="positional_dimensions")
    explanation = how_to_read("positional", caveat=False)
    name = f"{ctx.file_stem}-{side}-positional"
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
