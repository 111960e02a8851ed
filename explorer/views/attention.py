"""Explore one kind of attention: one head, all heads, the head view (lines), or aggregates over heads."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

import viz
from explorer.admission import in_turn
from explorer.components import head_view as head_view_component
from explorer.context import PageContext
from explorer.state import ALL_QUERIES, DISPLAYS, bind, presenting, write_url_after_fragment
from explorer.widgets import figure_as_text, how_to_read, layer_and_head_pickers, show_figure
from explorer.wording import DISPLAY_NAMES
from model.analysis.attribution import attention_rollout
from model.heads import KIND_TITLES, head_title, layer_label
from viz.export import HandoutSection
from viz.grid import grid_page_layers
from viz.presenter import PRESENTER_SCALE
from viz.trace_views import AttentionAxes


@st.fragment
@in_turn
def render(ctx: PageContext, kind: str) -> None:
    """The view as a fragment: a new layer, head or display redraws this view alone, not the whole page (in a
    browser, re-rendering every element of the page was most of such a change: docs/performance.md)."""
    ctx.handout.view = []  # this fragment's charts replace the ones of its previous run
    draw(ctx, kind)
    write_url_after_fragment()


def draw(ctx: PageContext, kind: str) -> None:
    """The figure, with what to show, the layer and head, and how to read it in a column beside it.

    Cross-attention opens on the page's first head (PageContext.first_head), the others on the first layer and head.
    """
    axes = viz.attention_axes(ctx.trace, kind)
    figure_area, controls = st.columns([3, 1])
    with controls:
        bind("display")
        # a radio, not a segmented control: four choices do not fit a control's one row in this column
        mode = st.radio("Show", DISPLAYS, format_func=DISPLAY_NAMES.get, key="display")
        default = ctx.first_head if kind == "cross" else (0, 0)
        layer, head = layer_and_head_pickers(axes.stack.shape, default, side=True)
        grid_layers = grid_layer_picker(*axes.stack.shape[:2]) if mode == "grid" else None
        topics = [kind, mode]
        if mode == "aggregates" and kind != "encoder_self":
            topics.append(f"rollout_{kind}")  # rollout_decoder_self, rollout_cross
        explanation = how_to_read(*topics)
    name = f"{ctx.file_stem}-{kind}-{mode}"
    title = KIND_TITLES[kind]
    token_style = ctx.token_style
    with figure_area:
        if mode == "heads":
            head_view(ctx, axes, kind, (layer, head), f"{name}-L{layer}", explanation)
            return
        if mode == "single":
            figure = viz.head_heatmap(axes, layer, head, **token_style.options(), title=head_title(kind, layer, head))
            name = f"{name}-L{layer}H{head}"
        elif mode == "grid":
            figure = grid_figure(axes, grid_layers, token_style.without_numbers(), title)
            if len(grid_layers) < len(axes.stack):
                name = f"{name}-L{layers_key(grid_layers)}"
        else:
            figure = aggregates_figure(
                axes, kind, layer, token_style.options(), f"{title}, {layer_label(layer)}: aggregates"
            )
            name = f"{name}-L{layer}"
        show_figure(figure, name, ctx.handout.view, explanation)


def grid_layer_choices(n_layers: int, n_heads: int) -> dict[str, range]:
    """The layers the all-heads grid offers, by their URL text: its pages ("0-2", "3-5": grid_page_layers each), all
    layers where that is more than a page (scrolling), then each layer alone ("4": all its heads in one row)."""
    per_page = grid_page_layers(n_heads)
    pages = [range(first, min(first + per_page, n_layers)) for first in range(0, n_layers, per_page)]
    if len(pages) > 1:
        pages.append(range(n_layers))
    singles = [range(layer, layer + 1) for layer in range(n_layers)] if per_page > 1 else []
    return {layers_key(layers): layers for layers in [*pages, *singles]}


def layers_key(layers: range) -> str:
    """Layers as the URL and file names write them: "4", "3-5"."""
    return str(layers[0]) if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"


def layers_text(layers: range, n_layers: int) -> str:
    """A grid choice in words, counted from 1: "layer 4", "layers 3–5", "all layers (1–6)"."""
    if len(layers) == 1:
        return layer_label(layers[0])
    span = f"{layers[0] + 1}–{layers[-1] + 1}"
    return f"all layers ({span})" if len(layers) == n_layers else f"layers {span}"


def grid_layer_picker(n_layers: int, n_heads: int) -> range:
    """The layers the grid draws (URL: grid_layers), its first page at first; no picker where there is one layer."""
    choices = grid_layer_choices(n_layers, n_heads)
    first_page = next(iter(choices))
    if len(choices) == 1:
        return choices[first_page]
    bind("grid_layers", first_page, list(choices))
    chosen = st.selectbox(
        "Layers in the grid",
        list(choices),
        format_func=lambda key: layers_text(choices[key], n_layers),
        key="grid_layers",
    )
    return choices[chosen]


def grid_figure(axes: AttentionAxes, layers: range, tokens: dict[str, bool], title: str) -> go.Figure:
    """The all-heads grid of ``layers``, titled with them where they are not all of the model's."""
    if len(layers) < len(axes.stack):
        title = f"{title}, {layers_text(layers, len(axes.stack))}"
    return viz.attention_grid(
        axes.stack,
        axes.query_pieces,
        axes.key_pieces,
        layers=layers,
        **tokens,
        font_scale=PRESENTER_SCALE if presenting() else 1.0,
        title=title,
    )


def aggregates_figure(axes: AttentionAxes, kind: str, layer: int, options: dict[str, bool], title: str) -> go.Figure:
    """Mean and max over ``layer``'s heads and, for self-attention, the attention rollout through it (cross-attention
    has none: its queries and keys are different tokens)."""
    rollout = None if kind == "cross" else attention_rollout(axes.stack[: layer + 1])[-1]
    return viz.aggregate_figure(
        axes.stack, layer, axes.query_pieces, axes.key_pieces, rollout=rollout, **options, title=title
    )


def head_view(
    ctx: PageContext, axes: AttentionAxes, kind: str, layer_head: tuple[int, int], name: str, explanation: str
) -> None:
    """The layer's heads as lines, drawn in the browser, opening on the head picked beside it; the handout export
    gets the same heads and query as a plotly figure."""
    layer, head = layer_head
    title = f"{head_title(kind, layer)} – all heads"
    tokens = ctx.token_style.without_numbers()
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
    ctx.handout.view.append(HandoutSection(title, explanation, figure))
    options = ctx.token_style.options()

    def tables() -> list[viz.FigureTable]:  # one per head drawn, as its single-head heatmap holds it
        heatmaps = [viz.head_heatmap(axes, layer, h, **options, title=head_title(kind, layer, h)) for h in heads]
        return [table for heatmap in heatmaps for table in viz.figure_tables(heatmap)]

    figure_as_text(
        f"{title}: lines from each {axes.query_title.split(' (')[0]} on the left to the tokens it reads on the right, "
        f"thicker for larger weights; heads shown: {', '.join(map(str, heads))}.",
        tables,
        name,
    )
