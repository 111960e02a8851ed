"""The positional encoding: the sine/cosine matrix, chosen dimensions, similarity of positions, and its size."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.context import PageContext
from explorer.state import bind
from explorer.widgets import how_to_read, show_figure
from model.heads import STACKS


def render(ctx: PageContext) -> None:
    trace, handout = ctx.trace, ctx.handout.view
    bind("positional_stack")
    stack = st.radio("Stack", STACKS, format_func=str.capitalize, horizontal=True, key="positional_stack")
    encoding = trace.positional[f"{stack}.positional"]
    pieces = trace.source_pieces if stack == "encoder" else trace.decoder_input_pieces
    d_model = encoding.shape[1]
    all_dimensions = list(range(d_model))
    bind("positional_dimensions", sorted({0, 1, 4, 5, d_model // 2, d_model - 1} & set(all_dimensions)), all_dimensions)
    dimensions = st.multiselect("Dimensions to plot", all_dimensions, key="positional_dimensions")
    explanation = how_to_read("positional", caveat=False)
    name = f"{ctx.file_stem}-{stack}-positional"
    show_figure(
        viz.positional_matrix(encoding, pieces, title="Positional encoding added at each position"),
        f"{name}-matrix",
        handout,
        explanation,
    )
    show_figure(
        viz.positional_curves(encoding, dimensions, title="Chosen dimensions along the sentence"),
        f"{name}-curves",
        handout,
    )
    show_figure(
        viz.positional_similarity(encoding, pieces, title="Similarity of positions (dot products)"),
        f"{name}-similarity",
        handout,
    )
    show_figure(
        viz.encoding_norms(encoding, trace.embedding_norms[stack], pieces, title="Size of position vs. size of token"),
        f"{name}-norms",
        handout,
    )
