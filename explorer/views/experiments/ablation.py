"""Switch heads off: compare translations without them, and every head's importance as a heatmap and a ranking."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_ablation, compute_importance
from explorer.context import PageContext
from explorer.explanations import EXPLANATIONS
from explorer.state import bind
from explorer.widgets import how_to_read, show_figure, show_translations
from explorer.wording import ABLATION_NAMES
from model.analysis.ablation import ABLATION_MODES
from model.heads import all_heads

TOP_HEADS = 3  # the "switch off the most important heads" button


def set_ablated(keys: list[str]) -> None:
    st.session_state.ablate = keys


def render(ctx: PageContext) -> None:
    file_stem, handout = ctx.file_stem, ctx.handout.view
    explanation = how_to_read("ablation", "importance", caveat=False)
    heads = {f"{ref.kind}.{ref.layer}.{ref.head}": ref for ref in all_heads(ctx.config)}  # URL value -> head
    bind("ablation_mode")
    mode = st.segmented_control(
        "Replace a removed head's output by",
        list(ABLATION_MODES),
        format_func=ABLATION_NAMES.get,
        required=True,
        key="ablation_mode",
    )
    importance = compute_importance(ctx.trace_key, mode)
    if importance.notice:
        st.warning(importance.notice)
    show_figure(
        viz.importance_heatmap(importance), f"{file_stem}-importance-{mode}", handout, EXPLANATIONS["importance"]
    )
    with st.expander("Ranking of the heads (table)"):
        st.dataframe(viz.importance_frame(importance), hide_index=True, width="stretch", key="importance_table")
    keys = {ref: key for key, ref in heads.items()}
    most_important = [keys[ref] for ref, _ in importance.ranking()[:TOP_HEADS]]
    bind("ablate", options=list(heads))
    pick_heads, top_button = st.columns([3, 1], vertical_alignment="bottom")
    chosen = pick_heads.multiselect(
        "Heads to switch off", list(heads), format_func=lambda key: heads[key].label, key="ablate"
    )
    top_button.button(
        f"The {TOP_HEADS} most important",
        icon=":material/block:",
        key="ablate_top",
        on_click=set_ablated,
        args=(most_important,),
        width="stretch",
    )
    if not chosen:
        st.info("Pick heads to switch off (or take the most important ones) to see the translation without them.")
        return
    comparison = compute_ablation(ctx.trace_key, tuple(heads[key] for key in chosen), mode)
    show_translations(
        [("Original", comparison.original.translation), ("Heads switched off", comparison.ablated.translation)],
        "Heads switched off",
        handout,
    )
    show_figure(viz.ablation_tokens_figure(comparison), f"{file_stem}-ablation-{mode}-tokens", handout, explanation)
    show_figure(viz.probability_change_figure(comparison), f"{file_stem}-ablation-{mode}-probabilities", handout)
