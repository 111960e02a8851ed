"""Feed Forward: one layer's hidden units at each piece, the strongest units of a chosen piece, and which pieces of
the checkpoint's example sentences drive a chosen unit most."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_activations, compute_unit_examples
from explorer.context import PageContext
from explorer.state import bind
from explorer.widgets import how_to_read, show_figure, stack_layer_picker, stack_picker
from explorer.wording import card_examples
from viz.tokens import display_text

UNITS_SHOWN = 24  # the heatmap's columns: the units most active anywhere in the sentence
EXAMPLES_SHOWN = 10  # a unit's strongest pieces over the examples


def render(ctx: PageContext) -> None:
    stack = stack_picker()
    layer = stack_layer_picker(ctx.config, stack)
    read = compute_activations(ctx.trace_key)
    pieces = read.source_pieces if stack == "encoder" else read.decoder_pieces
    hidden = read.point(stack, layer, "feed_forward.hook_hidden")  # (positions, d_ff)
    explanation = how_to_read("feed_forward", caveat=False)
    share = read.active_share(stack, layer)
    st.markdown(
        f"On average **{share.mean():.0%}** of its {hidden.shape[1]} units are active at a piece "
        f"(from {share.min():.0%} to {share.max():.0%})."
    )
    name = f"{ctx.file_stem}-{stack}-{layer + 1}-feed-forward"
    units = viz.most_active_units(hidden, UNITS_SHOWN)
    show_figure(
        viz.units_heatmap(hidden, units, pieces, title=f"The {len(units)} most active units at each piece"),
        f"{name}-units",
        ctx.handout.view,
        explanation,
    )
    positions = list(range(len(pieces)))
    bind("ff_piece", options=positions)
    labels = [f"{position} {display_text(piece)}" for position, piece in enumerate(pieces)]
    piece = st.selectbox("Piece", positions, format_func=labels.__getitem__, key="ff_piece")
    strongest = viz.most_active_units(hidden[piece : piece + 1], 10)
    show_figure(
        viz.unit_examples_figure(
            [f"unit {unit}" for unit in strongest],
            [float(hidden[piece, unit]) for unit in strongest],
            title=f"The strongest units at “{display_text(pieces[piece])}”",
        ),
        f"{name}-piece-{piece}",
        ctx.handout.view,
    )
    units_all = list(range(hidden.shape[1]))
    bind("ff_unit", int(units[0]), units_all)
    unit = st.number_input("Unit", 0, hidden.shape[1] - 1, step=1, key="ff_unit")
    examples = compute_unit_examples(ctx.trace_key.model, tuple(card_examples(ctx.entry.card)), stack, layer)
    found = examples.strongest(int(unit), EXAMPLES_SHOWN)
    show_figure(
        viz.unit_examples_figure(
            [f"{display_text(piece)} · {shorten(sentence)}" for piece, sentence, _ in found],
            [value for _, _, value in found],
            title=f"Where unit {unit} is most active in the checkpoint's examples",
        ),
        f"{name}-unit-{unit}",
        ctx.handout.view,
    )


def shorten(sentence: str, limit: int = 40) -> str:
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rstrip() + "…"
