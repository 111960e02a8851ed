"""Pure figure builders: captured arrays (or a Trace) in, plotly Figure out. No Streamlit, no model runs.

Usable as is in a notebook::

    trace = load_checkpoint("checkpoints/multi30k-en-de").trace("Two dogs are playing in the snow.")
    axes = attention_axes(trace, "cross")
    attention_heatmap(axes.stack[0, 1], axes.query_pieces, axes.key_pieces, merge_words=True).show()

The layout and the rules between the packages: docs/architecture.md.
"""

from model.heads import ATTENTION_KINDS
from viz.attention import aggregate_figure, attention_heatmap, head_heatmap, max_over_heads, mean_over_heads
from viz.attribution import attribution_maps, attribution_rows, source_share_figure
from viz.beam import beam_tree_figure
from viz.blocks import (
    dimensions_heatmap,
    embedding_norms_figure,
    lens_chosen_figure,
    lens_step_figure,
    most_active_units,
    residual_figure,
    sublayer_ratio_figure,
    unit_examples_figure,
    units_heatmap,
)
from viz.classes import class_answers_figure, class_answers_rows
from viz.decoding import decoding_step_figure, step_attention, token_probabilities, top_k_figure
from viz.evolution import evolution_figure
from viz.export import HandoutSection, handout_html
from viz.grid import attention_grid
from viz.head_lines import head_view, head_view_data
from viz.head_stats import head_stats_frame, head_stats_heatmap, statistic_grid
from viz.internals import attention_stage_figures
from viz.interventions import (
    ablation_tokens_figure,
    importance_frame,
    importance_heatmap,
    probability_change_figure,
    translation_diff_figure,
)
from viz.margins import fit_margins
from viz.pairs import pair_difference_heatmap, pair_heatmaps
from viz.positional import encoding_norms, positional_curves, positional_matrix, positional_similarity
from viz.presenter import enlarge
from viz.sampling import draw_figure, samples_frame
from viz.style import ATTENTION_COLORSCALE, chart_config, download_name, power_colorscale
from viz.tables import FigureTable, describe, figure_tables, table_html, tokenization_table
from viz.tokens import TokenAttention, display_piece, select_tokens
from viz.trace_views import AttentionAxes, DecodingStep, attention_axes, decoding_step
from viz.training import alignment_grid, alignment_heatmap, training_curves
from viz.whatif import fork_attention_figures, fork_info, fork_tokens_figure
from viz.word_order import word_order_attention_figure, word_order_tokens_figure

__all__ = [
    "class_answers_figure",
    "class_answers_rows",
    "ATTENTION_COLORSCALE",
    "ATTENTION_KINDS",
    "AttentionAxes",
    "DecodingStep",
    "FigureTable",
    "HandoutSection",
    "TokenAttention",
    "ablation_tokens_figure",
    "aggregate_figure",
    "alignment_grid",
    "alignment_heatmap",
    "attention_axes",
    "attention_grid",
    "attention_heatmap",
    "attention_stage_figures",
    "attribution_maps",
    "attribution_rows",
    "beam_tree_figure",
    "chart_config",
    "decoding_step",
    "decoding_step_figure",
    "describe",
    "dimensions_heatmap",
    "display_piece",
    "download_name",
    "draw_figure",
    "embedding_norms_figure",
    "encoding_norms",
    "enlarge",
    "evolution_figure",
    "figure_tables",
    "fit_margins",
    "fork_attention_figures",
    "fork_info",
    "fork_tokens_figure",
    "handout_html",
    "head_heatmap",
    "head_stats_frame",
    "head_stats_heatmap",
    "head_view",
    "head_view_data",
    "importance_frame",
    "importance_heatmap",
    "lens_chosen_figure",
    "lens_step_figure",
    "max_over_heads",
    "mean_over_heads",
    "most_active_units",
    "pair_difference_heatmap",
    "pair_heatmaps",
    "positional_curves",
    "positional_matrix",
    "positional_similarity",
    "power_colorscale",
    "probability_change_figure",
    "residual_figure",
    "samples_frame",
    "select_tokens",
    "source_share_figure",
    "statistic_grid",
    "step_attention",
    "sublayer_ratio_figure",
    "table_html",
    "token_probabilities",
    "tokenization_table",
    "top_k_figure",
    "training_curves",
    "translation_diff_figure",
    "unit_examples_figure",
    "units_heatmap",
    "word_order_attention_figure",
    "word_order_tokens_figure",
]
