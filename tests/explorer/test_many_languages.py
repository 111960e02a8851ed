"""Many-language models on the page (AppTest): a tiny NLLB, mBART-50 and M2M100 converted with python -m model.import_hf
(tests/hf_family_helpers.py) open with a source- and a target-language picker bound to the URL, translate with the
languages picked, mark the forced first step, and draw every view. The converter: tests/model/test_import_hf.py."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from explorer import views
from model import load_checkpoint
from model.decoding.languages import LanguagePair
from model.interop.huggingface import import_hf
from tests.app_helpers import assert_ok, chart_titles, open_details, shown_tokenization
from tests.helpers import APP, CHECKPOINTS_ENV
from tests.hf_family_helpers import LANGUAGES, SENTENCEPIECE_TYPES, build_folder, fairseq_sentencepiece
from tests.marian_helpers import transformers_or_skip

# slow: each family's model is built with transformers and converted before the page opens it
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]


@pytest.fixture(scope="module", params=["nllb", "mbart50", "m2m100"])
def converted(request, tmp_path_factory):
    """(family, the checkpoints folder holding its conversion alone, the checkpoint's name)."""
    transformers_or_skip().utils.logging.disable_progress_bar()
    name = request.param
    work = tmp_path_factory.mktemp(name)
    folder = build_folder(name, work / "hf", fairseq_sentencepiece(SENTENCEPIECE_TYPES[name]))
    import_hf(folder, work / "checkpoints" / f"tiny-{name}")
    return name, work / "checkpoints", f"tiny-{name}"


def opened(converted, monkeypatch, **query: str) -> AppTest:
    _, folder, _ = converted
    monkeypatch.setenv(CHECKPOINTS_ENV, str(folder))
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params.update(query)
    return app.run()


def heading(app: AppTest) -> str:
    return next(m.value.removeprefix("### ").replace("\\", "") for m in app.markdown if m.value.startswith("### "))


def test_the_language_pickers_translate_with_the_pair_and_keep_it_in_the_link(converted, monkeypatch):
    """The page reads the sentence with the picked source code (the first source piece) and forces the picked
    target code as the first output token (the decoding steps' first prediction)."""
    name, folder, checkpoint = converted
    codes = LANGUAGES[name]
    app = opened(converted, monkeypatch, view="steps")
    assert_ok(app)
    source, target = app.selectbox(key="source_language"), app.selectbox(key="target_language")
    assert (source.value, target.value) == (codes["en"], codes["fr"])  # the card's pair
    assert "French" in target.format_func(codes["fr"])
    assert source_pieces(app)[0] == piece(name, "en") and first_prediction(app) == piece(name, "fr")
    app.text_input(key="sentence").input("Ein Hund läuft am Strand.").run()
    app.selectbox(key="source_language").set_value(codes["de"]).run()
    app.selectbox(key="target_language").set_value(codes["en"]).run()
    assert_ok(app)
    assert (app.query_params["source_language"], app.query_params["target_language"]) == (codes["de"], codes["en"])
    assert source_pieces(app)[0] == piece(name, "de") and first_prediction(app) == piece(name, "en")
    translator = load_checkpoint(folder / checkpoint, "cpu")
    expected = translator.trace(
        "Ein Hund läuft am Strand.", beam_size=1, languages=LanguagePair(codes["de"], codes["en"])
    )
    assert heading(app) == expected.translation
    shared = AppTest.from_file(APP, default_timeout=120)  # the link reopens with the same pair
    shared.query_params.update(app.query_params)
    shared.run()
    assert shared.selectbox(key="target_language").value == codes["en"] and first_prediction(shared) == piece(
        name, "en"
    )
    assert source_pieces(shared)[0] == piece(name, "de")


def piece(family: str, language: str) -> str:
    """The token a language's code is: M2M100 writes "en" as "__en__", the others as the code itself."""
    code = LANGUAGES[family][language]
    return f"__{code}__" if family == "m2m100" else code


def source_pieces(app: AppTest) -> list[str]:
    return shown_tokenization(open_details(app))["piece"]


def first_prediction(app: AppTest) -> str:
    """The piece the decoding steps' view names as step 1's prediction (the page opens on step 1)."""
    line = next(m.value for m in app.markdown if m.value.startswith("**Step 1 of"))
    return re.search(r"Predicted next token: (.+?) with probability", line).group(1).strip("`* ")


def test_the_first_step_is_shown_as_forced(converted, monkeypatch):
    app = opened(converted, monkeypatch, view="steps")
    assert_ok(app)
    assert any("forced, not chosen" in markdown.value for markdown in app.markdown)
    app.select_slider(key="step").set_value(1).run()
    assert not any("forced, not chosen" in markdown.value for markdown in app.markdown)


def test_every_view_draws_the_converted_model(converted, monkeypatch):
    app = opened(converted, monkeypatch)
    for view in views.choices(presenting=False):
        app.segmented_control(key="view").set_value(view).run()
        assert_ok(app)
        assert not app.error, (view, [error.value for error in app.error])
        if view in ("cross", "steps", "encoder_self", "decoder_self", "embedding", "residual"):
            assert chart_titles(app), view
