"""What if…? Fork the translation at one step with another token and let the model continue."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_fork
from explorer.context import PageContext
from explorer.state import bind
from explorer.widgets import how_to_read, module_pickers, show_figure, show_translations
from explorer.wording import escape_markdown
from model.heads import HeadRef, head_title
from viz.tokens import display_text


def render(ctx: PageContext) -> None:
    trace, file_stem, handout, config = ctx.trace, ctx.file_stem, ctx.handout.view, ctx.config
    explanation = how_to_read("whatif")
    steps = list(range(trace.n_steps))
    bind("fork_step", options=steps)
    pick_step, pick_token, type_word = st.columns(3)
    step = pick_step.selectbox(
        "Fork at step",
        steps,
        format_func=lambda s: f"step {s + 1}: {display_text(trace.predicted_pieces[s])}",  # counted from 1
        key="fork_step",
    )
    candidates = {
        int(token): (piece, float(probability))
        for token, piece, probability in zip(
            trace.topk_ids[step], trace.topk_pieces[step], trace.topk_probs[step], strict=True
        )
        if int(token) not in config.never_generated  # the decoder never writes these
    }
    written = trace.target_ids[step + 1]
    bind("fork_token", next((t for t in candidates if t != written), written), list(candidates))
    token_id = pick_token.selectbox(
        "Write instead",
        list(candidates),
        format_func=lambda t: (
            f"{display_text(candidates[t][0])} ({candidates[t][1]:.2f})"
            + (", as in the original" if t == written else "")
        ),
        key="fork_token",
    )
    bind("fork_word")
    word = type_word.text_input("…or type a word", key="fork_word", help="A typed word replaces the pick.")
    try:
        forked = compute_fork(ctx.trace_key, step, word.strip() or token_id)
    except ValueError as error:
        st.error(escape_markdown(str(error)))
        return
    notice = viz.fork_info(forked).notice
    if notice:
        st.info(escape_markdown(notice))
    show_translations([("Original", trace.translation), ("What if", forked.translation)], "What if…?", handout)
    show_figure(
        viz.fork_tokens_figure(trace, forked, title="Original and what-if, token by token"),
        f"{file_stem}-whatif-step{step}",
        handout,
        explanation,
    )
    kind, layer, head = module_pickers(trace)
    st.markdown(f"**{head_title(kind, layer, head)}**, before and after the change:")
    figures = viz.fork_attention_figures(
        trace, forked, HeadRef(kind, layer, head).module_name, head, annotate=ctx.token_style.annotate
    )
    for column, figure, name in zip(st.columns(2), figures, ("original", "whatif"), strict=True):
        with column:
            show_figure(figure, f"{file_stem}-whatif-step{step}-{kind}-L{layer}H{head}-{name}", handout)
