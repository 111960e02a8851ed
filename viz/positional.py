"""Positional-encoding figures, drawn from the encodings a Trace captured (what was actually added).

``encoding`` is (positions, d_model): row p is the vector added to the token embedding at
position p. Only the positions of the traced sentence are available, which is enough to
see the pattern: low dimensions oscillate quickly along the sentence, high ones barely move.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz.style import ROW_HEIGHT, base_layout, head_colour, paired_bars
from viz.tokens import display_labels


def _position_labels(pieces: Sequence[str] | None, count: int) -> list[str]:
    """'3 dog' style labels (position and token), or bare positions without pieces."""
    if pieces is None:
        return [str(p) for p in range(count)]
    return [f"{p} {label}" for p, label in enumerate(display_labels(pieces[:count]))]


def positional_matrix(encoding: np.ndarray, pieces: Sequence[str] | None = None, *, title: str = "") -> go.Figure:
    """The encoding as a heatmap: position down, dimension across, values in [-1, 1]."""
    encoding = np.asarray(encoding)
    labels = _position_labels(pieces, encoding.shape[0])
    figure = go.Figure(
        go.Heatmap(
            z=encoding,
            x=list(range(encoding.shape[1])),
            y=list(range(encoding.shape[0])),
            customdata=np.repeat(np.asarray(labels, dtype=object)[:, None], encoding.shape[1], axis=1),
            colorscale="RdBu",
            zmid=0.0,
            zmin=-1.0,
            zmax=1.0,
            hovertemplate="position %{customdata}<br>dimension %{x}<br>value %{z:.4f}<extra></extra>",
            colorbar={"title": {"text": "value"}},
        )
    )
    figure.update_xaxes(title_text="dimension")
    figure.update_yaxes(
        title_text="position",
        tickmode="array",
        tickvals=list(range(len(labels))),
        ticktext=labels,
        autorange="reversed",
    )
    return base_layout(figure, html.escape(title), height=160 + ROW_HEIGHT * len(labels))


def positional_curves(encoding: np.ndarray, dimensions: Sequence[int], *, title: str = "") -> go.Figure:
    """The value of chosen dimensions along the positions: sines (even) and cosines (odd) of falling frequency."""
    encoding = np.asarray(encoding)
    positions = list(range(encoding.shape[0]))
    figure = go.Figure()
    for index, dimension in enumerate(dimensions):
        wave = "sin" if dimension % 2 == 0 else "cos"
        figure.add_trace(
            go.Scatter(
                x=positions,
                y=encoding[:, dimension],
                mode="lines+markers",
                name=f"dimension {dimension} ({wave})",
                line={"color": head_colour(index)},
                hovertemplate=f"dimension {dimension}<br>position %{{x}}<br>value %{{y:.4f}}<extra></extra>",
            )
        )
    figure.update_xaxes(title_text="position")
    figure.update_yaxes(title_text="value", range=[-1.1, 1.1])
    return base_layout(figure, html.escape(title), height=380)


def positional_similarity(encoding: np.ndarray, pieces: Sequence[str] | None = None, *, title: str = "") -> go.Figure:
    """Dot products between the encodings of every pair of positions: near positions look alike."""
    encoding = np.asarray(encoding, dtype=np.float64)
    similarity = encoding @ encoding.T
    labels = _position_labels(pieces, encoding.shape[0])
    customdata = np.empty(similarity.shape + (2,), dtype=object)
    customdata[:, :, 0] = np.asarray(labels, dtype=object)[:, None]
    customdata[:, :, 1] = np.asarray(labels, dtype=object)[None, :]
    figure = go.Figure(
        go.Heatmap(
            z=similarity,
            x=list(range(len(labels))),
            y=list(range(len(labels))),
            customdata=customdata,
            colorscale="Viridis",
            hovertemplate=(
                "position %{customdata[0]}<br>position %{customdata[1]}<br>dot product %{z:.3f}<extra></extra>"
            ),
            colorbar={"title": {"text": "dot product"}},
        )
    )
    ticks = {"tickmode": "array", "tickvals": list(range(len(labels))), "ticktext": labels}
    figure.update_xaxes(title_text="position", tickangle=-60, **ticks)
    figure.update_yaxes(title_text="position", autorange="reversed", **ticks)
    return base_layout(figure, html.escape(title), height=200 + ROW_HEIGHT * len(labels))


def encoding_norms(
    encoding: np.ndarray, embedding_norms: np.ndarray, pieces: Sequence[str] | None = None, *, title: str = ""
) -> go.Figure:
    """Size of the positional encoding next to the size of the (scaled) token embedding, per position.

    When the token embedding is much larger, position is a small nudge on top of the word;
    when they are similar, position weighs as much as the word itself.
    """
    position_norms = np.linalg.norm(np.asarray(encoding, dtype=np.float64), axis=-1)
    embedding_norms = np.asarray(embedding_norms, dtype=np.float64)
    figure = paired_bars(
        _position_labels(pieces, len(position_norms)),
        [
            (embedding_norms, "token embedding ‖e‖ (× √d_model)", "<br>‖token embedding‖ %{y:.3f}"),
            (position_norms, "positional encoding ‖p‖", "<br>‖positional encoding‖ %{y:.3f}"),
        ],
    )
    figure.update_yaxes(title_text="vector length (L2 norm)")
    figure.update_layout(barmode="group")
    return base_layout(figure, html.escape(title), height=420)
