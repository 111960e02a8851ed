"""Beam search tree: every hypothesis beam search examined, and where one beam looked when it chose its token."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_beam_node_trace, compute_beam_tree
from explorer.context import PageContext
from explorer.state import bind
from explorer.widgets import how_to_read, show_figure
from model.heads import layer_label
from viz.tokens import display_text


def render(ctx: PageContext) -> None:
    file_stem, handout = ctx.file_stem, ctx.handout.view
    explanation = how_to_read("beam_tree")
    beam_size = st.session_state.beam_size
    st.caption(f"Beam size {beam_size}, as set in the sidebar (Search: Beam).")
    bind("show_pruned")
    show_pruned = st.toggle("Show pruned candidates", key="show_pruned")
    tree = compute_beam_tree(ctx.trace_key, beam_size)
    show_figure(
        viz.beam_tree_figure(tree, show_pruned=show_pruned, title=f"Beam search (beam {beam_size}): every hypothesis"),
        f"{file_stem}-beam{beam_size}-tree",
        handout,
        explanation,
    )
    nodes = list(range(1, len(tree.nodes)))
    bind("beam_node", tree.results()[0].id, nodes)
    pick_node, pick_layer = st.columns([2, 1])
    node_id = pick_node.selectbox(
        "Where did this beam look?",
        nodes,
        format_func=lambda n: (
            f"step {tree.nodes[n].step}, rank {tree.nodes[n].rank + 1}: "
            f"{display_text(tree.nodes[n].piece)} ({tree.nodes[n].status})"
        ),
        key="beam_node",
    )
    node_trace = compute_beam_node_trace(ctx.trace_key, beam_size, node_id)
    layers = list(range(node_trace.attention_stack("cross").shape[0]))
    bind("layer", options=layers)
    layer = pick_layer.selectbox("Decoder layer", layers, format_func=layer_label, key="layer")
    rows = node_trace.attention_stack("cross")[layer, :, tree.trace_row(node_id), :]  # (heads, source tokens)
    show_figure(
        viz.step_attention(
            rows,
            node_trace.source_pieces,
            **ctx.token_style.options(),
            title=f"Cross-attention when this beam chose it, {layer_label(layer)}",
        ),
        f"{file_stem}-beam{beam_size}-node{node_id}-L{layer}",
        handout,
    )
