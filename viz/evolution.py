"""Training evolution: one head's attention for one sentence at each training stage, side by side.

The stages come from the snapshots a training run saves (model.checkpoint.find_snapshots:
untrained, early, final). To compare like with like, every stage must read the same tokens:
the app teacher-forces each stage with the same target (the final model's translation), so
rows and columns mean the same thing in every panel and only the weights differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from viz.attention import side_by_side


def evolution_figure(
    stages: Sequence[tuple[str, np.ndarray]], query_pieces: Sequence[str], key_pieces: Sequence[str], **options: Any
) -> go.Figure:
    """One heatmap per stage, in the given (training) order, on one colour scale.

    ``stages`` is [(stage label, (queries, keys) weights of one head)]; every stage must have
    the same shape, i.e. the same tokens (plain-text labels, escaped here). ``options`` are
    viz.attention.side_by_side's (merge_words, show_special, annotate, title).
    """
    if not stages:
        raise ValueError("give at least one stage")
    shapes = {np.shape(weights) for _, weights in stages}
    if len(shapes) != 1:
        raise ValueError(f"every stage must read the same tokens, got shapes {sorted(shapes)}")
    return side_by_side(stages, query_pieces, key_pieces, **options)
