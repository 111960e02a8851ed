"""viz/: the figures' shared look (viz.style): colour scales, the trimmed plotly_white template, figures built without
plotly's validation that still send valid JSON, the chart toolbar's config, and viz's exports. The trace is the
trace fixture (tests/viz/conftest.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import plotly.colors
import plotly.io
import torch

import viz
from model.analysis.questions import ClassQuestion
from model.analysis.samples import explain_draw
from model.decoding import Sampling


def test_power_colorscale_bends_colours_not_values():
    scale = viz.power_colorscale("Blues", 0.5, steps=5)
    positions = [stop for stop, _ in scale]
    assert positions == [0.0, 0.0625, 0.25, 0.5625, 1.0]
    assert scale[2][1] == plotly.colors.sample_colorscale("Blues", [0.5])[0]  # weight 0.25 gets the middle colour


NON_CARTESIAN = {"polar", "ternary", "scene", "geo"}


def test_figures_carry_plotly_white_with_the_defaults_of_their_own_trace_types(trace):
    white = plotly.io.templates["plotly_white"]
    assert NON_CARTESIAN <= set(white.layout.to_plotly_json())  # what the trimmed templates leave out
    axes = viz.attention_axes(trace, "encoder_self")
    for figure, drawn in (
        (viz.attention_heatmap(axes.stack[0, 0], axes.query_pieces, axes.key_pieces), {"heatmap"}),
        (viz.token_probabilities(trace.predicted_pieces, trace.step_probs), {"bar"}),
        (viz.head_view(axes.stack[0], axes.query_pieces, axes.key_pieces), {"scatter"}),
    ):
        template = figure.layout.template
        cartesian = {key: value for key, value in white.layout.to_plotly_json().items() if key not in NON_CARTESIAN}
        assert template.layout.to_plotly_json() == cartesian
        for kind in ("bar", "heatmap", "scatter", "histogram"):
            assert template.data[kind] == (white.data[kind] if kind in drawn else ())
    polar = viz.style.white_template(frozenset({"barpolar"}))
    assert polar.layout.polar == white.layout.polar and polar.data.barpolar == white.data.barpolar


def unvalidated_figures(trace) -> list:
    """Every kind of figure viz.style.white_figure builds without plotly's validation, options on and off, and
    one whose template viz.style.base_layout sets without validating it again."""
    axes = viz.attention_axes(trace, "encoder_self")
    step = viz.decoding_step(trace, 1, 0)
    figures = [
        viz.token_probabilities(trace.predicted_pieces, trace.step_probs, title="<probabilities>"),
        viz.top_k_figure(step.top_pieces, step.top_probabilities, step.chosen_rank, title="top"),
    ]
    for options in ({}, {"annotate": True, "merge_words": True}, {"show_special": False}):
        figures.append(viz.step_attention(step.cross_rows, trace.source_pieces, **options, title="cross"))
        figures.append(viz.attention_heatmap(axes.stack[1, 2], axes.query_pieces, axes.key_pieces, **options))
    figures.append(viz.decoding_step_figure(step, trace.source_pieces, title="<step>", panel_titles=("a", "b", "c")))
    figures.append(viz.decoding_step_figure(step, trace.source_pieces, annotate=True, attention_first=True))
    draw = explain_draw(torch.tensor([0.5, 0.3, 0.2]).log(), Sampling(temperature=1.5, top_k=2), token=1)
    figures.append(viz.draw_figure(replace(draw, candidate_pieces=["▁a", "▁<b>", "</s>"]), title="<draw>"))
    question = ClassQuestion("looks_at", "?", ("▁a", "<b>"), (0.25, 0.75), 1, "attention weight")
    figures.extend(viz.class_answers_figure(question, [2, 1], revealed=revealed) for revealed in (False, True))
    figures.append(many_panels())
    figures.append(viz.attention_grid(axes.stack, axes.query_pieces, axes.key_pieces))  # last: base_layout's
    return figures


def many_panels() -> plotly.graph_objects.Figure:
    """white_figure with a panel per axis pair up to x12/y12, each named in the layout."""
    suffixes = [""] + [str(panel) for panel in range(2, 13)]
    traces = [{"type": "heatmap", "z": [[index, 1.0]], "xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}
              for index, suffix in enumerate(suffixes)]  # fmt: skip
    layout = {}
    for index, suffix in enumerate(suffixes):
        layout[f"xaxis{suffix}"] = {"domain": [index / 12, (index + 0.9) / 12], "anchor": f"y{suffix}"}
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}"}
    return viz.style.white_figure(traces, layout, annotations=[{"text": "twelve", "showarrow": False}])


def objects_read_as_stored(node) -> bool:
    """Whether a plotly object's graph objects (each nested object and tuple of them, read in turn) show what it
    stores: plotly_update and plotly_relayout store values without updating the objects plotly already made."""

    def read(value):
        if isinstance(value, tuple):
            return [read(item) for item in value]
        if hasattr(value, "to_plotly_json"):
            return {key: read(value[key]) for key in value.to_plotly_json()}
        return value

    def as_json(value) -> str:
        return json.dumps(value, cls=plotly.utils.PlotlyJSONEncoder, sort_keys=True)

    return as_json(read(node)) == as_json(node.to_plotly_json())


def test_figures_built_without_validation_are_valid_plotly_and_send_the_same_json(trace):
    for figure in unvalidated_figures(trace):
        validated = plotly.graph_objects.Figure(figure.to_dict())  # raises on any property plotly does not know
        assert json.loads(plotly.io.to_json(validated)) == json.loads(plotly.io.to_json(figure))
        assert all(objects_read_as_stored(node) for node in (figure.layout, *figure.data))
        assert figure.layout.template.layout.paper_bgcolor == "white"


def test_figures_do_not_share_their_template(trace):
    first, second = unvalidated_figures(trace)[:2]
    first.layout.template.layout.paper_bgcolor = "black"
    assert second.layout.template.layout.paper_bgcolor == "white"
    assert unvalidated_figures(trace)[0].layout.template.layout.paper_bgcolor == "white"
    grid = unvalidated_figures(trace)[-1]  # its template from base_layout, the same cached one as the heatmaps'
    grid.layout.template.layout.paper_bgcolor = "black"
    assert all(figure.layout.template.layout.paper_bgcolor == "white" for figure in unvalidated_figures(trace))


def test_chart_config_exports_png_with_a_safe_name():
    config = viz.chart_config("tiny en/de: <cross>")
    assert config["toImageButtonOptions"] == {"format": "png", "filename": "tiny-en-de-cross", "scale": 2}
    assert viz.download_name("tiny en/de: <cross>") == "tiny-en-de-cross" and viz.download_name("//") == "figure"
    assert "zoomIn2d" in config["modeBarButtonsToRemove"] and "toImage" not in config["modeBarButtonsToRemove"]
    json.dumps(config)


def test_viz_exports_the_new_figure_builders():
    for name in (
        "fork_tokens_figure",
        "beam_tree_figure",
        "attention_stage_figures",
        "head_stats_heatmap",
        "pair_difference_heatmap",
        "importance_heatmap",
        "word_order_attention_figure",
        "draw_figure",
        "samples_frame",
    ):
        assert name in viz.__all__ and callable(getattr(viz, name))
