"""What-if decoding: the original translation beside a fork (another token at one step), and their attention."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from model.heads import parse_module_name
from model.trace import Fork, Trace
from viz.attention import head_heatmap
from viz.style import ATTENTION_COLORSCALE, base_layout, head_colour, token_rows
from viz.tokens import display_labels, word_text
from viz.trace_views import attention_axes

FORK_COLOUR = head_colour(1)


def fork_info(forked: Trace) -> Fork:
    """The fork's record (step, forced ids and pieces, original ids), as Translator.fork wrote it."""
    if forked.outcome.fork is None:
        raise ValueError("this trace is not a fork: make it with Translator.fork")
    return forked.outcome.fork


def fork_tokens_figure(original: Trace, forked: Trace, *, title: str = "") -> go.Figure:
    """Both translations token by token: one row each, one column per step, coloured by the token's probability.

    The forced token(s) are framed. Columns before the fork are the same tokens in both rows
    (the fork reuses the original's output up to there); after it the model continues on its own.
    """
    fork = fork_info(forked)
    step, forced = fork.step, len(fork.token_ids)
    width = max(original.n_steps, forked.n_steps)
    z = np.full((2, width), np.nan)
    text = np.full((2, width), "", dtype=object)
    for row, trace in enumerate((original, forked)):
        z[row, : trace.n_steps] = trace.step_probs
        text[row, : trace.n_steps] = display_labels(trace.predicted_pieces)
    rows = ["original", "what-if"]
    row_names = np.broadcast_to(np.asarray(rows, dtype=object)[:, None], z.shape)
    step_numbers = np.broadcast_to(np.arange(1, width + 1, dtype=object)[None, :], z.shape)  # counted from 1
    customdata = np.stack([row_names, text, step_numbers], axis=-1)
    figure = token_rows(
        z,
        text,
        rows,
        customdata=customdata,
        hovertemplate=(
            "%{customdata[0]}, step %{customdata[2]}: %{customdata[1]}<br>probability %{z:.4f}<extra></extra>"
        ),
        colorscale=ATTENTION_COLORSCALE,
        zmin=0.0,
        zmax=1.0,
        colorbar={"title": {"text": "probability"}},
    )
    figure.add_shape(
        type="rect",
        x0=step - 0.5,
        x1=step + forced - 0.5,
        y0=0.5,
        y1=1.5,
        line={"color": FORK_COLOUR, "width": 3},
    )
    figure.add_vline(
        x=step - 0.5,
        line={"color": FORK_COLOUR, "dash": "dash"},
        annotation_text=f"fork at step {step + 1}",
        annotation_position="top right",
    )
    figure.update_xaxes(
        title_text="step (the token output at that step)",
        tickvals=list(range(width)),
        ticktext=[str(position + 1) for position in range(width)],  # steps counted from 1, as everywhere on the page
    )
    return base_layout(figure, html.escape(title), height=260)


def fork_attention_figures(
    original: Trace, forked: Trace, module_name: str, head: int, *, annotate: bool = False
) -> tuple[go.Figure, go.Figure]:
    """The same head's attention in the original and in the fork, each with the fork step's row framed; titled
    "Original" and "What if: step N → word" (the caller names the head).

    Rows are decoding steps (pieces, no merging, so that row t is step t), each labelled with the
    token it wrote: rows up to the fork step read the same input in both, the fork step's row wrote
    the forced token, and the rows after it read it and what followed.
    """
    fork = fork_info(forked)
    step = fork.step
    chosen = word_text(fork.pieces)
    figures = []
    kind, layer = parse_module_name(module_name)
    # short titles: the two figures stand side by side, each in half the page; the page names the head above them
    for name, trace in (("Original", original), (f"What if: step {step + 1} → {chosen}", forked)):
        axes = attention_axes(trace, kind)
        figure = head_heatmap(axes, layer, head, annotate=annotate, title=name)
        if kind != "encoder_self":  # encoder attention does not depend on the output: nothing to mark
            figure.add_shape(
                type="rect",
                x0=-0.5,
                x1=len(axes.key_pieces) - 0.5,
                y0=step - 0.5,
                y1=step + 0.5,
                line={"color": FORK_COLOUR, "width": 2},
            )
        figures.append(figure)
    return figures[0], figures[1]
