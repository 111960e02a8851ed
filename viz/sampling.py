"""Sampling drawn: how one step's token was drawn, and a sentence sampled again beside greedy and beam search.

The builders take the plain data of model.analysis.samples (Draw, SampleTable).
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from model.analysis.samples import Draw, SampleTable
from viz.style import head_colour, shared_layout, white_figure
from viz.tokens import display_labels

# The three distributions of a draw, in the order sampling makes them
DRAW_SERIES = ("the model", "after the temperature", "drawn from (after top-k and top-p)")
DRAW_BAR_PX = 22  # one candidate's group of three bars


def draw_figure(draw: Draw, *, title: str = "") -> go.Figure:
    """One sampled step: the model's most likely candidates (``draw.candidate_pieces``, most likely on top), each
    with its probability under the model, after the temperature and in the draw (0: removed by top-k or top-p). The
    drawn token is marked on its axis label."""
    plain = display_labels(draw.candidate_pieces)
    labels = [
        f"<b>▶ {label}</b>" if token == draw.token else label
        for label, token in zip(plain, draw.candidates, strict=True)
    ]
    positions = list(range(len(labels)))
    series = zip(DRAW_SERIES, (draw.model_probs, draw.tempered_probs, draw.drawn_probs), strict=True)
    bars = [
        {
            "type": "bar",
            "name": name,
            "x": list(values),
            "y": positions,
            "orientation": "h",
            "marker": {"color": head_colour(index)},
            "customdata": plain,
            "hovertemplate": f"%{{customdata}}<br>{name}: %{{x:.4f}}<extra></extra>",
        }
        for index, (name, values) in enumerate(series)
    ]
    layout = {
        "barmode": "group",
        "yaxis": {"tickmode": "array", "tickvals": positions, "ticktext": labels, "autorange": "reversed"},
        "xaxis": {"range": [0, 1], "title": {"text": "probability"}},
        "legend": {"orientation": "h", "y": -0.25},
        **shared_layout(html.escape(title), 190 + DRAW_BAR_PX * 3 * len(labels)),
    }
    return white_figure(bars, layout)


def samples_frame(table: SampleTable) -> pd.DataFrame:
    """Greedy's and the beam's translations, then the distinct sampled ones (most often drawn first), each with how
    often the draws gave it and its log-probability under the model."""
    found = [(table.greedy, "greedy search"), (table.beam, "beam search")]
    found += [(sample, "sampling") for sample in table.samples]
    return pd.DataFrame(
        [[sample.translation, how, sample.count, sample.log_prob] for sample, how in found],
        columns=["translation", "found by", "times drawn", "log-probability"],
    )
