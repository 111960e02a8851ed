"""A MarianMT (OPUS-MT) checkpoint on the page (AppTest): the tiny imported model of the marian fixture
(tests/conftest.py) opens, shows its heatmaps and offers its target languages. The importer is tested in
tests/model/test_marian.py."""

from __future__ import annotations

import json
import shutil

from streamlit.testing.v1 import AppTest

from model import load_checkpoint
from model.tokenizer import load_sentencepiece
from tests.app_helpers import assert_ok, chart_specs, chart_titles, open_details, shown_tokenization
from tests.helpers import APP, CHECKPOINTS_ENV


def test_the_imported_checkpoint_opens_in_the_app_and_shows_its_heatmaps(marian, tmp_path, monkeypatch):
    shutil.copytree(marian[3], tmp_path / "opus-mt-tiny")
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path))
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert_ok(app)
    assert app.selectbox(key="checkpoint").value == "opus-mt-tiny"
    assert "cross-attention" in chart_titles(app)[0]
    sentence = ">>de<< " + app.text_input(key="sentence").value  # the card's target language, as the page sends it
    translation = load_checkpoint(marian[3], device="cpu").trace(sentence, beam_size=1)
    headings = [markdown.value.removeprefix("### ") for markdown in app.markdown if markdown.value.startswith("### ")]
    assert [heading.replace("\\", "") for heading in headings] == [translation.translation]
    for view in ("encoder_self", "decoder_self", "cross"):
        for display in ("single", "grid"):
            app.segmented_control(key="view").set_value(view).run()
            app.radio(key="display").set_value(display).run()
            assert_ok(app)
            heatmaps = [trace for spec in chart_specs(app) for trace in spec["data"] if trace["type"] == "heatmap"]
            assert heatmaps, (view, display)


def test_a_multi_target_model_offers_its_languages_and_leads_the_sentence_with_the_code(marian, tmp_path, monkeypatch):
    """The tiny model's vocabulary has >>de<< and >>fr<< (as en-ROMANCE has its codes): the card lists them, the page
    offers them, and the picked code is the sentence's first source piece; without one the page says so."""
    from model.checkpoint import read_card

    assert read_card(marian[3]).extra["target_language_codes"] == ["de", "fr"]
    shutil.copytree(marian[3], tmp_path / "opus-mt-tiny")
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path))
    app = AppTest.from_file(APP, default_timeout=120).run()
    picker = app.selectbox(key="target_language")
    assert picker.options == ["none", ">>de<< German", ">>fr<< French"] and picker.value == "de"  # the card's
    app.text_input(key="sentence").input("the dog runs.").run()
    assert_ok(app)
    assert source_pieces(app)[0] == ">>de<<"
    picker.set_value("fr").run()
    assert source_pieces(app)[0] == ">>fr<<" and app.query_params["target_language"] == "fr"
    shared = AppTest.from_file(APP, default_timeout=120)  # the link reopens with the same language
    shared.query_params.update(app.query_params)
    shared.run()
    assert shared.selectbox(key="target_language").value == "fr" and source_pieces(shared)[0] == ">>fr<<"
    assert not no_language_notices(app)
    app.selectbox(key="target_language").set_value("").run()
    assert source_pieces(app)[0] != ">>fr<<" and len(no_language_notices(app)) == 1
    app.text_input(key="sentence").input(">>fr<< the dog runs.").run()  # a code typed in the sentence is kept
    assert source_pieces(app)[0] == ">>fr<<" and not no_language_notices(app)


def test_a_model_with_separate_vocabularies_shows_each_sides_pieces(marian_separate, tmp_path, monkeypatch):
    """A tc-big-like model (vocab.json for sources, target_vocab.json for targets): the page reads the sentence with
    the source's table and writes the translation with the target's."""
    shutil.copytree(marian_separate[3], tmp_path / "opus-mt-tc-tiny")
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path))
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert_ok(app)
    text = app.text_input(key="sentence").value
    vocab = json.loads((marian_separate[3] / "vocab.json").read_text(encoding="utf-8"))
    cut = load_sentencepiece(marian_separate[3] / "source.spm").encode(" " + text, out_type=str)
    assert source_pieces(app) == [">>de<<", *(piece if piece in vocab else "<unk>" for piece in cut), "</s>"]
    trace = load_checkpoint(marian_separate[3], device="cpu").trace(">>de<< " + text, beam_size=1)
    headings = [markdown.value.removeprefix("### ") for markdown in app.markdown if markdown.value.startswith("### ")]
    assert [heading.replace("\\", "") for heading in headings] == [trace.translation]
    app.segmented_control(key="view").set_value("cross").run()
    assert_ok(app)
    assert [data for spec in chart_specs(app) for data in spec["data"] if data["type"] == "heatmap"]


def source_pieces(app: AppTest) -> list[str]:
    """The tokenization table's pieces: the pieces the model read."""
    return shown_tokenization(open_details(app))["piece"]


def no_language_notices(app: AppTest) -> list[str]:
    return [warning.value for warning in app.warning if "does not say which" in warning.value]
