"""Inside one head: the stages of scaled dot-product attention for one query row, each with its shape."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_stages
from explorer.context import PageContext
from explorer.state import bind
from explorer.widgets import how_to_read, module_pickers, show_figure
from model.heads import HeadRef
from viz.tokens import display_text

STAGE_ROWS = (("q", "k", "v"), ("scores", "scaled"), ("mask", "masked"), ("softmax", "contributions", "output"))


def render(ctx: PageContext) -> None:
    trace = ctx.trace
    explanation = how_to_read("internals")
    kind, layer, head = module_pickers(trace)
    queries = viz.attention_axes(trace, kind).query_pieces
    rows = list(range(len(queries)))
    bind("query_row", options=rows)
    row = st.selectbox(
        "Query row" if kind == "encoder_self" else "Query row (decoding step)",
        rows,
        format_func=lambda r: f"{r}: {display_text(queries[r])}",
        key="query_row",
    )
    stages = compute_stages(ctx.trace_key, HeadRef(kind, layer, head).module_name, head, row)
    figures = viz.attention_stage_figures(stages)
    name = f"{ctx.file_stem}-{kind}-L{layer}H{head}-row{row}"
    for group in STAGE_ROWS:
        for column, stage in zip(st.columns(len(group)), group, strict=True):
            with column:
                show_figure(figures[stage], f"{name}-{stage}", ctx.handout.view, explanation if stage == "q" else "")
