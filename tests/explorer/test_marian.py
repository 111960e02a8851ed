"""A MarianMT (OPUS-MT) checkpoint on the page (AppTest): the tiny imported model of the marian fixture
(tests/conftest.py) opens and shows its heatmaps. The importer is tested in tests/model/test_marian.py."""

from __future__ import annotations

import shutil

from streamlit.testing.v1 import AppTest

from model import load_checkpoint
from tests.helpers import APP, CHECKPOINTS_ENV, assert_ok, chart_specs, chart_titles


def test_the_imported_checkpoint_opens_in_the_app_and_shows_its_heatmaps(marian, tmp_path, monkeypatch):
    shutil.copytree(marian[3], tmp_path / "opus-mt-tiny")
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path))
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert_ok(app)
    assert app.selectbox(key="checkpoint").value == "opus-mt-tiny"
    assert "cross-attention" in chart_titles(app)[0]
    translation = load_checkpoint(marian[3], device="cpu").trace(app.text_input(key="sentence").value, beam_size=1)
    headings = [markdown.value.removeprefix("### ") for markdown in app.markdown if markdown.value.startswith("### ")]
    assert [heading.replace("\\", "") for heading in headings] == [translation.translation]
    for view in ("encoder", "decoder", "cross"):
        for display in ("single", "grid"):
            app.segmented_control(key="view").set_value(view).run()
            app.radio(key="display").set_value(display).run()
            assert_ok(app)
            heatmaps = [trace for spec in chart_specs(app) for trace in spec["data"] if trace["type"] == "heatmap"]
            assert heatmaps, (view, display)
