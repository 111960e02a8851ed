"""viz.margins.fit_margins: the left and bottom margins hold the labels of the axes along those edges, so that
plotly.js draws a figure once (tests/browser/test_browser.py checks that it does, in Chromium)."""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go

import viz
from viz.margins import LINE, SLACK_PX, TICK_GAP_PX, TITLE_STANDOFF_PX, text_width
from viz.style import FONT_SIZE


def heatmap(rows: list[str], columns: list[str], **layout) -> go.Figure:
    size = (len(rows), len(columns))
    figure = go.Figure(go.Heatmap(z=np.ones(size), x=list(range(size[1])), y=list(range(size[0]))))
    figure.update_xaxes(tickmode="array", tickvals=list(range(size[1])), ticktext=columns, tickangle=-60)
    figure.update_yaxes(tickmode="array", tickvals=list(range(size[0])), ticktext=rows, title_text="output token")
    figure.update_layout(margin={"l": 10, "b": 10}, font_size=FONT_SIZE, **layout)
    return figure


def test_the_left_margin_holds_the_longest_row_label_and_the_axis_title():
    short = viz.fit_margins(heatmap(["a", "b"], ["x", "y"]))
    long = viz.fit_margins(heatmap(["a", "Straßenbahnhaltestelle"], ["x", "y"]))
    title_room = TITLE_STANDOFF_PX + FONT_SIZE * LINE
    assert long.layout.margin.l >= text_width("Straßenbahnhaltestelle", FONT_SIZE) + title_room
    assert long.layout.margin.l - short.layout.margin.l >= text_width("Straßenbahnhaltestelle", FONT_SIZE) - 2 * 12


def test_slanted_column_labels_push_the_bottom_by_their_slanted_height():
    figure = viz.fit_margins(heatmap(["a"], ["Fahrradfahrer", "x"]))
    slanted = text_width("Fahrradfahrer", FONT_SIZE) * np.sin(np.radians(60))
    assert slanted < figure.layout.margin.b <= slanted + FONT_SIZE * LINE + TICK_GAP_PX + SLACK_PX + 1


def test_wider_margins_stay_and_the_figure_is_returned():
    figure = heatmap(["a"], ["x"])
    figure.update_layout(margin={"l": 400, "b": 300})
    assert viz.fit_margins(figure) is figure
    assert (figure.layout.margin.l, figure.layout.margin.b) == (400, 300)


def two_panels(left_labels_shown: bool = True) -> go.Figure:
    """A narrow panel at the left edge and a wide one right of it, half as high, with long row labels."""
    long = ["a very long row label"] * 2
    return go.Figure(
        [go.Heatmap(z=np.ones((2, 2)), xaxis="x", yaxis="y"), go.Heatmap(z=np.ones((2, 2)), xaxis="x2", yaxis="y2")],
        layout={
            "xaxis": {"domain": [0.0, 0.3], "anchor": "y", "ticktext": ["a", "b"], "tickvals": [0, 1]},
            "yaxis": {"anchor": "x", "ticktext": ["c", "d"], "tickvals": [0, 1], "showticklabels": left_labels_shown},
            "xaxis2": {"domain": [0.4, 1.0], "anchor": "y2", "ticktext": long, "tickvals": [0, 1], "tickangle": 90},
            "yaxis2": {"domain": [0.5, 1.0], "anchor": "x2", "ticktext": long, "tickvals": [0, 1]},
            "margin": {"l": 0, "b": 0},
        },
    )


def test_a_figure_too_short_for_its_y_title_grows_until_the_title_fits():
    title = "output token (written at this step)"  # the attention heatmaps' row title
    one_row = heatmap(["a"], ["x", "y"], height=204, margin_t=60)
    one_row.update_yaxes(title_text=title)
    viz.fit_margins(one_row)
    top, bottom, height = one_row.layout.margin.t, one_row.layout.margin.b, one_row.layout.height
    plot = height - top - bottom
    # written upwards, centred on the plot: half of it reaches no further than the plot's half and the nearer margin
    assert text_width(title, FONT_SIZE) / 2 <= plot / 2 + min(top, bottom)
    assert height > 204
    many_rows = heatmap([str(row) for row in range(12)], ["x"], height=500, margin_t=60)
    assert viz.fit_margins(many_rows).layout.height == 500  # tall enough already: left as it is


def test_only_the_axes_along_the_left_and_bottom_edges_count():
    """The right panel's long row labels sit between the panels, and its column labels above the left panel's
    bottom: inside the figure."""
    long = text_width("a very long row label", FONT_SIZE)
    figure = viz.fit_margins(two_panels())
    assert 0 < figure.layout.margin.l < long and 0 < figure.layout.margin.b < long
    assert viz.fit_margins(two_panels(left_labels_shown=False)).layout.margin.l == 0


def test_labels_come_from_aliases_category_names_or_numbers():
    """A grid names its ticks' numbers (labelalias); bars along string categories (a numpy array) name them; a
    numeric axis writes numbers."""
    aliased = go.Figure(go.Heatmap(z=np.ones((2, 2))), layout={"margin": {"l": 0}})
    aliased.update_yaxes(tickmode="linear", labelalias={"0": "Straßenbahnhaltestelle", "1": "b"})
    bars = go.Figure(go.Bar(x=[0.5, 0.2], y=np.array(["Straßenbahnhaltestelle", "b"]), orientation="h"))
    bars.update_layout(margin={"l": 0})
    numbers = go.Figure(go.Bar(x=[0.5, 0.2], y=[0.1, 0.2], orientation="h"), layout={"margin": {"l": 0}})
    long = text_width("Straßenbahnhaltestelle", FONT_SIZE)
    assert viz.fit_margins(aliased).layout.margin.l >= long
    assert viz.fit_margins(bars).layout.margin.l >= long
    assert 0 < viz.fit_margins(numbers).layout.margin.l < long


def test_every_view_figure_keeps_its_data_and_validates(trace):
    axes = viz.attention_axes(trace, "cross")
    step = viz.decoding_step(trace, 1, 0)
    for figure in (
        viz.head_heatmap(axes, 0, 0, title="head"),
        viz.decoding_step_figure(step, trace.source_pieces, title="Step 2"),
        viz.attention_grid(axes.stack, axes.query_pieces, axes.key_pieces, title="grid"),
    ):
        before = json.loads(figure.to_json())
        viz.fit_margins(figure)
        after = json.loads(figure.to_json())
        assert after["data"] == before["data"]
        margins = after["layout"]["margin"]
        assert margins["l"] > 10 and margins["b"] > 10 and isinstance(margins["l"], int)
        go.Figure(after)  # plotly's validation of the whole figure
