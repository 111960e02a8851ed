"""The map of the model (Figure 1) beside the views: drawn for the open model, every box opening its view, the view
open marked. AppTest does not run the map's JavaScript: the boxes' clicks are the settings they set
(explorer.components.figure_map.settings_to_open); the browser presses them in tests/browser/test_figure_map.py."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from explorer.components.figure_map import settings_to_open
from model.analysis.figure_one import figure_boxes
from model.checkpoint import read_config
from tests.app_helpers import assert_ok, chart_titles, component_data
from tests.helpers import APP, DEFAULT_CHECKPOINT
from viz.presenter import PRESENTER_SCALE

MAP = "attention_explorer.figure_map"


@pytest.fixture(scope="module")
def app() -> AppTest:
    return AppTest.from_file(APP, default_timeout=60).run()


def test_the_map_is_drawn_for_the_open_model_and_marks_the_first_view(app):
    assert_ok(app)
    data = component_data(app, MAP)
    config = read_config(DEFAULT_CHECKPOINT)
    encoder, decoder = data["stacks"]
    assert (encoder["layers"], decoder["layers"]) == (config.n_encoder_layers, config.n_decoder_layers)
    # the default model is pre-norm with a final norm: Norm before each sublayer, Add after, a Norm on top
    assert [box["label"] for box in decoder["layer"]] == [
        "Norm",
        "Masked Multi-Head Attention",
        "Add",
        "Norm",
        "Multi-Head Attention over the encoder",
        "Add",
        "Norm",
        "Feed Forward",
        "Add",
    ]
    assert [box["label"] for box in decoder["above"]] == ["Norm"]
    assert data["current"] == ["decoder.cross_attn"] and data["layer"] == app.session_state["layer"]
    for key in ("decoder.cross_attn", "encoder.feed_forward", "decoder.add.cross_attn"):
        assert len(data["numbers"][key]) == config.n_decoder_layers, key


def test_each_box_opens_its_view_and_the_map_marks_it(app):
    config = read_config(DEFAULT_CHECKPOINT)
    opened = {}
    for box in figure_boxes(config):
        settings = settings_to_open(box, 1)
        key = tuple(sorted(settings.items()))
        if key in opened:  # boxes that open the same page (a layer's Norm and Add) are drawn once
            opened[key].append(box.key)
            continue
        opened[key] = [box.key]
        for name, value in settings.items():
            app.session_state[name] = value
        app.run()
        assert_ok(app)
        assert chart_titles(app), box.key
        data = component_data(app, MAP)
        assert box.key in data["current"], (box.key, data["current"])
        assert data["layer"] in (None, 1)
        defaults = app.session_state["url_defaults"]
        for name, value in settings.items():  # a link holds the box and the layer; a default is left out
            assert app.query_params.get(name, str(defaults[name])) == str(value), (box.key, name)
    assert {settings["view"] for settings in map(dict, opened)} == {
        "embedding",
        "positional",
        "encoder_self",
        "decoder_self",
        "cross",
        "residual",
        "feed_forward",
        "steps",
    }


def test_presenter_mode_draws_every_view_alone_and_the_map_large_as_a_view_of_its_own():
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params["presenter"] = "true"
    app.run()
    assert_ok(app)
    assert "The model (Figure 1)" in app.segmented_control(key="view").options  # the picker's labels
    assert not [element for element in app.get("bidi_component") if element.proto.component_name == MAP]
    app.segmented_control(key="view").set_value("map").run()
    assert_ok(app)
    data = component_data(app, MAP)
    assert data["scale"] == PRESENTER_SCALE and data["current"] == []
    plain = AppTest.from_file(APP, default_timeout=60)
    plain.query_params["view"] = "map"  # not a view of the page outside presenter mode: its default opens
    plain.run()
    assert plain.session_state["view"] == "cross"
    assert "The model (Figure 1)" not in plain.segmented_control(key="view").options
