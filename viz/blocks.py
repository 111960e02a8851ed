"""The boxes of Figure 1 that are not attention: the embedding sum, the residual stream through Add & Norm with the
logit lens, and the feed-forward units. Arrays from model.analysis.activations in, plotly figures out.

Rows and columns are named by their pieces (display_labels); every piece is escaped where it becomes hover text.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz.style import ROW_HEIGHT, base_layout, paired_bars
from viz.tokens import display_labels


def _position_labels(pieces: Sequence[str]) -> list[str]:
    return [f"{position} {label}" for position, label in enumerate(display_labels(list(pieces)))]


def _tokens_heatmap(
    z: np.ndarray, row_labels: list[str], column_labels: list[str], *, colour: str, hover: str, **heatmap
) -> go.Figure:
    """A heatmap with named rows (top to bottom) and columns, every cell's row and column in its hover."""
    rows, columns = np.shape(z)
    customdata = np.empty((rows, columns, 2), dtype=object)
    customdata[:, :, 0] = np.asarray(row_labels, dtype=object)[:, None]
    customdata[:, :, 1] = np.asarray(column_labels, dtype=object)[None, :]
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(columns)),
            y=list(range(rows)),
            customdata=customdata,
            hovertemplate=f"%{{customdata[0]}}<br>%{{customdata[1]}}<br>{hover} %{{z:.3f}}<extra></extra>",
            colorbar={"title": {"text": colour}},
            **heatmap,
        )
    )
    figure.update_xaxes(tickmode="array", tickvals=list(range(columns)), ticktext=column_labels, tickangle=-60)
    figure.update_yaxes(tickmode="array", tickvals=list(range(rows)), ticktext=row_labels, autorange="reversed")
    return figure


def embedding_norms_figure(
    token: np.ndarray, position: np.ndarray, pieces: Sequence[str], *, title: str = ""
) -> go.Figure:
    """Per piece, the length of its scaled token embedding, of the positional encoding added and of their sum."""
    token, position = np.asarray(token, dtype=np.float64), np.asarray(position, dtype=np.float64)
    figure = paired_bars(
        _position_labels(pieces),
        [
            (np.linalg.norm(token, axis=-1), "token embedding × √d_model", "<br>‖token‖ %{y:.3f}"),
            (np.linalg.norm(position, axis=-1), "positional encoding", "<br>‖position‖ %{y:.3f}"),
            (np.linalg.norm(token + position, axis=-1), "their sum (the first layer's input)", "<br>‖sum‖ %{y:.3f}"),
        ],
    )
    figure.update_layout(barmode="group")
    figure.update_yaxes(title_text="vector length (L2 norm)")
    return base_layout(figure, html.escape(title), height=420)


def dimensions_heatmap(values: np.ndarray, pieces: Sequence[str], *, title: str = "", what: str = "value") -> go.Figure:
    """(positions, dimensions) values as a heatmap: a piece per row, a dimension per column, centred on zero."""
    values = np.asarray(values, dtype=np.float64)
    limit = float(np.abs(values).max()) or 1.0
    figure = _tokens_heatmap(
        values,
        _position_labels(pieces),
        [str(dimension) for dimension in range(values.shape[1])],
        colour=what,
        hover=what,
        colorscale="RdBu",
        zmid=0.0,
        zmin=-limit,
        zmax=limit,
    )
    figure.update_xaxes(title_text="dimension", tickmode="auto", nticks=16, tickangle=0)
    return base_layout(figure, html.escape(title), height=160 + ROW_HEIGHT * values.shape[0])


def residual_figure(
    stage_labels: Sequence[str], norms: np.ndarray, pieces: Sequence[str], *, title: str = ""
) -> go.Figure:
    """The residual stream's length at each position (columns), stage by stage (rows: the first layer's input, then
    after each sublayer of each layer)."""
    norms = np.asarray(norms, dtype=np.float64)
    figure = _tokens_heatmap(
        norms, list(stage_labels), _position_labels(pieces), colour="‖residual‖", hover="length", colorscale="Viridis"
    )
    figure.update_yaxes(title_text="after")
    return base_layout(figure, html.escape(title), height=160 + ROW_HEIGHT * norms.shape[0])


def sublayer_ratio_figure(
    ratios: np.ndarray, sublayers: Sequence[str], pieces: Sequence[str], *, title: str = ""
) -> go.Figure:
    """(layers, sublayers, positions) ratios ||sublayer output|| / ||residual|| as a heatmap, a row per sublayer of
    each layer: how much each Add changed the residual at each position."""
    ratios = np.asarray(ratios, dtype=np.float64)
    n_layers = ratios.shape[0]
    rows = [f"layer {layer + 1} {sublayer}" for layer in range(n_layers) for sublayer in sublayers]
    figure = _tokens_heatmap(
        ratios.reshape(-1, ratios.shape[-1]),
        rows,
        _position_labels(pieces),
        colour="‖out‖ / ‖residual‖",
        hover="ratio",
        colorscale="Magma",
        reversescale=True,
        zmin=0.0,
    )
    return base_layout(figure, html.escape(title), height=160 + ROW_HEIGHT * len(rows))


def lens_step_figure(
    top_pieces: Sequence[Sequence[str]], top_probs: np.ndarray, chosen: str, *, title: str = ""
) -> go.Figure:
    """One step of the logit lens: a row per decoder layer (the last at the bottom, as the model's own output), its
    top tokens left to right, each cell coloured by its probability. The token the model wrote is marked with ✓."""
    probs = np.asarray(top_probs, dtype=np.float64)
    n_layers, k = probs.shape
    labels = [display_labels(row) for row in top_pieces]
    text = np.asarray(
        [
            [f"{label} ✓" if piece == chosen else label for label, piece in zip(row, pieces, strict=True)]
            for row, pieces in zip(labels, top_pieces, strict=True)
        ],
        dtype=object,
    )
    rows = [f"after layer {layer + 1}" for layer in range(n_layers)]
    columns = [f"#{rank + 1}" for rank in range(k)]
    figure = _tokens_heatmap(
        probs, rows, columns, colour="probability", hover="probability", colorscale="Blues", zmin=0.0, zmax=1.0
    )
    figure.update_traces(text=text, texttemplate="%{text}", xgap=2, ygap=2)  # display_labels: HTML-safe
    figure.update_xaxes(tickangle=0, title_text="rank")
    figure.update_yaxes(autorange=True)  # the last layer at the bottom, under the ones before it
    return base_layout(figure, html.escape(title), height=160 + 36 * n_layers)


def lens_chosen_figure(chosen_probs: np.ndarray, predicted: Sequence[str], *, title: str = "") -> go.Figure:
    """(layers, steps): each layer's probability of the token the model wrote at each step, the last layer at the
    bottom: where the column turns dark is where the model "knows" the word."""
    probs = np.asarray(chosen_probs, dtype=np.float64)
    rows = [f"after layer {layer + 1}" for layer in range(probs.shape[0])]
    figure = _tokens_heatmap(
        probs,
        rows,
        _position_labels(predicted),
        colour="probability",
        hover="probability of the token written",
        colorscale="Blues",
        zmin=0.0,
        zmax=1.0,
    )
    figure.update_xaxes(title_text="step: the token written")
    figure.update_yaxes(autorange=True)
    return base_layout(figure, html.escape(title), height=200 + 36 * probs.shape[0])


def most_active_units(hidden: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` units with the largest activation anywhere in (positions, units), most active first."""
    peak = np.asarray(hidden).max(axis=0)
    return np.argsort(-peak, kind="stable")[: min(count, peak.shape[0])]


def units_heatmap(hidden: np.ndarray, units: Sequence[int], pieces: Sequence[str], *, title: str = "") -> go.Figure:
    """(positions, d_ff) feed-forward activations of the chosen ``units`` (columns) at each piece (rows)."""
    values = np.asarray(hidden, dtype=np.float64)[:, list(units)]
    figure = _tokens_heatmap(
        values,
        _position_labels(pieces),
        [f"unit {unit}" for unit in units],
        colour="activation",
        hover="activation",
        colorscale="Oranges",
        zmin=0.0,
    )
    return base_layout(figure, html.escape(title), height=160 + ROW_HEIGHT * values.shape[0])


def unit_examples_figure(labels: Sequence[str], values: Sequence[float], *, title: str = "") -> go.Figure:
    """One unit's strongest activations: a bar per (piece, sentence) label, strongest on top."""
    figure = go.Figure(
        go.Bar(
            x=list(values),
            y=[html.escape(label) for label in labels],
            orientation="h",
            marker_color="#d9601a",
            hovertemplate="%{y}<br>activation %{x:.3f}<extra></extra>",
        )
    )
    figure.update_yaxes(autorange="reversed", title_text="piece, in its sentence")
    figure.update_xaxes(title_text="activation")
    return base_layout(figure, html.escape(title), height=160 + 28 * len(labels))
