"""The page's "Decode as the model's authors do" preset (AppTest) with the tiny imported model of the marian fixture:
offered only for a model with its authors' generate settings, it replaces the search settings and the page shows
the translation model.decoding.authors gives (tests/model/test_marian_generate.py compares that with generate)."""

from __future__ import annotations

import shutil

from streamlit.testing.v1 import AppTest

from model import load_checkpoint
from tests.app_helpers import assert_ok
from tests.helpers import APP, CHECKPOINTS_ENV, REPO

SHIPPED = REPO / "checkpoints" / "multi30k-en-de"


def heading(app: AppTest) -> str:
    """The translation as the page writes it (a level-3 heading)."""
    headings = [markdown.value.removeprefix("### ") for markdown in app.markdown if markdown.value.startswith("### ")]
    return headings[0].replace("\\", "")


def test_the_authors_preset_decodes_with_their_settings_and_says_so(marian, tmp_path, monkeypatch):
    shutil.copytree(marian[3], tmp_path / "opus-mt-tiny")
    (tmp_path / SHIPPED.name).symlink_to(SHIPPED)
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path))
    translator = load_checkpoint(marian[3], device="cpu")
    authors = translator.authors_decoding
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params["checkpoint"] = "opus-mt-tiny"
    app.run()
    toggle = app.toggle(key="authors_decoding")
    assert not toggle.value and app.radio(key="decoding").value == "greedy"  # off: the page's own search
    sentence = ">>de<< " + app.text_input(key="sentence").value
    assert heading(app) == translator.trace(sentence, beam_size=1).translation
    toggle.set_value(True).run()
    assert_ok(app)
    expected = translator.trace(sentence, authors.beam_size, authors.max_new_tokens, scoring=authors.scoring)
    assert heading(app) == expected.translation
    assert not [radio for radio in app.radio if radio.key == "decoding"]  # its settings replace the search's
    assert any(authors.describe() in caption.value for caption in app.sidebar.caption)
    assert any("as the model's authors decode" in markdown.value for markdown in app.markdown)
    assert app.query_params["authors_decoding"] == "true"
    if expected.outcome.cut_off:  # the random model rarely ends: the notice names the authors' limit
        assert any("authors' limit" in warning.value for warning in app.warning)
    shared = AppTest.from_file(APP, default_timeout=120)  # a shared link reopens with the preset on
    shared.query_params.update(app.query_params)
    shared.run()
    assert shared.toggle(key="authors_decoding").value and heading(shared) == expected.translation
    shared.selectbox(key="checkpoint").set_value(SHIPPED.name).run()  # a model trained here: our search again
    assert_ok(shared)
    assert not [toggle for toggle in shared.toggle if toggle.key == "authors_decoding"]
    assert "authors_decoding" not in shared.query_params and shared.radio(key="decoding").value == "greedy"


def test_a_model_trained_here_has_no_authors_preset(monkeypatch):
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert_ok(app)
    assert not [toggle for toggle in app.toggle if toggle.key == "authors_decoding"]
    assert app.radio(key="decoding").value == "greedy"


def test_settings_read_from_a_model_folder_are_shown_as_text():
    """The caption names the settings the preset does not follow, as the folder wrote them: never as Markdown."""
    from explorer.sidebar import authors_caption
    from model.config import TransformerConfig
    from model.decoding.authors import authors_decoding

    config = TransformerConfig(src_vocab_size=10, tgt_vocab_size=10)
    hostile = "[lesson](http://example.invalid) **now**"
    caption = authors_caption(authors_decoding({"num_beams": 2, "no_repeat_ngram_size": hostile}, config))
    assert "no\\_repeat\\_ngram\\_size" in caption and "\\[lesson\\]" in caption and "\\*\\*now\\*\\*" in caption
    assert "[lesson](" not in caption and "**now**" not in caption
