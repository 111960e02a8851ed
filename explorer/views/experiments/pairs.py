"""Minimal pairs: the page's sentence beside a second one, one head on each, and their difference."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_trace
from explorer.context import PageContext
from explorer.state import bind, presenting
from explorer.widgets import how_to_read, module_pickers, show_figure, show_translations
from explorer.wording import example_pairs
from model.analysis.pairs import attention_pair
from model.heads import HeadRef


def use_example_pair(pairs: list[tuple[str, str]]) -> None:
    """Copy the picked pair into the sentence box and the second sentence's box; the picker acts as a menu."""
    if st.session_state.pair_example is not None:
        st.session_state.sentence, st.session_state.pair_sentence = pairs[st.session_state.pair_example]
        st.session_state.pair_example = None


def render(ctx: PageContext) -> None:
    trace, handout = ctx.trace, ctx.handout.view
    explanation = how_to_read("pairs")
    pairs = example_pairs(ctx.card.source_language)
    if pairs and not presenting():
        st.selectbox(
            "Example pairs",
            list(range(len(pairs))),
            index=None,
            format_func=lambda n: f"{pairs[n][0]}  /  {pairs[n][1]}",
            placeholder="Pick a minimal pair…",
            key="pair_example",
            on_change=use_example_pair,
            args=(pairs,),
        )
    bind("pair_sentence")
    text = st.text_input("Second sentence (compared with the source sentence above)", key="pair_sentence")
    if not text.strip():
        st.info("Type a second sentence, or pick an example pair, to compare the two.")
        return
    second = compute_trace(ctx.trace_key.with_text(text))
    show_translations([("First", trace.translation), ("Second", second.translation)], "Minimal pair", handout)
    kind, layer, head = module_pickers(trace)
    pair = attention_pair(trace, second, HeadRef(kind, layer, head).module_name, head)
    name = f"{ctx.file_stem}-pair-{kind}-L{layer}H{head}"
    show_figure(viz.pair_heatmaps(pair, **ctx.token_style.without_numbers()), f"{name}-both", handout, explanation)
    show_figure(viz.pair_difference_heatmap(pair, **ctx.token_style.without_numbers()), f"{name}-difference", handout)
