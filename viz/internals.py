"""Inside one head: one small figure per stage of scaled dot-product attention, each titled with its shape.

Input is model.analysis.internals.AttentionStages (plain numpy data); the stages follow section
3.2.1 of the paper: Q·Kᵀ, scaled by 1/sqrt(d_k), masked (padding, and causal in decoder
self-attention), softmax, and the weighted sum of the values.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from model.analysis.internals import AttentionStages
from viz.style import ATTENTION_COLORSCALE, ROW_HEIGHT, base_layout
from viz.tokens import display_labels

DIVERGING = "RdBu_r"  # signed values (projections, scores): red positive, blue negative, white zero
MASK_COLOURS = [[0.0, "#b0b0b0"], [0.5, "#b0b0b0"], [0.5, "#deebf7"], [1.0, "#deebf7"]]  # hidden (grey), allowed


def _shape(array: np.ndarray) -> str:
    return " × ".join(str(size) for size in array.shape)


def _labels(pieces: Sequence[str], count: int, first: int = 0) -> list[str]:
    """HTML-safe token labels, or positions when no pieces are known."""
    return display_labels(pieces) if len(pieces) == count else [str(first + i) for i in range(count)]


def _values(z: np.ndarray, digits: int) -> np.ndarray:
    """Each cell's value as text; masked cells (-inf) as "−∞"."""
    return np.vectorize(lambda value: "−∞" if value == -np.inf else f"{value:.{digits}f}", otypes=[object])(z)


def _figure(
    z: np.ndarray,
    rows: list[str],
    columns: list[str] | None,
    title: str,
    hover: str,
    *,
    digits: int = 3,
    annotate: bool = False,
    values: np.ndarray | None = None,
    **heatmap,
) -> go.Figure:
    """One stage as a small heatmap: rows are queries or keys, columns keys or (``columns=None``) d_k dimensions.

    ``hover`` may use %{customdata[0]} (row label), [1] (column label) and [2] (``values``:
    each cell's text, by default its value with ``digits`` decimals).
    """
    z = np.asarray(z, dtype=np.float64)
    n_rows, n_columns = z.shape
    column_labels = columns if columns is not None else [str(i) for i in range(n_columns)]
    values = _values(z, digits) if values is None else values
    customdata = np.stack(
        [
            np.broadcast_to(np.asarray(rows, dtype=object)[:, None], z.shape),
            np.broadcast_to(np.asarray(column_labels, dtype=object)[None, :], z.shape),
            values,
        ],
        axis=-1,
    )
    figure = go.Figure(
        go.Heatmap(
            z=np.where(np.isfinite(z), z, np.nan),  # -inf (a masked score) is drawn as an empty cell
            x=list(range(n_columns)),
            y=list(range(n_rows)),
            customdata=customdata,
            hovertemplate=hover + "<extra></extra>",
            text=values if annotate else None,
            texttemplate="%{text}" if annotate else None,
            textfont={"size": 10},
            **heatmap,
        )
    )
    figure.update_yaxes(tickmode="array", tickvals=list(range(n_rows)), ticktext=rows, autorange="reversed")
    if columns is not None:
        figure.update_xaxes(tickmode="array", tickvals=list(range(n_columns)), ticktext=columns, tickangle=-60)
    else:
        figure.update_xaxes(title_text="dimension (d_k)")
    return base_layout(figure, html.escape(title), height=140 + ROW_HEIGHT * n_rows + (50 if columns else 30))


def _mask_reasons(stages: AttentionStages) -> np.ndarray:
    """(Tq, Tk) why each cell is allowed or hidden."""
    padded = ~np.broadcast_to(stages.padding_allowed, stages.allowed.shape)
    future = ~stages.causal_allowed if stages.causal_allowed is not None else np.zeros_like(padded)
    reasons = np.full(stages.allowed.shape, "allowed", dtype=object)
    reasons[padded] = "hidden: padding"
    reasons[future] = "hidden: future"
    reasons[padded & future] = "hidden: padding, future"
    return reasons


def attention_stage_figures(stages: AttentionStages, *, annotate: bool = True) -> dict[str, go.Figure]:
    """One small figure per stage, in the order the head computes them, each titled with its shape.

    Titles are short ("scaled by 1/√64 (1 × 12)", "output (1 × 64)"): three figures share a row of
    the page, and presenter mode enlarges their fonts; formulas that do not fit go to the hover.

    Keys: "q", "k", "v" (the head's projections), "scores" (Q·Kᵀ), "scaled" (× 1/sqrt(d_k)),
    "mask" (padding, and causal for decoder self-attention: which keys each query may use),
    "masked" (hidden keys at -inf, drawn empty), "softmax" (the attention weights),
    "contributions" (||p_j v_j||: how much each key adds to the output) and "output"
    (sum_j p_j v_j, the head's output). ``annotate`` writes the values in the query × key
    stages' cells. Every label is HTML-escaped.
    """
    queries = _labels(stages.query_pieces, stages.q.shape[0], stages.step or 0)
    keys = _labels(stages.key_pieces, stages.k.shape[0])
    by_query, by_key, pairs = (queries, None), (keys, None), (queries, keys)  # rows, columns (None: d_k dimensions)
    cell = "query %{customdata[0]}<br>key %{customdata[1]}<br>"
    dimension = "<br>dimension %{customdata[1]}: %{customdata[2]}"
    output = "output Σ_j p_j v_j of query %{customdata[0]}"
    scaled = f"scaled by 1/√{stages.d_k}"
    # _figure's keyword options per stage
    signed: dict[str, Any] = {"colorscale": DIVERGING, "zmid": 0.0}
    # the query × key stages write their values in the cells
    written: dict[str, Any] = {"annotate": annotate, "digits": 2}
    weights = {"colorscale": ATTENTION_COLORSCALE, "zmin": 0.0, "zmax": 1.0} | written
    norms = {"colorscale": "Blues", "zmin": 0.0} | written
    # each mask cell says why it is hidden (padding, future), so its title need not
    mask: dict[str, Any] = {
        "colorscale": MASK_COLOURS,
        "zmin": 0.0,
        "zmax": 1.0,
        "showscale": False,
        "annotate": annotate,
    }
    mask["values"] = _mask_reasons(stages)
    # key: (values, (rows, columns), title before the shape, hover, _figure's options), in the order of computing
    table = {
        "q": (stages.q, by_query, "Q: query", "query %{customdata[0]}" + dimension, signed),
        "k": (stages.k, by_key, "K: keys", "key %{customdata[0]}" + dimension, signed),
        "v": (stages.v, by_key, "V: values", "value of %{customdata[0]}" + dimension, signed),
        "scores": (stages.scores, pairs, "Q·Kᵀ", cell + "q·k = %{customdata[2]}", signed | written),
        "scaled": (stages.scaled, pairs, scaled, cell + "q·k / √d_k = %{customdata[2]}", signed | written),
        "mask": (stages.allowed.astype(float), pairs, "mask", cell + "%{customdata[2]}", mask),
        "masked": (stages.masked, pairs, "masked scores", cell + "score %{customdata[2]}", signed | written),
        "softmax": (stages.probs, pairs, "softmax", cell + "weight %{customdata[2]}", weights),
        "contributions": (stages.contribution_norms, pairs, "‖p_j v_j‖", cell + "‖p_j v_j‖ = %{customdata[2]}", norms),
        "output": (stages.output, by_query, "output", output + dimension, signed),
    }
    return {
        key: _figure(z, *axes, f"{title} ({_shape(z)})", hover, **options)
        for key, (z, axes, title, hover, options) in table.items()
    }
