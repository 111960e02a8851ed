"""Experiments: one view with a sub-selector; each experiment is one module with ``render(ctx)``.

Adding an experiment is one new module here and one line in EXPERIMENTS.

The layout and the rules between the packages: docs/architecture.md (its Layout block names every experiment).
"""

from __future__ import annotations

import streamlit as st

from explorer.context import PageContext
from explorer.explanations import EXPLANATIONS
from explorer.state import bind, presenting
from explorer.views.experiments import ablation, beam, internals, pairs, stats, whatif, word_order
from explorer.views.registry import Registry, View

EXPERIMENTS = Registry(
    View("whatif", "What if…?", whatif.render),
    View("beam", "Beam search tree", beam.render),
    View("internals", "Inside one head", internals.render),
    View("stats", "Head statistics", stats.render),
    View("pair", "Minimal pairs", pairs.render),
    View("ablation", "Switch heads off", ablation.render),
    View("word_order", "Without word order", word_order.render),
)
# These compare the model's own translations, so a typed target (teacher forcing) does not reach them.
OWN_TRANSLATION_EXPERIMENTS = ("beam", "pair", "ablation", "word_order")


def render(ctx: PageContext) -> None:
    keys = EXPERIMENTS.keys()
    bind("experiment", options=keys)
    choice = st.segmented_control("Experiment", keys, format_func=EXPERIMENTS.label, required=True, key="experiment")
    if not presenting():
        st.caption(EXPLANATIONS["experiments"])
    if ctx.trace.settings.mode == "forced" and choice in OWN_TRANSLATION_EXPERIMENTS:
        st.caption("This experiment uses the model's own translation, not the target typed for teacher forcing.")
    EXPERIMENTS.render(choice, ctx)
