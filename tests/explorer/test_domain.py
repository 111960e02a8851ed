"""The out-of-domain notice on the page (AppTest, the shipped En->De model): it says plainly when a sentence is
unlike the image captions the model learned from, and names the words the model barely saw. The signals and their
calibration are tested in tests/model/test_domain.py."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.app_helpers import assert_ok
from tests.helpers import APP, CAT, CHECKPOINTS_ENV, DEFAULT_CHECKPOINT, UNLIKE_CAPTIONS

# shipped_en_de (tests/conftest.py) skips these tests where checkpoints/multi30k-en-de is not shipped


def test_the_page_says_so_plainly_and_offers_examples(shipped_en_de, monkeypatch):
    monkeypatch.setenv(CHECKPOINTS_ENV, str(DEFAULT_CHECKPOINT.parent))
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert_ok(app)
    assert any(caption.value.startswith("This model learned from 29,000 image captions") for caption in app.caption)
    assert not [warning for warning in app.warning if "unlike" in warning.value]  # the default example is a caption
    app.text_input(key="sentence").input(UNLIKE_CAPTIONS).run()
    notice = next(warning.value for warning in app.warning if "unlike the image captions" in warning.value)
    assert "may mean little" in notice and "Two dogs are playing in the snow" in notice.replace("\\", "")


def test_the_page_names_the_words_the_model_barely_saw(shipped_en_de, monkeypatch):
    monkeypatch.setenv(CHECKPOINTS_ENV, str(DEFAULT_CHECKPOINT.parent))
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert_ok(app)
    assert not [caption for caption in app.caption if caption.value.startswith("Barely seen")]  # a common caption
    app.text_input(key="sentence").input(CAT).run()
    assert not [warning for warning in app.warning if "unlike" in warning.value]  # no signal catches it...
    (line,) = [caption.value for caption in app.caption if caption.value.startswith("Barely seen")]
    assert line.startswith("Barely seen in its 29,000 training image captions: “sat” (3 times).")  # ...its words do
