"""Hostile input through the page (AppTest): bad sentences, markup, and checkpoint names from the URL.

Every entry of tests.helpers.BAD_INPUTS goes into the sentence box: the page must not raise,
must show a translation or a clear message, must say when the sentence was cut, and must never
render the user's or the model's text as HTML or Markdown.
"""

from __future__ import annotations

import ast
import json
import pickle
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from explorer import compute
from explorer.wording import escape_markdown
from model import Transformer, load_checkpoint
from model.analysis.attribution import ATTRIBUTION_METHODS, attributions_from_npz
from model.checkpoint import save_checkpoint, scan_checkpoints
from model.tokenizer import Tokenizer, train_sentencepiece
from tests.app_helpers import assert_ok, chart_titles, open_details, shown_tokenization
from tests.helpers import APP, BAD_INPUTS, CHECKPOINTS_ENV, MARKUP_INPUTS, OWN_MARKUP, small_config, toy_sentences

MAX_OUTPUT = 4  # the sidebar's "Max output tokens": keeps each run short
TRUNCATION_NOTICE = re.compile(r"The sentence has (\d+) pieces; only the first (\d+) fit the model and were used\.")
ASK_FOR_SENTENCE = "Type a sentence in the box above"
CODE_SPAN = re.compile(r"``.*?``")  # explorer.wording.pieces_markdown: pieces shown literally in code spans
STYLE_BLOCK = re.compile(r"<style>.*?</style>", re.DOTALL)
OWN_TABLE_MARKUP = re.compile(r"</?(?:div|table|caption|thead|tbody|tr|th|td)\b[^<>]*>")  # viz.table_html's tags
USER_TAGS = re.compile(r"(?<!\\)<(?:script|img|b>)", re.IGNORECASE)


def as_sent_by_browser(text: str) -> str:
    """Text as it can reach the server: a lone surrogate becomes U+FFFD, as a browser's clipboard and UTF-8 encoder
    make it (a script that puts one in the box gets the message refused: tests/browser/test_browser.py).

    AppTest sends widget values as protobuf strings too, which refuse lone surrogates; the
    Python API gets them unchanged (tests/model/test_reliability.py).
    """
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def text_elements(app: AppTest) -> list:
    """Every element that renders Markdown: markdown, captions, headings and alerts, sidebar included."""
    return [*app.markdown, *app.caption, *app.title, *app.header, *app.info, *app.warning, *app.error, *app.success]


def assert_no_markup_rendered(app: AppTest) -> None:
    for element in [*app.markdown, *app.caption]:
        assert not element.proto.allow_html, f"unsafe_allow_html on: {element.value[:80]!r}"
    for element in text_elements(app):
        outside_code = CODE_SPAN.sub("", element.value)
        assert not USER_TAGS.search(outside_code), f"unescaped tag in: {element.value!r}"
    for element in app.get("html"):  # our tables: only their own tags, every text escaped
        outside_tags = OWN_TABLE_MARKUP.sub("", STYLE_BLOCK.sub("", element.proto.body))
        assert "<" not in outside_tags and ">" not in outside_tags, f"unescaped markup in: {element.proto.body!r}"
    for chart in app.get("plotly_chart"):
        for value in strings_in(json.loads(chart.proto.spec)):
            leftover = OWN_MARKUP.sub("", value)
            assert "<" not in leftover and ">" not in leftover, f"unescaped markup in a figure: {value!r}"


def strings_in(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings_in(item)]
    if isinstance(value, list):
        return [s for item in value for s in strings_in(item)]
    return []


def headings(app: AppTest) -> list[str]:
    return [markdown.value.removeprefix("### ") for markdown in app.markdown if markdown.value.startswith("### ")]


def short_output_page(checkpoint: Path, view: str | None = None) -> Iterator[AppTest]:
    """A page on ``checkpoint`` with a short output limit, on ``view`` when given, for a module of bad inputs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CHECKPOINTS_ENV, str(checkpoint.parent))
        app = AppTest.from_file(APP, default_timeout=60).run()
        app.number_input(key="max_new_tokens").set_value(MAX_OUTPUT).run()
        if view:
            app.segmented_control(key="view").set_value(view).run()
        assert_ok(app)
        yield app


@pytest.fixture(scope="module")
def page(tiny_checkpoint) -> Iterator[AppTest]:
    """One page for every bad input, on the shared tiny checkpoint."""
    yield from short_output_page(tiny_checkpoint)


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_shows_a_translation_or_a_message(page, translator, name):
    text = as_sent_by_browser(BAD_INPUTS[name])
    page.text_input(key="sentence").input(text).run()
    if text.strip():
        open_details(page)  # its table and chart are checked too (a page without a sentence has no such section)
    assert_ok(page)
    assert_no_markup_rendered(page)
    notices = [match for warning in page.warning if (match := TRUNCATION_NOTICE.search(warning.value))]
    if not text.strip():
        assert [info.value for info in page.info if info.value.startswith(ASK_FOR_SENTENCE)]
        assert headings(page) == [] and not page.get("plotly_chart") and not notices
        return
    expected = translator.trace(text, beam_size=1, max_new_tokens=MAX_OUTPUT)
    assert headings(page) == [escape_markdown(expected.translation) or "(empty)"]
    assert shown_tokenization(page)["piece"] == expected.source_pieces  # escaped cells, never markup
    assert not [info.value for info in page.info if info.value.startswith(ASK_FOR_SENTENCE)]
    if expected.outcome.truncated:
        assert len(notices) == 1
        before, used = map(int, notices[0].groups())
        assert before == expected.outcome.source_pieces_before_truncation
        assert used == len(expected.source_pieces) - 1 == translator.config.max_len - 1
    else:
        assert notices == []


@pytest.mark.parametrize("name", ["10,000 characters", "same token 300 times"])
def test_over_long_input_is_cut_with_a_notice(page, name):
    page.text_input(key="sentence").input(BAD_INPUTS[name]).run()
    assert_ok(page)
    notices = [match for warning in page.warning if (match := TRUNCATION_NOTICE.search(warning.value))]
    assert len(notices) == 1 and int(notices[0].group(1)) >= 300


@pytest.fixture(scope="module")
def word_sources_page(tiny_checkpoint) -> Iterator[AppTest]:
    """The Word sources view (every attribution method at once) on the tiny checkpoint."""
    yield from short_output_page(tiny_checkpoint, "attribution")


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_in_the_word_sources_view_never_crashes(word_sources_page, translator, handout_files, name):
    """Each input after the one before, so a picked word the new sentence does not have is met too."""
    page = word_sources_page
    text = as_sent_by_browser(BAD_INPUTS[name])
    page.text_input(key="sentence").input(text).run()
    if text.strip():
        open_details(page)  # its table and chart are checked too (a page without a sentence has no such section)
    assert_ok(page)
    assert_no_markup_rendered(page)
    if not text.strip():
        assert not page.get("plotly_chart")  # the page asks for a sentence instead
        return
    if page.segmented_control(key="view").value != "attribution":  # a page without a sentence drew no view picker
        page.segmented_control(key="view").set_value("attribution").run()
        assert_ok(page)
    last_word = translator.trace(text, beam_size=1, max_new_tokens=MAX_OUTPUT).n_steps - 1
    page.segmented_control(key="attribution_step").set_value(last_word).run()
    assert_ok(page)
    assert_no_markup_rendered(page)
    assert any(title.startswith("Where “") and f"(step {last_word + 1})" in title for title in chart_titles(page))
    files = handout_files.items()
    downloads = {Path(file_name).suffix: make for file_name, make in files if "-attributions." in file_name}
    assert set(json.loads(downloads[".json"]())["attributions"]) == set(ATTRIBUTION_METHODS)
    assert set(attributions_from_npz(downloads[".npz"]())) == set(ATTRIBUTION_METHODS)


@pytest.fixture(scope="module")
def markup_checkpoints(tmp_path_factory) -> Path:
    """A random model whose tokenizer knows markup characters, so "<", "*", "`" reach pieces, figures and output."""
    sentences = toy_sentences(400) + [BAD_INPUTS[name] for name in MARKUP_INPUTS] * 40
    tokenizer = Tokenizer.from_model_bytes(train_sentencepiece(sentences, vocab_size=120))
    torch.manual_seed(1)
    vocab = tokenizer.vocab_size("source")
    network = Transformer(small_config(vocab, share_embeddings=True, tie_output=True, output_bias=False)).eval()
    folder = tmp_path_factory.mktemp("markup-checkpoints")
    save_checkpoint(folder / "markup-en-de", network, tokenizer, {"source_language": "en", "target_language": "de"})
    return folder


@pytest.mark.parametrize("name", MARKUP_INPUTS)
def test_markup_in_source_pieces_output_and_forced_target_is_shown_as_text(monkeypatch, markup_checkpoints, name):
    monkeypatch.setenv(CHECKPOINTS_ENV, str(markup_checkpoints))
    translator = load_checkpoint(markup_checkpoints / "markup-en-de", device="cpu")
    text = BAD_INPUTS[name]
    app = AppTest.from_file(APP, default_timeout=60).run()
    open_details(app)
    app.number_input(key="max_new_tokens").set_value(8).run()
    app.text_input(key="sentence").input(text).run()
    assert_ok(app)
    expected = translator.trace(text, beam_size=1, max_new_tokens=8)
    assert any(set(piece) & set("<>*`#[") for piece in expected.source_pieces)  # markup really reaches the pieces
    assert shown_tokenization(app)["piece"] == expected.source_pieces
    assert headings(app) == [escape_markdown(expected.translation) or "(empty)"]
    assert_no_markup_rendered(app)
    for view, display in (("cross", "heads"), ("decoder_self", "grid"), ("encoder_self", "aggregates")):
        app.segmented_control(key="view").set_value(view).run()
        app.radio(key="display").set_value(display).run()
        assert_ok(app)
        assert_no_markup_rendered(app)
    # Teacher forcing puts the user's markup into the model's output side: step pieces, top-k, translation.
    app.toggle(key="teacher_forcing").set_value(True).run()
    app.text_input(key="target").input(text).run()
    assert_ok(app)
    forced = translator.trace(text, beam_size=1, max_new_tokens=8, target=text)
    assert headings(app) == [f":orange[{escape_markdown(forced.translation)}]"]  # a typed target, styled as such
    assert USER_TAGS.search(forced.translation) or "**" in forced.translation
    app.segmented_control(key="view").set_value("steps").run()
    assert_ok(app)
    assert_no_markup_rendered(app)
    app.button(key="step_next").click().run()
    assert_ok(app)
    assert_no_markup_rendered(app)


@pytest.fixture
def checkpoint_layout(tmp_path, tiny_checkpoint) -> Path:
    """root/inside/tiny-en-de is the served folder; root/outside-model is a valid checkpoint that must stay unused."""
    shutil.copytree(tiny_checkpoint, tmp_path / "inside" / "tiny-en-de")
    shutil.copytree(tiny_checkpoint, tmp_path / "outside-model")
    return tmp_path


@pytest.mark.parametrize("asked", ["../outside-model", "OUTSIDE_ABSOLUTE", "../../etc", "/tmp/x", "no-such-model"])
def test_checkpoint_from_the_url_outside_the_folder_is_refused(monkeypatch, checkpoint_layout, asked):
    if asked == "OUTSIDE_ABSOLUTE":
        asked = str(checkpoint_layout / "outside-model")
    inside = checkpoint_layout / "inside"
    monkeypatch.setenv(CHECKPOINTS_ENV, str(inside))
    loaded: list[Path] = []
    original = compute.load_checkpoint

    def recording_load(path, *args, **kwargs):
        loaded.append(Path(path).resolve())
        return original(path, *args, **kwargs)

    monkeypatch.setattr(compute, "load_checkpoint", recording_load)  # what the cached model loader calls
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params["checkpoint"] = asked
    app.run()
    assert_ok(app)
    assert app.selectbox(key="checkpoint").value == "tiny-en-de"
    warnings = [warning.value.replace("\\", "") for warning in app.warning]
    assert f"Checkpoint “{asked}” is not available; using tiny-en-de." in warnings
    assert headings(app)  # the page goes on with the default checkpoint
    assert loaded == [(inside / "tiny-en-de").resolve()]
    assert all(path.is_relative_to(inside.resolve()) for path in loaded)


def test_app_defines_no_classes_so_cached_values_pickle_while_sessions_run_at_once(tiny_checkpoint):
    """Streamlit runs app.py afresh for every session, so a class defined there is a new object on each run.

    st.cache_data pickles what it returns by class name: a value built while another session
    redefined the class fails to pickle ("not the same object as __main__.X") and that page shows
    an exception. Ten browsers opening at once hit it (tests/browser/test_many_pages.py, the classroom test).
    """
    tree = ast.parse(Path(APP).read_text(encoding="utf-8"))
    assert [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)] == []
    entries = scan_checkpoints(tiny_checkpoint.parent)
    assert pickle.loads(pickle.dumps(entries)) == entries


def test_app_never_asks_streamlit_to_render_raw_html():
    assert "unsafe_allow_html" not in Path(APP).read_text(encoding="utf-8")
