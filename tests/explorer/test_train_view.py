"""The Train view under AppTest: settings checked on the page, a training started, watched, stopped and explored,
and a second session queued behind the first when the server runs one training at a time."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer.compute import TRAININGS_ENV, training_pool
from tests.app_helpers import assert_ok, chart_titles
from tests.helpers import APP, CHECKPOINTS_ENV

# the test reaches the page's training pool from outside a Streamlit run, which Streamlit's caches warn about per call
logging.getLogger("streamlit.runtime.caching.cache_data_api").setLevel(logging.ERROR)

TIMEOUT_S = 60
# a model small enough to train in about a second: one layer each side, two heads of 8 dimensions
TINY_MODEL = {"train_encoder_layers": 1, "train_decoder_layers": 1, "train_heads": 2, "train_d_model": 16}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny_checkpoint) -> Path:
    folder = tmp_path_factory.mktemp("train-checkpoints")
    shutil.copytree(tiny_checkpoint, folder / "tiny-en-de")
    return folder


@pytest.fixture
def fresh_pool(monkeypatch):
    """A pool of its own for each test (the page keeps one per server), running one training at a time."""
    monkeypatch.setenv(TRAININGS_ENV, "1")
    training_pool.clear()
    yield
    training_pool().close()
    training_pool.clear()


def train_page(checkpoints, monkeypatch, **settings) -> AppTest:
    monkeypatch.setenv(CHECKPOINTS_ENV, str(checkpoints))
    app = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    app.query_params["view"] = "train"
    for key, value in settings.items():
        app.query_params[key] = str(value)
    return app.run()


def errors(app: AppTest) -> list[str]:
    return [error.value for error in app.error]


def rerun_until(app: AppTest, condition, timeout_s: float = TIMEOUT_S) -> AppTest:
    deadline = time.monotonic() + timeout_s
    while not condition(app):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; the page says {[m.value for m in app.markdown][-3:]}")
        time.sleep(0.3)
        app.run()
        assert_ok(app)
    return app


def button(app: AppTest, key: str):
    return next(b for b in app.button if b.key == key)


def progress_text(app: AppTest) -> str:
    bars = app.get("progress")
    return bars[0].proto.text if bars else ""


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"train_heads": 3, "train_d_model": 32}, "d_model (32) must be divisible by the number of heads (3)"),
        ({"train_shortest": 9, "train_longest": 4}, "shortest <= longest"),
        ({"train_steps": 10**9}, "the step budget must be between 1 and 20,000"),
    ],
)
def test_bad_settings_get_a_clear_message_and_train_nothing(checkpoints, monkeypatch, fresh_pool, settings, message):
    app = train_page(checkpoints, monkeypatch, **settings)
    assert_ok(app)
    assert any(message in text for text in errors(app)), errors(app)
    button(app, "train_start").click().run()
    assert_ok(app)
    assert training_pool().running() == 0 and training_pool().waiting() == 0
    assert any(message in text for text in errors(app))


def test_the_view_opens_on_its_settings_and_exercises_without_the_translation(checkpoints, monkeypatch, fresh_pool):
    app = train_page(checkpoints, monkeypatch)
    assert_ok(app)
    assert not errors(app)
    assert app.selectbox(key="train_task").value == "reverse"
    assert not any("Translation" in m.value for m in app.markdown)  # the view is not about the sentence
    assert [header.value for header in app.sidebar.header] == ["Model"]  # nor are the decoding and display settings
    exercises = [b for b in app.button if b.key.startswith("train_exercise_")]
    assert len(exercises) >= 5
    exercises[2].click().run()  # copy without the positional encoding
    assert app.selectbox(key="train_task").value == "copy"
    assert app.radio(key="train_positional").value == "none"
    assert "train_positional=none" in "&".join(f"{k}={v}" for k, v in app.query_params.items())


def help_panel_open(app) -> bool:
    (panel,) = [expander for expander in app.expander if expander.label == "How to read this"]
    return panel.proto.expanded


@pytest.mark.slow
def test_a_training_is_watched_stopped_continued_and_explored(checkpoints, monkeypatch, fresh_pool):
    app = train_page(checkpoints, monkeypatch, train_steps=20_000, **TINY_MODEL)
    assert help_panel_open(app)  # the first view met: how to read it comes first
    button(app, "train_start").click().run()
    assert_ok(app)
    assert button(app, "train_start").disabled and not button(app, "train_stop").disabled
    assert not help_panel_open(app)  # now the training does: its curves and attention on the first screen
    seen = set()
    rerun_until(app, lambda page: len(chart_titles(page)) == 2 and "exact match" in progress_text(page))
    for _ in range(3):  # the curve and the attention change while it trains
        before = progress_text(app)
        rerun_until(app, lambda page, before=before: progress_text(page) != before)
        seen.add(progress_text(app))
    assert len(seen) == 3
    # presenter mode opens on another view and back: the settings it trains with stay (it continues below), and the
    # attention's title is short enough for half the row (the pickers above it name the layer and head)
    app.toggle(key="presenter").set_value(True).run()
    app.sidebar.segmented_control(key="view").set_value("train").run()
    assert "Cross-attention" in chart_titles(app)
    app.toggle(key="presenter").set_value(False).run()
    assert app.session_state.view == "train" and "Cross-attention" in chart_titles(app)
    assert app.selectbox(key="train_d_model").value == TINY_MODEL["train_d_model"]
    button(app, "train_stop").click().run()
    rerun_until(app, lambda page: not button(page, "train_continue").disabled)
    job = training_pool().view(next(iter(training_pool()._jobs)))
    assert job.state == "finished" and "by hand" in job.run.stopped
    steps = job.run.step
    app.number_input(key="train_steps").set_value(10).run()
    button(app, "train_continue").click().run()
    rerun_until(app, lambda page: not button(page, "train_continue").disabled)
    assert training_pool().view(job.owner).run.step == steps + 10
    button(app, "train_explore").click().run()
    assert_ok(app)
    assert app.sidebar.selectbox(key="checkpoint").value == "trained-reverse"
    assert app.session_state.view == "cross"
    assert any("Translation" in m.value for m in app.markdown)
    assert any(title.startswith("Layer 0, head 0") or "cross" in title.lower() for title in chart_titles(app))


@pytest.mark.slow
def test_a_second_session_waits_with_its_position_and_starts_when_the_first_stops(checkpoints, monkeypatch, fresh_pool):
    first = train_page(checkpoints, monkeypatch, train_steps=20_000, **TINY_MODEL)
    second = train_page(checkpoints, monkeypatch, train_steps=20, **TINY_MODEL)
    button(first, "train_start").click().run()
    button(second, "train_start").click().run()
    assert_ok(second)
    assert any("number 1 in the queue" in info.value for info in second.info), [i.value for i in second.info]
    assert button(second, "train_stop").disabled is False  # a queued training can be cancelled
    button(first, "train_stop").click().run()
    rerun_until(second, lambda page: not button(page, "train_continue").disabled)
    assert "budget of 20 steps" in progress_text(second)


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_trainings_setting_is_named(monkeypatch, value):
    monkeypatch.setenv(TRAININGS_ENV, value)
    training_pool.clear()
    with pytest.raises(ValueError, match="ATTENTION_EXPLORER_TRAININGS must be a whole number"):
        training_pool()
    training_pool.clear()
