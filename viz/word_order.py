"""The word-order experiment drawn (model.analysis.word_order): the translation without the positional encoding or
with the source words shuffled beside the original, and one head's attention in both. Titles are plain text."""

from __future__ import annotations

import plotly.graph_objects as go

from model.analysis.word_order import WordOrderComparison
from model.heads import head_title, parse_module_name
from viz.interventions import translation_diff_figure
from viz.pairs import pair_heatmaps

WORD_ORDER_LABELS = {"no-pe": "without positional encoding", "shuffle": "source words shuffled"}


def word_order_tokens_figure(comparison: WordOrderComparison, *, title: str = "") -> go.Figure:
    """The original translation above the variant's; changed tokens highlighted."""
    label = WORD_ORDER_LABELS[comparison.variant]
    return translation_diff_figure(
        comparison.diff,
        comparison.original.step_probs,
        comparison.modified.step_probs,
        labels=("original", label),
        title=title or f"Translation {label}",
    )


def word_order_attention_figure(
    comparison: WordOrderComparison,
    module_name: str,
    head: int,
    *,
    merge_words: bool = False,
    show_special: bool = True,
    title: str = "",
) -> go.Figure:
    """The same head in the original (left panel, "Original") and in the variant (right, e.g. "Without
    positional encoding"), one colour scale, titled with the head. For the aligned difference draw
    ``viz.pairs.pair_difference_heatmap(comparison.attention_pair(module_name, head))``."""
    label = WORD_ORDER_LABELS[comparison.variant]
    return pair_heatmaps(
        comparison.attention_pair(module_name, head),
        merge_words=merge_words,
        show_special=show_special,
        panel_titles=("Original", label[0].upper() + label[1:]),
        title=title or head_title(*parse_module_name(module_name), head),
    )
