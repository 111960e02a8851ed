"""Interventions drawn: a translation beside its ablated twin, token probabilities before and after, head importance
as layers × heads heatmaps; translation_diff_figure also draws the word-order experiment (viz.word_order).

Every builder takes the plain data of model.analysis (ablation.AblationComparison, importance.HeadImportance,
alignment.TokenDiff) and never runs the model. Token labels are escaped with
viz.tokens.display_piece; titles are plain text, escaped here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from model.analysis.ablation import AblationComparison
from model.analysis.alignment import TokenDiff
from model.analysis.importance import HeadImportance
from model.heads import KIND_LABELS, KIND_TITLES
from viz.style import LAYER_ROW_HEIGHT, add_layer_head_panel, base_layout, head_colour, token_rows
from viz.tokens import display_labels

CHANGED_COLOUR = head_colour(1)  # a token that differs between the two translations
KEPT_COLOUR = "#eef2f7"  # a token both translations share
# z = 0 kept, 1 changed; NaN (a gap where the other translation has a token) stays blank.
CHANGE_COLORSCALE = [[0.0, KEPT_COLOUR], [0.5, KEPT_COLOUR], [0.5, CHANGED_COLOUR], [1.0, CHANGED_COLOUR]]
IMPORTANCE_COLORSCALE = "RdBu_r"  # red: the translation needs the head; blue: it is likelier without it
IMPORTANCE_SCALE_TITLE = "log-prob.<br>drop"  # the colour bar's title, short lines across its top


def translation_diff_figure(
    diff: TokenDiff,
    first_probs: np.ndarray,
    second_probs: np.ndarray,
    *,
    labels: Sequence[str] = ("original", "changed"),
    title: str = "",
) -> go.Figure:
    """Two translations token by token, aligned: shared tokens in one column, changed tokens highlighted.

    ``diff`` aligns the output pieces (model.analysis.alignment.token_diff); ``first_probs`` and
    ``second_probs`` are each translation's own step probabilities (Trace.step_probs), shown on
    hover. A blank cell is a gap: the other translation has a token there that this one lacks.
    ``labels`` name the two rows (plain text).
    """
    columns = diff.columns()
    width = len(columns)
    z = np.full((2, width), np.nan)
    text = np.full((2, width), "", dtype=object)
    hover = np.full((2, width), "", dtype=object)
    rows = [
        (diff.original, diff.original_changed, np.asarray(first_probs)),
        (diff.other, diff.other_changed, np.asarray(second_probs)),
    ]
    names = [html.escape(label) for label in labels]
    for column, indices in enumerate(columns):
        for row, ((pieces, changed, probs), index) in enumerate(zip(rows, indices, strict=True)):
            if index is None:
                continue
            piece = display_labels([pieces[index]])[0]
            status = "changed" if changed[index] else "kept"
            z[row, column] = float(changed[index])
            text[row, column] = piece
            hover[row, column] = f"{names[row]}, token {index}: {piece} ({status})<br>probability {probs[index]:.4f}"
    figure = token_rows(
        z,
        text,
        names,
        customdata=hover,
        hovertemplate="%{customdata}<extra></extra>",
        colorscale=CHANGE_COLORSCALE,
        zmin=0.0,
        zmax=1.0,
        showscale=False,
    )
    figure.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    return base_layout(figure, html.escape(title), height=220)


def ablation_tokens_figure(comparison: AblationComparison, *, title: str = "") -> go.Figure:
    """The original translation above the one made with the heads removed; changed tokens highlighted.

    The default title counts the heads ("Translation without 2 heads (zero ablation)"): the page's
    picker lists them, and a list of heads would outgrow the chart.
    """
    count = len(comparison.heads)
    return translation_diff_figure(
        comparison.diff,
        comparison.original.step_probs,
        comparison.ablated.step_probs,
        labels=("original", "heads removed"),
        title=title or f"Translation without {count} head{'' if count == 1 else 's'} ({comparison.mode} ablation)",
    )


def probability_change_figure(comparison: AblationComparison, *, title: str = "") -> go.Figure:
    """Each token of the original translation: its probability with every head (left bar) and with the heads
    removed (right bar), both teacher-forced on the original translation."""
    labels = display_labels(comparison.original.predicted_pieces)
    before = np.asarray(comparison.original.step_probs)
    after = np.asarray(comparison.forced.step_probs)
    positions = list(range(len(labels)))
    customdata = np.stack([np.asarray(labels, dtype=object), before, after, after - before], axis=-1)
    hover = (
        "token %{x}: %{customdata[0]}<br>with every head %{customdata[1]:.4f}"
        "<br>heads removed %{customdata[2]:.4f}<br>change %{customdata[3]:+.4f}<extra></extra>"
    )
    figure = go.Figure(
        [
            go.Bar(x=positions, y=before, name="with every head", marker_color=head_colour(0), customdata=customdata),
            go.Bar(x=positions, y=after, name="heads removed", marker_color=CHANGED_COLOUR, customdata=customdata),
        ]
    )
    figure.update_traces(hovertemplate=hover)
    figure.update_xaxes(
        tickmode="array", tickvals=positions, ticktext=labels, tickangle=-60, title_text="original output token"
    )
    figure.update_yaxes(range=[0, 1], title_text="probability")
    figure.update_layout(barmode="group", legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"})
    # short: the x axis says whose tokens these are; the title keeps the number that sums them up
    default = f"Token probabilities (log-probability drop {comparison.log_prob_drop:.2f})"
    return base_layout(figure, html.escape(title or default), height=340)


def importance_heatmap(importance: HeadImportance, *, title: str = "") -> go.Figure:
    """Layers down, heads across, one panel per attention kind: the log-probability drop of the translation
    when that head alone is removed, on one colour scale centred at 0.

    Panels are titled with the kind in plain words; the figure title names the ablation, the colour
    bar (its title across its top) what is measured. A panel names its layers only when they differ from the
    panel's to its left (so the first always does): with 8 heads there is no room between two panels
    for the right one's "layer N" labels, which would run into the left one.
    """
    kinds = list(importance.drops)
    largest = max(float(np.abs(grid).max()) for grid in importance.drops.values()) or 1.0
    figure = make_subplots(
        rows=1,
        cols=len(kinds),
        subplot_titles=[KIND_TITLES[kind] for kind in kinds],
        horizontal_spacing=0.06,
    )
    left_layers = None  # the layer count of the panel to the left
    for column, kind in enumerate(kinds, start=1):
        grid = importance.drops[kind]
        place = {"row": 1, "col": column}
        value = "log-probability drop %{z:.4f}"
        add_layer_head_panel(figure, grid, place, KIND_LABELS[kind], value, show_layers=grid.shape[0] != left_layers)
        left_layers = grid.shape[0]
    figure.update_layout(
        coloraxis={
            "colorscale": IMPORTANCE_COLORSCALE,
            "cmin": -largest,
            "cmax": largest,
            # across the top in two short lines: written along the bar, it was cut ("log-pro") where one or two
            # layers make the bar shorter than the words
            "colorbar": {"title": {"text": IMPORTANCE_SCALE_TITLE, "side": "top"}},
        }
    )
    layers = max(grid.shape[0] for grid in importance.drops.values())
    default = f"Head importance ({importance.mode} ablation)"
    return base_layout(figure, html.escape(title or default), height=160 + LAYER_ROW_HEIGHT * layers)


def importance_frame(importance: HeadImportance) -> pd.DataFrame:
    """The ranking as a DataFrame (st.dataframe): one row per head, most important first; plain text, exact values;
    layers and heads counted from 1, as the page writes them."""
    rows = [
        {"rank": rank, "attention": KIND_LABELS[ref.kind], "layer": ref.layer + 1, "head": ref.head + 1, "drop": drop}
        for rank, (ref, drop) in enumerate(importance.ranking(), start=1)
    ]
    return pd.DataFrame(rows, columns=["rank", "attention", "layer", "head", "drop"])
