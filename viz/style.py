"""Shared look of every figure: colour scales, sizes, and the chart toolbar's PNG export."""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np
import plotly.colors
import plotly.graph_objects as go
import plotly.io

from model.heads import head_label, layer_label

HEAD_COLOURS = plotly.colors.qualitative.D3  # one colour per head, the same in every view
FONT_SIZE = 12
ROW_HEIGHT = 24  # pixels per token row, enough for a 12 px label
LAYER_ROW_HEIGHT = 56  # pixels per layer row of a layers × heads panel: room for the value written in each cell


def power_colorscale(name: str = "Blues", exponent: float = 0.5, steps: int = 33) -> list[list[Any]]:
    """A plotly colour scale on which a weight w gets the colour the base scale gives w**exponent.

    With exponent 0.5 a weight of 0.04 is already a fifth of the way up the scale, so small
    weights stay visible. Only the colours are bent: z, the hover and the colour bar's ticks
    keep the exact weights.
    """
    levels = np.linspace(0.0, 1.0, steps)
    colours = plotly.colors.sample_colorscale(name, list(levels))
    return [[float(level ** (1.0 / exponent)), colour] for level, colour in zip(levels, colours, strict=True)]


ATTENTION_COLORSCALE = power_colorscale("Blues", 0.5)


def head_colour(head: int, alpha: float = 1.0) -> str:
    """The colour of a head as rgba, with the given opacity."""
    red, green, blue = plotly.colors.hex_to_rgb(HEAD_COLOURS[head % len(HEAD_COLOURS)])
    return f"rgba({red},{green},{blue},{alpha:.3f})"


# plotly_white's layout defaults for subplots other than x/y axes, and the trace types drawn on them
NON_CARTESIAN_SUBPLOTS = {
    "polar": {"scatterpolar", "scatterpolargl", "barpolar"},
    "ternary": {"scatterternary"},
    "scene": {"scatter3d", "surface", "mesh3d", "cone", "streamtube", "volume", "isosurface"},
    "geo": {"scattergeo", "choropleth"},
}


@functools.cache
def white_template(trace_types: frozenset[str]) -> go.layout.Template:
    """plotly's "plotly_white" look with the defaults of ``trace_types`` and of their subplots only.

    A template's trace defaults apply to traces of their own type, and its polar, ternary, 3D
    and map defaults to those subplots, so a figure drawn with this one looks exactly as with
    the whole "plotly_white". Assigning a template validates all of it, once per figure; the
    full one (defaults for every trace type and subplot kind) makes that the largest cost of
    building a figure, and a large share of a small figure's JSON.
    """
    white = plotly.io.templates["plotly_white"].to_plotly_json()
    data = {kind: defaults for kind, defaults in white["data"].items() if kind in trace_types}
    unused = {subplot for subplot, drawn_on_it in NON_CARTESIAN_SUBPLOTS.items() if not drawn_on_it & trace_types}
    layout = {key: value for key, value in white["layout"].items() if key not in unused}
    return go.layout.Template(layout=layout, data=data)


def apply_white_template(figure: go.Figure) -> go.Figure:
    """Give ``figure`` white_template for its trace types without validating the template again.

    white_template's result was validated once, when it was built. Assigning it the usual way
    (``figure.layout.template = ...``) validates all of it again for every figure, most of the
    time a small heatmap takes to build. plotly_relayout, plotly's public counterpart of
    Plotly.relayout, checks that the property exists and stores the value as given, so the
    template goes in as its JSON, the form an assignment would have stored.

    Call it before anything reads ``figure.layout.template``, on a figure built with no template
    or with one without trace defaults (as white_figure's): plotly keeps the graph objects it
    makes for a template's trace defaults (``template.data.bar``), and they would go on showing
    the replaced template's. A template given at construction is validated, which makes them;
    plotly's default one, set when none is given, is set unvalidated and makes none.
    """
    template = white_template(frozenset(trace.type for trace in figure.data))
    figure.plotly_relayout({"template": template.to_plotly_json()})  # a deep copy: figures never share one
    return figure


def shared_layout(title: str, height: int) -> dict[str, Any]:
    """Title, height, margins and fonts every figure shares, as layout properties (the template aside:
    white_figure and base_layout add it).

    Give them to white_figure's ``layout`` where the figure is built in one go (updating a built
    figure, as base_layout does, re-validates its layout). ``title`` must already be HTML-safe.
    """
    return {
        "title": {"text": title, "x": 0.0, "xanchor": "left"},
        "height": height,
        "margin": {"l": 10, "r": 10, "t": 60, "b": 10},
        "font": {"size": FONT_SIZE},
    }


# Given to a figure at construction in place of the white template that apply_white_template sets: without a
# template plotly copies its whole default one in (a sizeable share of building a white_figure), only to be replaced.
# It has no trace defaults, so validating it makes no graph objects apply_white_template would leave stale.
_STAND_IN_TEMPLATE = {"layout": {"paper_bgcolor": "white"}}
PANEL_AXIS = re.compile(r"[xy]axis(?:[2-9]|[1-9]\d+)")  # the layout names of the axes after the first: xaxis2, ...


def white_figure(trace: dict[str, Any] | list[dict[str, Any]], layout: dict[str, Any], **objects: Any) -> go.Figure:
    """A figure of one trace (or of panels, one trace each) from plotly's dict form, with the white look of its trace
    types (apply_white_template), built without plotly's property validation.

    For the figures every page run draws: validating their properties is most of the time
    left in building them once the template is not validated. The figure is built empty, of the
    trace's type, and filled by one plotly_update (plotly's public counterpart of Plotly.update), which checks that each
    top-level property exists and stores its value as given; the figure serialises to the same
    JSON as a validated one. What the validation would catch beyond a misspelt top-level name (a
    misspelt nested property, a wrong value) is caught by the tests instead: tests/viz/test_style.py
    validates every figure these builders make against plotly's schema and compares the JSON.
    Lists of objects (``annotations``, ``shapes``) do not belong in ``layout``: plotly_update
    stores them but leaves ``figure.layout.annotations`` showing the old, empty list; pass them as ``objects``
    (``annotations=[...]``), validated with the figure's construction. ``trace`` may be a list: panels of one
    figure (each on its own axes, ``xaxis``/``yaxis`` "x2", "y2", ...).
    """
    traces = [dict(one) for one in (trace if isinstance(trace, list) else [trace])]
    kinds = [{"type": properties.pop("type")} for properties in traces]
    # a panel's axes (xaxis2, ...) exist only once named at construction: plotly_update fills them in
    panel_axes: dict[str, dict[str, Any]] = {name: {} for name in layout if PANEL_AXIS.fullmatch(name)}
    figure = go.Figure(kinds, layout={"template": _STAND_IN_TEMPLATE, **panel_axes, **objects})
    for index, properties in enumerate(traces):
        # a restyle value is a list of one value per trace given, applied in turn: here the one trace ``index``
        restyle = {name: [value] for name, value in properties.items()}
        figure.plotly_update(restyle_data=restyle, trace_indexes=[index])
    figure.plotly_update(relayout_data=layout)
    return apply_white_template(figure)


def base_layout(figure: go.Figure, title: str, height: int) -> go.Figure:
    """shared_layout and the white template applied to a built figure; call it once the traces are added.
    ``title`` must be HTML-safe."""
    figure.update_layout(shared_layout(title, height))
    return apply_white_template(figure)


def layer_head_axes(n_layers: int, n_heads: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """x (heads) and y (layers) axis settings of a layers × heads heatmap, the first layer at the top as in the grid;
    the ticks count from 1 (model.heads.layer_label)."""
    x_axis = {
        "tickmode": "array",
        "tickvals": list(range(n_heads)),
        "ticktext": [head_label(head) for head in range(n_heads)],
        "showgrid": False,
    }
    y_axis = {
        "tickmode": "array",
        "tickvals": list(range(n_layers)),
        "ticktext": [layer_label(layer) for layer in range(n_layers)],
        "autorange": "reversed",
        "showgrid": False,
    }
    return x_axis, y_axis


def add_layer_head_panel(
    figure: go.Figure, grid: np.ndarray, place: dict[str, int], panel: str, value: str, *, show_layers: bool = True
) -> None:
    """Draw ``grid`` (layers, heads) at ``place`` ({"row", "col"} of a subplot figure): one cell per head with its
    value written in it, on the figure's shared colour axis. The hover reads "``panel``, layer L, head H" over
    ``value`` (a plotly hover template line, e.g. "entropy %{z:.4f}"); both are HTML: escape any text in them.
    ``show_layers`` writes the layer labels."""
    n_layers, n_heads = grid.shape
    names = [[f"{layer_label(layer)}, {head_label(head)}" for head in range(n_heads)] for layer in range(n_layers)]
    figure.add_trace(
        go.Heatmap(
            z=grid,
            x=list(range(n_heads)),
            y=list(range(n_layers)),
            coloraxis="coloraxis",
            texttemplate="%{z:.2f}",
            customdata=names,
            hovertemplate=f"{panel}, %{{customdata}}<br>{value}<extra></extra>",
        ),
        **place,
    )
    x_axis, y_axis = layer_head_axes(n_layers, n_heads)
    figure.update_xaxes(x_axis, **place)
    figure.update_yaxes({**y_axis, "showticklabels": show_layers}, **place)


def token_rows(z: np.ndarray, text: np.ndarray, row_names: list[str], **heatmap: Any) -> go.Figure:
    """Translations as rows of token cells: one row per translation (named, first on top), one column per token,
    each cell showing its token (``text``) and coloured by ``z``; ``heatmap`` adds the colours and the hover."""
    rows, width = np.shape(z)
    cells = go.Heatmap(
        z=z,
        x=list(range(width)),
        y=list(range(rows)),
        text=text,
        texttemplate="%{text}",
        textfont={"size": 13},
        xgap=2,
        ygap=2,
        **heatmap,
    )
    y_axis = {"tickmode": "array", "tickvals": list(range(rows)), "ticktext": row_names, "autorange": "reversed"}
    return go.Figure(cells, layout={"yaxis": {**y_axis, "showgrid": False}})


def paired_bars(labels: list[str], series: list[tuple[np.ndarray, str, str]]) -> go.Figure:
    """Two bar series over the same tokens: one position per label (HTML-safe), ticks slanted, legend on top.

    ``series`` holds (values, legend name, hover after the token, e.g. "<br>length %{y:.3f}"), drawn in
    the first two head colours. The caller sets barmode (side by side or stacked) and the value axis.
    """
    positions = list(range(len(labels)))
    bars = [
        go.Bar(
            x=positions,
            y=values,
            name=name,
            marker_color=head_colour(index),
            customdata=labels,
            hovertemplate=f"%{{customdata}}{hover}<extra></extra>",
        )
        for index, (values, name, hover) in enumerate(series)
    ]
    figure = go.Figure(bars, layout={"legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"}})
    figure.update_xaxes(tickmode="array", tickvals=positions, ticktext=labels, tickangle=-60)
    return figure


def download_name(name: str) -> str:
    """``name`` as a file name without its extension: letters, digits, ``_.-``, every other run as one "-"."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "figure"


def chart_config(filename: str) -> dict[str, Any]:
    """plotly config for a chart whose toolbar camera button saves a PNG named after the view (the page adds an SVG
    button beside it: explorer/components/svg_download.js)."""
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": "png", "filename": download_name(filename), "scale": 2},
        # box zoom, pan and reset are enough; a shorter toolbar leaves more of the title in view while it shows
        "modeBarButtonsToRemove": ["zoomIn2d", "zoomOut2d", "autoScale2d"],
    }
