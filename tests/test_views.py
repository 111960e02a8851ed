"""Each view on its own: the entry point draws nothing when imported, and a view renders from a context built here."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from explorer import views
from explorer.state import Setting, parse_bool
from model import load_checkpoint
from tests.app_utils import assert_ok, chart_titled, chart_titles, plotly_array

SENTENCE = "a man rides a blue bike in the park."  # words the toy tokenizer knows
CHECKPOINT_ENV = "VIEW_TEST_CHECKPOINT"  # how the test hands its checkpoint to the script below


def positional_view_alone() -> None:
    """Run in AppTest as a script of its own (so it imports what it uses)."""
    import os

    import app  # noqa: F401 - importing the entry point must draw nothing
    from explorer.compute import ModelKey, TraceKey, compute_trace, load_translator
    from explorer.context import Display, PageContext
    from explorer.state import read_url
    from explorer.views import positional
    from model.checkpoint import CheckpointEntry, read_card

    path = os.environ["VIEW_TEST_CHECKPOINT"]
    key = TraceKey(ModelKey.of(path, "cpu"), "a man rides a blue bike in the park.", beam_size=1, max_len=None)
    entry = CheckpointEntry("tiny-en-de", path, read_card(path))
    read_url()
    display = Display(merge_words=False, show_special=True, annotate=False)
    positional.render(PageContext(entry, load_translator(key.model), compute_trace(key), key, display, (0, 0)))


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
    for side, pieces in (("encoder", trace.source_pieces), ("decoder", trace.decoder_input_pieces)):
        app.radio(key="positional_side").set_value(side).run()
        assert_ok(app)
        matrix = chart_titled(app, "Positional encoding added at each position")
        assert plotly_array(matrix["data"][0]["z"]).shape[0] == len(pieces)


def test_the_view_registry_lists_each_view_once_and_presenter_mode_opens_on_the_steps():
    keys = [view.key for view in views.VIEWS]
    assert len(keys) == len(set(keys))
    assert views.choices(presenting=False) == keys and keys[0] == "cross"  # a page opens on cross-attention
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
