"""Add & Norm: the residual stream through the layers, how much each sublayer changed it, and the logit lens on the
decoder (each layer's residual read as the output)."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_activations, compute_lens
from explorer.context import PageContext
from explorer.state import bind
from explorer.widgets import how_to_read, show_figure, stack_picker
from model.analysis.activations import ATTENTION_SUBLAYERS, SUBLAYER_NAMES
from viz.tokens import display_text


def render(ctx: PageContext) -> None:
    stack = stack_picker()
    read = compute_activations(ctx.trace_key)
    pieces = read.source_pieces if stack == "encoder" else read.decoder_pieces
    explanation = how_to_read("residual", caveat=False)
    name = f"{ctx.file_stem}-{stack}-residual"
    labels, norms = read.residual_norms(stack)
    show_figure(
        viz.residual_figure(labels, norms, pieces, title="Length of the residual stream after each sublayer"),
        f"{name}-norms",
        ctx.handout.view,
        explanation,
    )
    show_figure(
        viz.sublayer_ratio_figure(
            read.sublayer_ratios(stack),
            [SUBLAYER_NAMES[name] for name in (*ATTENTION_SUBLAYERS[stack], "feed_forward")],
            pieces,
            title="How much each sublayer changed the residual",
        ),
        f"{name}-changes",
        ctx.handout.view,
    )
    if stack == "decoder":
        logit_lens(ctx)


def logit_lens(ctx: PageContext) -> None:
    """The decoder's layers read as the output, at the page's decoding step and over every step."""
    st.subheader("Logit lens: what each decoder layer would write")
    explanation = how_to_read("logit_lens", caveat=False, folded=True)
    lens = compute_lens(ctx.trace_key)
    steps = list(range(len(lens.predicted_pieces)))
    bind("step", options=steps)
    step = st.select_slider(
        "Step",
        steps,
        format_func=lambda index: f"{index + 1}: {display_text(lens.predicted_pieces[index])}",
        key="step",
    )
    name = f"{ctx.file_stem}-logit-lens"
    show_figure(
        viz.lens_step_figure(
            [layer[step] for layer in lens.topk_pieces],
            lens.topk_probs[:, step],
            lens.predicted_pieces[step],
            title=f"Step {step + 1}: each layer's most likely next tokens (✓ the one written)",
        ),
        f"{name}-step-{step + 1}",
        ctx.handout.view,
        explanation,
    )
    show_figure(
        viz.lens_chosen_figure(
            lens.chosen_probs, lens.predicted_pieces, title="Each layer's probability of the token written"
        ),
        f"{name}-written",
        ctx.handout.view,
    )
