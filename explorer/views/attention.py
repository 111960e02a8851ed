"""Explore one kind of attention: one head, all heads, the head view (lines), or aggregates over heads."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.components import head_view as head_view_component
from explorer.context import PageContext
from explorer.copy import DISPLAY_NAMES
from explorer.state import ALL_QUERIES, DISPLAYS, bind
from explorer.widgets import how_to_read, layer_and_head_pickers, show_figure
from model.heads import KIND_TITLES, head_title
from viz.export import LessonSection
from viz.trace_views import AttentionAxes


def render(ctx: PageContext, kind: str) -> None:
    """The figure, with what to show, the layer and head, and how to read it in a column beside it.

    Cross-attention opens on the page's first head (PageContext.first_head), the others on layer 0, head 0.
    """
    axes = viz.attention_axes(ctx.trace, kind)
    figure_area, controls = st.columns([3, 1])
    with controls:
        bind("display")
        # a radio, not a segmented control: four choices do not fit a control's one row in this column
        mode = st.radio("Show", DISPLAYS, format_func=DISPLAY_NAMES.get, key="display")
        default = ctx.first_head if kind == "cross" else (0, 0)
        layer, head = layer_and_head_pickers(axes.stack.shape, default, side=True)
        topics = [kind, mode]
        if mode == "aggregates" and kind != "encoder":
            topics.append("rollout_decoder" if kind == "decoder" else "rollout_cross")
        explanation = how_to_read(*topics)
    name = f"{ctx.file_stem}-{kind}-{mode}"
    title = KIND_TITLES[kind]
    display = ctx.display
    with figure_area:
        if mode == "heads":
            head_view(ctx, axes, kind, (layer, head), f"{name}-L{layer}", explanation)
            return
        if mode == "single":
            figure = viz.head_heatmap(axes, layer, head, **display.options(), title=head_title(kind, layer, head))
            name = f"{name}-L{layer}H{head}"
        elif mode == "grid":
            figure = viz.attention_grid(axes.stack, axes.query_pieces, axes.key_pieces, **display.tokens(), title=title)
        else:
            figure = viz.aggregate_figure(
                axes.stack,
                layer,
                axes.query_pieces,
                axes.key_pieces,
                rollout=kind != "cross",
                **display.options(),
                title=f"{title}: aggregates",
            )
            name = f"{name}-L{layer}"
        show_figure(figure, name, ctx.lesson.view, explanation)


def head_view(
    ctx: PageContext, axes: AttentionAxes, kind: str, layer_head: tuple[int, int], name: str, explanation: str
) -> None:
    """The layer's heads as lines, drawn in the browser, opening on the head picked beside it; the lesson export
    gets the same heads and query as a plotly figure."""
    layer, head = layer_head
    title = f"{head_title(kind, layer)} – all heads"
    tokens = ctx.display.tokens()
    stack = axes.stack[layer]
    query, heads = head_view_component.draw(
        stack, axes.query_pieces, axes.key_pieces, title=title, filename=name, default_head=head, tokens=tokens
    )
    figure = viz.head_view(
        stack,
        axes.query_pieces,
        axes.key_pieces,
        heads=heads,
        query=None if query == ALL_QUERIES else query,
        **tokens,
        title=title,
    )
    ctx.lesson.view.append(LessonSection(title, explanation, figure))
