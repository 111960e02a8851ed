"""Building blocks every view uses: the figure + export block, the "How to read this" panel, shared pickers."""

from __future__ import annotations

import html
from collections.abc import Callable

import plotly.graph_objects as go
import streamlit as st

import viz
from explorer.explanations import CAVEAT, EXPLANATIONS
from explorer.state import bind, presenting
from explorer.wording import escape_markdown
from model.config import TransformerConfig
from model.heads import ATTENTION_KINDS, KIND_TITLES, STACKS, head_label, layer_label
from model.trace import Trace
from viz.export import HandoutSection
from viz.tables import TABLE_CSS


def show_figure(
    figure: go.Figure, name: str, handout: list[HandoutSection] | None = None, explanation: str = ""
) -> None:
    """A chart whose toolbar camera button downloads it as ``name``.png, enlarged in presenter mode, with its text
    alternative under it: a line saying what it shows and a "Show as table" switch for the same numbers. The
    figure's margins are fitted to its labels (viz.fit_margins, in place), so the browser draws it once.

    With ``handout``, the chart (at normal size) and ``explanation`` also go into the handout export.
    """
    viz.fit_margins(figure)
    shown = viz.fit_margins(viz.enlarge(figure)) if presenting() else figure
    st.plotly_chart(shown, theme=None, config=viz.chart_config(name), key=f"chart-{name}")
    figure_as_text(viz.describe(figure), lambda: viz.figure_tables(figure), name)
    if handout is not None:
        handout.append(HandoutSection(html.unescape(figure.layout.title.text or name), explanation, figure))


def figure_as_text(description: str, tables: Callable[[], list[viz.FigureTable]], name: str) -> None:
    """A figure's text alternative: its one-line ``description`` and a switch that shows its numbers as the tables
    ``tables()`` builds (only when switched on: a page that does not show them does not pay for them)."""
    # side by side, the switch as wide as its label and the line taking the rest: in a column of a quarter of the
    # row, beside a chart in a third of the page (the quiz's answer, presenter mode), the label was cut to "S…"
    with st.container(horizontal=True, vertical_alignment="center", wrap=False):
        st.caption(escape_markdown(description))
        shown = st.toggle("Show as table", key=f"table-{name}")
    if shown:
        st.html(TABLE_CSS + "".join(viz.table_html(table) for table in tables()))


def help_opens(topic: str) -> bool:
    """Whether the "How to read this" of ``topic`` opens: on the first view a session meets, until it meets another;
    folded from then on and in presenter mode. Open everywhere, it pushed the steps' chart and the quiz's answer
    buttons below the first screen."""
    state = st.session_state
    if "help_open_for" not in state:
        state.help_open_for = topic
    elif state.help_open_for != topic:
        state.help_open_for = None  # another view met: every panel folded for the rest of the session
    return state.help_open_for == topic and not presenting()


def how_to_read(*topics: str, caveat: bool = True, folded: bool = False) -> str:
    """The view's "How to read this" panel (open on the first view a session meets: ``help_opens``, unless
    ``folded``: the view has something of its own to show first); returns its text. The first topic names the view."""
    text = "\n\n".join(EXPLANATIONS[topic] for topic in topics)
    with st.expander("How to read this", expanded=help_opens(topics[0]) and not folded, icon=":material/school:"):
        st.markdown(text)
        if caveat:
            st.caption(CAVEAT)
    return text


def layer_and_head_pickers(stack_shape: tuple[int, ...], default: tuple[int, int] = (0, 0), side: bool = False):
    """Layer and head of a (layers, heads, ...) attention stack (URL: layer, head), side by side, or one under the
    other (``side``: for a column beside a figure)."""
    n_layers, n_heads = stack_shape[:2]
    layers, heads = list(range(n_layers)), list(range(n_heads))
    default_layer, default_head = default if default[0] < n_layers and default[1] < n_heads else (0, 0)
    bind("layer", default_layer, layers)
    bind("head", default_head, heads)
    picker_layer, picker_head = (st.container(), st.container()) if side else st.columns(2)
    layer = picker_layer.selectbox("Layer", layers, format_func=layer_label, key="layer")
    head = picker_head.selectbox("Head", heads, format_func=head_label, key="head")
    return layer, head


def stack_picker() -> str:
    """Encoder or decoder (URL: stack), for the boxes of Figure 1 that both stacks have."""
    bind("stack")
    return st.segmented_control("Stack", STACKS, format_func=str.capitalize, required=True, key="stack")


def stack_layer_picker(config: TransformerConfig, stack: str) -> int:
    """A layer of ``stack`` (URL: layer, the attention views' layer too)."""
    layers = list(range(config.n_encoder_layers if stack == "encoder" else config.n_decoder_layers))
    bind("layer", 0, layers)
    return st.selectbox("Layer", layers, format_func=layer_label, key="layer")


def attention_kind_picker(key: str) -> str:
    """Encoder self-, decoder self- or cross-attention, as a segmented control bound to the setting ``key``."""
    bind(key)
    return st.segmented_control("Attention", ATTENTION_KINDS, format_func=KIND_TITLES.get, required=True, key=key)


def module_pickers(trace: Trace) -> tuple[str, int, int]:
    """Attention kind, layer and head of an experiment that shows one head (URL: module_kind, layer, head)."""
    kind = attention_kind_picker("module_kind")
    layer, head = layer_and_head_pickers(trace.attention_stack(kind).shape)
    return kind, layer, head


def translations_markdown(rows: list[tuple[str, str]]) -> str:
    """Labelled translations, one per line; the texts escaped (they come from the user and the model)."""
    return "  \n".join(f"**{label}:** {escape_markdown(text) or '(empty)'}" for label, text in rows)


def show_translations(rows: list[tuple[str, str]], title: str, handout: list[HandoutSection]) -> None:
    st.markdown(translations_markdown(rows))
    handout.append(HandoutSection(title, rows=rows))
