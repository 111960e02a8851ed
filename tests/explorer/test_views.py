"""Each view on its own: the entry point draws nothing when imported, and a view renders from a context built here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

import viz
from explorer import views
from explorer.state import Setting, parse_bool
from explorer.views.experiments import EXPERIMENTS
from model import Transformer, load_checkpoint
from model.checkpoint import save_checkpoint
from tests.app_helpers import assert_ok, chart_titled, chart_titles, component_data, plotly_array
from tests.helpers import APP, CHECKPOINTS_ENV, SENTENCE, small_config

CHECKPOINT_ENV = "VIEW_TEST_CHECKPOINT"  # how the test hands its checkpoint to the script below
OPUS_MT_SHAPE = {"n_encoder_layers": 6, "n_decoder_layers": 6, "n_heads": 8}  # opus-mt-en-de's; d_model stays small


def positional_view_alone() -> None:
    """Run in AppTest as a script of its own (so it imports what it uses)."""
    import os

    import app  # noqa: F401 - importing the entry point must draw nothing
    from explorer.compute import ModelKey, TraceKey, compute_trace, load_translator
    from explorer.context import PageContext, TokenStyle
    from explorer.state import read_url
    from explorer.views import positional
    from model.checkpoint import CheckpointEntry, read_card

    path = os.environ["VIEW_TEST_CHECKPOINT"]
    key = TraceKey(ModelKey.of(path, "cpu"), "a man rides a blue bike in the park.", beam_size=1, max_new_tokens=None)
    entry = CheckpointEntry("tiny-en-de", path, read_card(path))
    read_url()
    token_style = TokenStyle(merge_words=False, show_special=True, annotate=False)
    positional.render(
        PageContext(entry, load_translator(key.model).config, compute_trace(key), key, token_style, (0, 0))
    )


def test_importing_app_draws_nothing_and_a_view_renders_alone(monkeypatch, tiny_checkpoint):
    monkeypatch.setenv(CHECKPOINT_ENV, str(tiny_checkpoint))
    app = AppTest.from_function(positional_view_alone, default_timeout=60).run()
    assert_ok(app)
    assert not app.title and not app.text_input and not app.sidebar.children  # nothing of the page around the view
    assert chart_titles(app) == [
        "Positional encoding added at each position",
        "Chosen dimensions along the sentence",
        "Similarity of positions (dot products)",
        "Size of position vs. size of token",
    ]
    trace = load_checkpoint(tiny_checkpoint, device="cpu").trace(SENTENCE, beam_size=1)
    for stack, pieces in (("encoder", trace.source_pieces), ("decoder", trace.decoder_input_pieces)):
        app.radio(key="positional_stack").set_value(stack).run()
        assert_ok(app)
        matrix = chart_titled(app, "Positional encoding added at each position")
        assert plotly_array(matrix["data"][0]["z"]).shape[0] == len(pieces)


def test_the_view_registry_lists_each_view_once_and_presenter_mode_opens_on_the_steps():
    keys = [view.key for view in views.VIEWS]
    assert len(keys) == len(set(keys))
    page = [key for key in keys if key != "map"]  # the map alone is a view of presenter mode only
    assert views.choices(presenting=False) == page and page[0] == "cross"  # a page opens on cross-attention
    assert views.choices(presenting=True) == ["steps", *(key for key in keys if key != "steps")]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("2,0,2", [2, 0]), ("1,x,9,3", [1, 3]), ("", []), ("0", [0])],
)
def test_a_multi_setting_keeps_its_valid_items_in_url_order(raw, expected):
    setting = Setting("dims", int, [0], multi=True)
    assert setting.from_url(raw, [0], options=[0, 1, 2, 3]) == expected


def test_a_setting_falls_back_to_its_default_on_text_it_cannot_read():
    flag = Setting("flag", parse_bool, False, (False, True))
    assert flag.from_url("true", False, (False, True)) is True
    assert flag.from_url("maybe", False, (False, True)) is False
    layer = Setting("layer", int, 0)
    assert layer.from_url("two", 0, [0, 1]) == 0 and layer.from_url("7", 0, [0, 1]) == 0
    assert layer.from_url("1", 0, [0, 1]) == 1
    assert Setting("text", str).from_url("any text, even 7", "", None) == "any text, even 7"


@pytest.fixture(scope="module")
def opus_shaped_folder(tmp_path_factory, toy_tokenizer) -> Path:
    """A checkpoints folder holding one random model of opus-mt-en-de's shape (6+6 layers of 8 heads), d_model 64."""
    torch.manual_seed(0)
    vocab = toy_tokenizer.vocab_size("source")
    config = small_config(
        vocab, d_model=64, d_ff=128, share_embeddings=True, tie_output=True, output_bias=False, **OPUS_MT_SHAPE
    )
    folder = tmp_path_factory.mktemp("opus-shaped")
    card = {"source_language": "en", "target_language": "de", "data": "random weights (tests)"}
    save_checkpoint(folder / "opus-shaped-en-de", Transformer(config).eval(), toy_tokenizer, card)
    return folder


def heatmaps(spec: dict) -> list[dict]:
    return [trace for trace in spec["data"] if trace["type"] == "heatmap"]


@pytest.mark.slow  # every view of a 6+6-layer, 8-head model
def test_48_heads_a_kind_page_the_grid_and_every_view_draws(monkeypatch, opus_shaped_folder):
    """opus-mt-en-de's shape on a three-sentence source: the all-heads grid shows three layers of 8 heads a page,
    each page on one screen with its labels thinned; every other view and experiment draws."""
    monkeypatch.setenv(CHECKPOINTS_ENV, str(opus_shaped_folder))
    sentence = " ".join([SENTENCE] * 3)
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params.update({"sentence": sentence, "view": "encoder_self", "display": "grid"})
    app.run()
    assert_ok(app)
    picker = app.selectbox(key="grid_layers")
    assert picker.value == "0-2"  # the link counts from 0, the page from 1
    assert picker.options == ["layers 1–3", "layers 4–6", "all layers (1–6)", *(f"layer {n}" for n in range(1, 7))]
    grid = chart_titled(app, "Encoder self-attention")
    assert grid["layout"]["title"]["text"] == "Encoder self-attention, layers 1–3"
    assert len(heatmaps(grid)) == 3 * 8 and grid["layout"]["height"] <= 800  # a page on one screen
    pieces = len(grid["layout"]["xaxis"]["labelalias"])
    assert pieces >= 30  # a long sentence: its labels are thinned to what fits an 8-head panel
    step = grid["layout"]["xaxis"]["ticklabelstep"]
    assert math.ceil(pieces / step) * viz.grid.TICK_LABEL_PX <= viz.grid.GRID_PLOT_WIDTH_PX / 8

    app.selectbox(key="grid_layers").set_value("3-5").run()
    grid = chart_titled(app, "Encoder self-attention")
    assert heatmaps(grid)[0]["hovertemplate"].startswith("layer 4, head 1<br>")
    assert app.query_params["grid_layers"] == "3-5"
    app.selectbox(key="grid_layers").set_value("0-5").run()  # all layers: a longer page to scroll
    assert len(heatmaps(chart_titled(app, "Encoder self-attention"))) == 6 * 8
    app.selectbox(key="grid_layers").set_value("4").run()  # one layer's heads in a row
    assert chart_titles(app)[0] == "Encoder self-attention, layer 5"

    app.radio(key="display").set_value("heads").run()
    assert_ok(app)
    assert len(component_data(app, "attention_explorer.head_view")["colours"]) == 8
    for view in views.choices(presenting=False):
        app.segmented_control(key="view").set_value(view).run()
        assert_ok(app)
        if view == "quiz":
            assert len(app.selectbox(key="quiz_head").options) == 1 + 8  # the mean over the heads, then each
    app.segmented_control(key="view").set_value("experiments").run()
    for experiment in EXPERIMENTS:
        app.segmented_control(key="experiment").set_value(experiment.key).run()
        assert_ok(app)
        if experiment.key == "ablation":
            assert len(app.multiselect(key="ablate").options) == 3 * 6 * 8  # every head of every kind
