"""viz/: every figure carries the captured numbers and the tokens it claims to, on a trace from a small model
(the trace fixture, tests/viz/conftest.py). The figures' shared look and their JSON: test_style.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import viz
from model.analysis.attribution import attention_rollout
from model.tokenizer import word_index
from viz.tokens import STRUCTURAL_PIECES, display_labels, display_piece, display_text, display_word, group_pieces


def ticktext(axis) -> list[str]:
    return list(axis.ticktext)


def direct_word_merge(weights: np.ndarray, query_pieces: list[str], key_pieces: list[str]) -> np.ndarray:
    """Reference: sum over a word's key pieces, then average over its query pieces, with explicit loops."""
    query_words = word_index(query_pieces, STRUCTURAL_PIECES)
    key_words = word_index(key_pieces, STRUCTURAL_PIECES)
    result = np.zeros((max(query_words) + 1, max(key_words) + 1))
    counts = np.zeros(max(query_words) + 1)
    for q, query_word in enumerate(query_words):
        counts[query_word] += 1
        for k, key_word in enumerate(key_words):
            result[query_word, key_word] += weights[q, k]
    return result / counts[:, None]


# --- token labels ---


def test_pieces_are_shown_as_word_starts_continuations_and_marked_specials():
    assert display_piece("\u2581rid") == "rid"
    assert display_piece("ing") == "\u00b7ing"
    assert display_piece("\u2581") == "\u2581"
    assert "&lt;/s&gt;" in display_piece("</s>") and display_piece("</s>").startswith("<i")
    assert display_word(["\u2581rid", "ing"]) == "riding"


def test_labels_are_html_escaped_everywhere():
    pieces = ["\u2581<b>bold</b>", "&amp;", "\u2581<a href='x'>", "</s>"]
    weights = np.full((4, 4), 0.25, dtype=np.float32)
    figure = viz.attention_heatmap(weights, pieces, pieces, title="<script>alert(1)</script>")
    labels = ticktext(figure.layout.xaxis)
    assert labels[:3] == ["&lt;b&gt;bold&lt;/b&gt;", "\u00b7&amp;amp;", "&lt;a href=&#x27;x&#x27;&gt;"]
    assert "<script>" not in figure.layout.title.text
    # the hover shows these same tick labels (plotly.js writes a tick value as its ticktext)
    assert ticktext(figure.layout.yaxis)[:3] == labels[:3]
    assert figure.data[0].customdata is None and figure.data[0].text is None


def test_repeated_tokens_keep_their_own_rows_and_columns():
    pieces = ["\u2581a", "\u2581a", "\u2581a", "</s>"]
    figure = viz.attention_heatmap(np.eye(4), pieces, pieces)
    assert list(figure.layout.xaxis.tickvals) == [0, 1, 2, 3]
    assert ticktext(figure.layout.xaxis)[:3] == ["a", "a", "a"]
    np.testing.assert_array_equal(figure.data[0].z, np.eye(4))


# --- single head, grid, head view ---


@pytest.mark.parametrize("kind", viz.ATTENTION_KINDS)
def test_heatmap_holds_the_captured_weights_and_tokens(trace, kind):
    axes = viz.attention_axes(trace, kind)
    weights = axes.stack[1, 2]
    figure = viz.attention_heatmap(weights, axes.query_pieces, axes.key_pieces, annotate=True)
    heatmap = figure.data[0]
    np.testing.assert_array_equal(heatmap.z, weights)
    assert heatmap.z.shape == (len(axes.query_pieces), len(axes.key_pieces))
    assert ticktext(figure.layout.xaxis) == display_labels(axes.key_pieces)
    assert ticktext(figure.layout.yaxis) == display_labels(axes.query_pieces)
    # cells sit at plotly's default 0..n-1, the tick values; the hover names a cell by its tick label and position
    assert heatmap.x is None and heatmap.y is None and heatmap.customdata is None
    assert list(figure.layout.xaxis.tickvals) == list(range(len(axes.key_pieces)))
    assert list(figure.layout.yaxis.tickvals) == list(range(len(axes.query_pieces)))
    assert "query %{y} (%{y:d})" in heatmap.hovertemplate and "key %{x} (%{x:d})" in heatmap.hovertemplate
    assert "%{z:.4f}" in heatmap.hovertemplate and heatmap.texttemplate == "%{z:.2f}"
    assert (heatmap.zmin, heatmap.zmax) == (0.0, 1.0)


def test_attention_axes_follow_the_trace(trace):
    assert viz.attention_axes(trace, "encoder_self").stack.shape == (
        2,
        4,
        len(trace.source_pieces),
        len(trace.source_pieces),
    )
    for kind, keys in (("cross", trace.source_pieces), ("decoder_self", trace.decoder_input_pieces)):
        axes = viz.attention_axes(trace, kind)
        # a row is a decoding step, labelled with the token it wrote; the input it read goes in the hover
        assert axes.query_pieces == trace.target_pieces[1:]
        assert axes.query_inputs == trace.target_pieces[:-1] and axes.query_inputs[0] == "<s>"
        assert axes.key_pieces == keys and axes.stack.shape[2:] == (len(axes.query_pieces), len(keys))
    assert viz.attention_axes(trace, "encoder_self").query_inputs is None
    with pytest.raises(ValueError, match="kind"):
        viz.attention_axes(trace, "sideways")


def test_a_decoder_heatmap_names_each_row_by_what_it_wrote_and_hovers_what_it_read(trace):
    axes = viz.attention_axes(trace, "cross")
    figure = viz.head_heatmap(axes, 1, 2, title="t")
    heatmap = figure.data[0]
    assert list(figure.layout.yaxis.ticktext) == display_labels(trace.target_pieces[1:])
    assert [row[0] for row in heatmap.customdata] == display_labels(trace.target_pieces[:-1])
    assert "after reading %{customdata}" in heatmap.hovertemplate
    assert figure.layout.yaxis.title.text == "output token (written at this step)"
    written, read, keys = ["▁Fahr", "rad", "</s>"], ["<s>", "▁Fahr", "rad"], ["▁a", "▁bike", "</s>"]
    weights = np.full((3, 3), 1 / 3)
    merged = viz.attention_heatmap(weights, written, keys, merge_words=True, query_inputs=read)
    assert list(merged.layout.yaxis.ticktext) == ["Fahrrad", display_piece("</s>")]
    # a word's row read what came before its first piece: <s> for "Fahrrad", "rad" for </s>
    assert list(merged.data[0].customdata) == [[display_piece("<s>")] * 3, [display_piece("rad")] * 3]
    hidden = viz.attention_heatmap(weights, written, keys, show_special=False, query_inputs=read)
    assert [row[0] for row in hidden.data[0].customdata] == [display_piece("<s>"), display_piece("▁Fahr")]


def test_grid_has_every_head_of_every_layer(trace):
    axes = viz.attention_axes(trace, "cross")
    figure = viz.attention_grid(axes.stack, axes.query_pieces, axes.key_pieces)
    n_layers, n_heads = axes.stack.shape[:2]
    assert len(figure.data) == n_layers * n_heads
    for index, heatmap in enumerate(figure.data):
        layer, head = divmod(index, n_heads)
        np.testing.assert_array_equal(heatmap.z, axes.stack[layer, head])
        assert heatmap.hovertemplate.startswith(f"layer {layer + 1}, head {head + 1}")  # counted from 1
    for axis_name in ("xaxis", "xaxis8"):
        assert aliased_labels(figure.layout[axis_name]) == display_labels(axes.key_pieces)
    assert aliased_labels(figure.layout.yaxis) == display_labels(axes.query_pieces)
    assert figure.layout.coloraxis.cmax == 1.0


def aliased_labels(axis) -> list[str]:
    """The token of every position of a grid axis: ticks at 0, 1, 2, ... whose numbers labelalias renames."""
    assert (axis.tickmode, axis.tick0, axis.dtick, axis.tickformat, axis.hoverformat) == ("linear", 0, 1, "d", "d")
    return [axis.labelalias[str(position)] for position in range(len(axis.labelalias))]


def opus_mt_shaped_stack(queries: int, keys: int) -> np.ndarray:
    """Random attention of opus-mt-en-de's shape: 6 layers of 8 heads, each row summing to 1."""
    return np.random.default_rng(0).dirichlet(np.ones(keys), size=(6, 8, queries))


def test_a_grid_draws_the_layers_asked_for_by_their_numbers():
    pieces = [f"▁w{i}" for i in range(12)]
    stack = opus_mt_shaped_stack(12, 12)
    figure = viz.attention_grid(stack, pieces, pieces, layers=[3, 4, 5])
    assert len(figure.data) == 3 * 8
    for index, heatmap in enumerate(figure.data):
        row, head = divmod(index, 8)
        np.testing.assert_array_equal(heatmap.z, stack[3 + row, head])
        assert heatmap.hovertemplate.startswith(f"layer {4 + row}, head {head + 1}<br>")
    assert [note.text for note in figure.layout.annotations] == [
        *(f"head {head}" for head in range(1, 9)),
        *(f"layer {layer}" for layer in (4, 5, 6)),
    ]


def test_a_page_of_eight_heads_keeps_its_panels_on_screen_and_its_labels_apart():
    """opus-mt-en-de's 8 heads with a 40-piece sentence: three layers a page, panels no taller than the screen
    holds, and only as many tick labels as fit a panel at the narrowest page (each still named in the hover)."""
    pieces = [f"▁w{i}" for i in range(40)]
    assert [viz.grid.grid_page_layers(heads) for heads in (4, 8, 16)] == [6, 3, 1]
    figure = viz.attention_grid(opus_mt_shaped_stack(40, 40), pieces, pieces, layers=[0, 1, 2])
    panel_width = viz.grid.GRID_PLOT_WIDTH_PX / 8
    panel_height = viz.grid.GRID_PANEL_PX[0]  # 40 rows would ask for 480 px; an 8-head panel is 54 px wide
    assert figure.layout.height == 120 + 3 * panel_height <= 800
    x_step, y_step = figure.layout.xaxis.ticklabelstep, figure.layout.yaxis.ticklabelstep
    label_px = viz.grid.TICK_LABEL_PX
    assert x_step > 1 and math.ceil(40 / x_step) * label_px <= panel_width
    assert y_step > 1 and math.ceil(40 / y_step) * label_px <= panel_height
    assert aliased_labels(figure.layout.xaxis) == display_labels(pieces)  # every token named in the hover
    size = figure.layout.annotations[0].font.size
    assert viz.grid.CHAR_EM * len("head 7") * size <= panel_width  # head titles fit above their panels
    enlarged = viz.attention_grid(opus_mt_shaped_stack(40, 40), pieces, pieces, layers=[0], font_scale=1.6)
    assert enlarged.layout.xaxis.ticklabelstep > x_step  # presenter mode's larger labels: fewer of them
    assert enlarged.layout.annotations[0].font.size * math.sqrt(1.6) == pytest.approx(size)


def test_a_small_grid_labels_every_token():
    pieces = ["▁a", "▁man", "▁rides", "</s>"]
    stack = np.random.default_rng(0).dirichlet(np.ones(4), size=(4, 4, 4))
    figure = viz.attention_grid(stack, pieces, pieces)
    assert figure.layout.xaxis.ticklabelstep == figure.layout.yaxis.ticklabelstep == 1
    assert figure.layout.height == 120 + 4 * viz.grid.GRID_PANEL_PX[0]
    assert {note.font.size for note in figure.layout.annotations} == {16}  # plotly's panel titles, as before


def test_grid_sends_each_weight_once_and_no_per_cell_text(trace):
    axes = viz.attention_axes(trace, "encoder_self")
    figure = viz.attention_grid(axes.stack, axes.query_pieces, axes.key_pieces)
    assert all(panel.customdata is None and panel.text is None for panel in figure.data)
    sent = json.loads(figure.to_json())
    cells = sum(np.asarray(panel.z).size for panel in figure.data)
    assert cells == axes.stack.size
    assert not any("customdata" in panel or "text" in panel for panel in sent["data"])


def test_head_view_draws_each_weight_above_the_threshold(trace):
    axes = viz.attention_axes(trace, "encoder_self")
    weights = axes.stack[0]
    figure = viz.head_view(weights, axes.query_pieces, axes.key_pieces, min_weight=0.05)
    hover_traces = [data for data in figure.data if data.mode == "markers"]
    assert [data.name for data in hover_traces] == [f"head {h + 1}" for h in range(weights.shape[0])]
    for head, data in enumerate(hover_traces):
        drawn = {(row[3], row[4]): row[2] for row in data.customdata}
        expected = {(q, k): float(w) for (q, k), w in np.ndenumerate(weights[head]) if w >= 0.05}
        assert drawn.keys() == expected.keys()
        for pair, weight in drawn.items():
            assert weight == pytest.approx(expected[pair], abs=0)
    token_columns = [data for data in figure.data if data.mode == "markers+text"]
    assert [list(column.text) for column in token_columns] == [display_labels(axes.query_pieces)] * 2


def test_head_view_can_follow_one_query(trace):
    axes = viz.attention_axes(trace, "cross")
    figure = viz.head_view(axes.stack[1], axes.query_pieces, axes.key_pieces, query=2, heads=[0, 3], min_weight=0.0)
    hover_traces = [data for data in figure.data if data.mode == "markers"]
    assert [data.name for data in hover_traces] == ["head 1", "head 4"]
    for head, data in zip([0, 3], hover_traces, strict=True):
        assert {row[3] for row in data.customdata} == {2}
        np.testing.assert_allclose([row[2] for row in data.customdata], axes.stack[1, head, 2], rtol=0, atol=0)


def test_head_view_data_is_what_the_browser_draws(trace):
    """The component's data: plain-text tokens (never HTML), the weights rounded, faint lines left out."""
    axes = viz.attention_axes(trace, "cross")
    weights = axes.stack[1]
    data = viz.head_view_data(weights, axes.query_pieces, axes.key_pieces, min_weight=0.05)
    assert [token["text"] for token in data["keys"]] == [display_text(piece) for piece in axes.key_pieces]
    assert [token["special"] for token in data["keys"]] == [piece in STRUCTURAL_PIECES for piece in axes.key_pieces]
    expected = np.round(weights.astype(float), 3)
    np.testing.assert_array_equal(np.array(data["weights"]), np.where(expected < 0.05, 0.0, expected))
    assert data["colours"] == [viz.style.head_colour(head) for head in range(weights.shape[0])]
    json.dumps(data)  # sent as JSON as it is
    merged = viz.head_view_data(weights, axes.query_pieces, axes.key_pieces, merge_words=True, show_special=False)
    words = viz.select_tokens(weights, axes.query_pieces, axes.key_pieces, merge_words=True, show_special=False)
    assert [token["text"] for token in merged["keys"]] == words.key_tokens  # whole words, as written
    assert np.array(merged["weights"]).shape == words.weights.shape


def test_display_text_is_the_label_without_html():
    assert [display_text(piece) for piece in ["▁rid", "ing", "<s>", "▁", "<&>"]] == ["rid", "·ing", "<s>", "▁", "·<&>"]
    codes = [">>fr<<", "__fr__", "fr_XX", "fra_Latn"]  # MarianMT's, M2M100's, mBART-50's, NLLB's
    assert [display_text(piece) for piece in codes] == codes
    assert [display_text(piece) for piece in ["_fr", "fr_", "Fr_XX"]] == ["·_fr", "·fr_", "·Fr_XX"]
    assert display_piece("<&>") == "·&lt;&amp;&gt;"


# --- merging subwords, hiding specials ---


@pytest.mark.parametrize("kind", viz.ATTENTION_KINDS)
def test_word_merge_sums_keys_and_averages_queries(trace, kind):
    axes = viz.attention_axes(trace, kind)
    weights = axes.stack[1, 0]
    merged = viz.select_tokens(weights, axes.query_pieces, axes.key_pieces, merge_words=True)
    np.testing.assert_allclose(
        merged.weights, direct_word_merge(weights, axes.query_pieces, axes.key_pieces), atol=1e-6
    )
    np.testing.assert_allclose(merged.weights.sum(axis=-1), 1.0, atol=1e-5)
    figure = viz.attention_heatmap(weights, axes.query_pieces, axes.key_pieces, merge_words=True)
    np.testing.assert_array_equal(figure.data[0].z, merged.weights)
    assert ticktext(figure.layout.xaxis) == merged.key_labels


def test_merged_labels_are_whole_words():
    pieces = ["\u2581rid", "ing", "\u2581a", "\u2581bi", "ke", ".", "</s>"]
    assert [[pieces[i] for i in group] for group in group_pieces(pieces)] == [
        ["\u2581rid", "ing"], ["\u2581a"], ["\u2581bi", "ke", "."], ["</s>"]
    ]  # fmt: skip
    merged = viz.select_tokens(np.full((7, 7), 1 / 7), pieces, pieces, merge_words=True)
    assert merged.key_tokens == ["riding", "a", "bike.", "</s>"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(["\u2581a", "b", "\u2581cd", "e", ".", "</s>", "<s>"]), min_size=1, max_size=9),
    st.integers(0, 2**32 - 1),
)
def test_word_merge_matches_direct_computation_for_any_pieces(pieces, seed):
    weights = np.random.default_rng(seed).dirichlet(np.ones(len(pieces)), size=len(pieces))
    merged = viz.select_tokens(weights, pieces, pieces, merge_words=True)
    np.testing.assert_allclose(merged.weights, direct_word_merge(weights, pieces, pieces), atol=1e-12)


def test_hiding_specials_drops_them_without_renormalising(trace):
    axes = viz.attention_axes(trace, "cross")
    weights = axes.stack[0, 1]
    hidden = viz.select_tokens(weights, axes.query_pieces, axes.key_pieces, show_special=False)
    keep_keys = [k for k, piece in enumerate(axes.key_pieces) if piece not in STRUCTURAL_PIECES]
    keep_queries = [q for q, piece in enumerate(axes.query_pieces) if piece not in STRUCTURAL_PIECES]
    np.testing.assert_array_equal(hidden.weights, weights[np.ix_(keep_queries, keep_keys)])
    eos_weight = weights[keep_queries, axes.key_pieces.index("</s>")]
    np.testing.assert_allclose(hidden.weights.sum(axis=-1), 1.0 - eos_weight, atol=1e-5)
    assert "</s>" not in hidden.key_tokens and "<s>" not in hidden.query_tokens


# --- aggregates ---


def direct_rollout(stack: np.ndarray) -> np.ndarray:
    """Abnar & Zuidema's recipe written out layer by layer."""
    n = stack.shape[-1]
    result = np.eye(n)
    for layer in range(stack.shape[0]):
        average = sum(stack[layer, head] for head in range(stack.shape[1])) / stack.shape[1]
        with_residual = 0.5 * average + 0.5 * np.eye(n)
        with_residual = with_residual / with_residual.sum(axis=1, keepdims=True)
        result = with_residual @ result
    return result


@pytest.mark.parametrize("kind", ["encoder_self", "decoder_self"])
def test_rollout_equals_direct_computation(trace, kind):
    stack = viz.attention_axes(trace, kind).stack.astype(np.float64)
    rollout = attention_rollout(stack)
    assert rollout.shape == (stack.shape[0],) + stack.shape[-2:]
    np.testing.assert_allclose(rollout[-1], direct_rollout(stack), atol=1e-12)
    np.testing.assert_allclose(rollout[0], direct_rollout(stack[:1]), atol=1e-12)
    np.testing.assert_allclose(rollout[-1].sum(axis=-1), 1.0, atol=1e-9)


def test_rollout_refuses_cross_attention(trace):
    with pytest.raises(ValueError, match="self-attention"):
        attention_rollout(viz.attention_axes(trace, "cross").stack)


def test_aggregate_figure_panels(trace):
    axes = viz.attention_axes(trace, "encoder_self")
    through_layer_1 = attention_rollout(axes.stack[:2])[-1]
    figure = viz.aggregate_figure(axes.stack, 1, axes.query_pieces, axes.key_pieces, rollout=through_layer_1)
    mean, maximum, rollout = (data.z for data in figure.data)
    np.testing.assert_allclose(mean, axes.stack[1].mean(axis=0), atol=1e-6)
    np.testing.assert_array_equal(maximum, axes.stack[1].max(axis=0))
    np.testing.assert_allclose(rollout, direct_rollout(axes.stack.astype(np.float64)), atol=1e-6)
    assert ticktext(figure.layout.xaxis) == display_labels(axes.key_pieces)
    cross = viz.attention_axes(trace, "cross")
    assert len(viz.aggregate_figure(cross.stack, 0, cross.query_pieces, cross.key_pieces).data) == 2


# --- positional encoding ---


def test_positional_figures_show_the_captured_encoding(trace):
    encoding = trace.positional["encoder.positional"]
    pieces = trace.source_pieces
    matrix = viz.positional_matrix(encoding, pieces)
    np.testing.assert_array_equal(matrix.data[0].z, encoding)
    assert ticktext(matrix.layout.yaxis) == [f"{p} {label}" for p, label in enumerate(display_labels(pieces))]
    curves = viz.positional_curves(encoding, [0, 1, 6])
    assert [data.name for data in curves.data] == ["dimension 0 (sin)", "dimension 1 (cos)", "dimension 6 (sin)"]
    np.testing.assert_array_equal(curves.data[2].y, encoding[:, 6])
    similarity = viz.positional_similarity(encoding, pieces)
    np.testing.assert_allclose(similarity.data[0].z, encoding.astype(np.float64) @ encoding.T, rtol=1e-6)
    norms = viz.encoding_norms(encoding, trace.embedding_norms["encoder"], pieces)
    np.testing.assert_allclose(norms.data[0].y, trace.embedding_norms["encoder"], rtol=1e-6)
    np.testing.assert_allclose(norms.data[1].y, np.linalg.norm(encoding, axis=-1), rtol=1e-6)


def test_sinusoidal_encoding_starts_with_sin_0_and_cos_0(trace):
    encoding = trace.positional["decoder.positional"]
    np.testing.assert_allclose(encoding[0, 0::2], 0.0, atol=1e-6)
    np.testing.assert_allclose(encoding[0, 1::2], 1.0, atol=1e-6)


# --- decoding ---


def test_decoding_step_reads_the_right_rows(trace):
    step = viz.decoding_step(trace, 2, 1)
    assert step.decoder_input == trace.target_pieces[:3] and step.decoder_input[0] == "<s>"
    assert step.predicted == trace.target_pieces[3]
    np.testing.assert_array_equal(step.cross_rows, trace.attention["decoder.layers.1.cross_attn"][:, 2, :])
    np.testing.assert_array_equal(step.self_rows, trace.attention["decoder.layers.1.self_attn"][:, 2, :3])
    assert step.chosen_rank == 0  # greedy decoding takes the most likely token
    assert step.top_pieces[0] == step.predicted
    with pytest.raises(ValueError, match="step"):
        viz.decoding_step(trace, trace.n_steps, 0)


def test_step_figures_hold_the_row_per_head_and_the_mean(trace):
    step = viz.decoding_step(trace, 1, 0)
    figure = viz.step_attention(step.cross_rows, trace.source_pieces)
    z = figure.data[0].z
    np.testing.assert_array_equal(z[:-1], step.cross_rows)
    np.testing.assert_allclose(z[-1], step.cross_rows.mean(axis=0), atol=1e-7)
    assert ticktext(figure.layout.xaxis) == display_labels(trace.source_pieces)
    assert ticktext(figure.layout.yaxis) == ["head 1", "head 2", "head 3", "head 4", "mean"]
    merged = viz.step_attention(step.cross_rows, trace.source_pieces, merge_words=True)
    expected = direct_word_merge(
        np.vstack([step.cross_rows, step.cross_rows.mean(axis=0)]), ["\u2581row"] * 5, trace.source_pieces
    )
    np.testing.assert_allclose(merged.data[0].z, expected, atol=1e-6)
    top = viz.top_k_figure(step.top_pieces, step.top_probabilities, step.chosen_rank)
    np.testing.assert_array_equal(top.data[0].x, step.top_probabilities)
    assert ticktext(top.layout.yaxis) == display_labels(step.top_pieces)


@pytest.mark.parametrize("options", [{}, {"merge_words": True, "show_special": False}, {"annotate": True}])
def test_the_step_figure_holds_the_bars_and_both_attentions_of_its_step(trace, options):
    """One figure for the page's decoding step: its panels hold exactly what top_k_figure and step_attention hold
    (bars, cross-attention over the source, self-attention over the output so far) on one colour axis."""
    step = viz.decoding_step(trace, 2, 1)
    figure = viz.decoding_step_figure(step, trace.source_pieces, **options, title="Step 3")
    bars, cross, own = figure.data
    top = viz.top_k_figure(step.top_pieces, step.top_probabilities, step.chosen_rank)
    assert (bars.type, bars.orientation) == ("bar", "h")
    np.testing.assert_array_equal(bars.x, top.data[0].x)
    assert bars.marker.color == top.data[0].marker.color  # the chosen token stands out
    assert ticktext(figure.layout.yaxis) == ticktext(top.layout.yaxis)
    for panel, rows, keys, axis in ((cross, step.cross_rows, trace.source_pieces, "xaxis2"),
                                    (own, step.self_rows, step.decoder_input, "xaxis3")):  # fmt: skip
        alone = viz.step_attention(rows, keys, **options)
        np.testing.assert_array_equal(panel.z, alone.data[0].z)
        assert ticktext(figure.layout[axis]) == ticktext(alone.layout.xaxis)
        assert panel.coloraxis == "coloraxis" and (panel.texttemplate is not None) == bool(options.get("annotate"))
    assert (figure.layout.coloraxis.cmin, figure.layout.coloraxis.cmax) == (0.0, 1.0)
    assert ticktext(figure.layout.yaxis3) == ["head 1", "head 2", "head 3", "head 4", "mean"]
    # the panels do not overlap: bars beside the cross-attention, both above the self-attention
    assert figure.layout.xaxis.domain[1] < figure.layout.xaxis2.domain[0]
    assert figure.layout.yaxis3.domain[1] < min(figure.layout.yaxis.domain[0], figure.layout.yaxis2.domain[0])
    first = viz.decoding_step_figure(step, trace.source_pieces, attention_first=True)
    assert first.layout.xaxis2.domain[1] < first.layout.xaxis.domain[0]


def test_token_probabilities(trace):
    figure = viz.token_probabilities(trace.predicted_pieces, trace.step_probs)
    np.testing.assert_array_equal(figure.data[0].y, trace.step_probs)
    assert ticktext(figure.layout.xaxis) == display_labels(trace.predicted_pieces)
    # the hover names each bar's step counted from 1, as the steps view does
    assert [row[0] for row in figure.data[0].customdata] == list(range(1, len(trace.step_probs) + 1))
    assert figure.data[0].hovertemplate.startswith("step %{customdata[0]}: %{customdata[1]}")
