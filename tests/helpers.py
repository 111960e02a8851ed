"""What the tests share (fixtures stay in tests/conftest.py), in one module, by section:

- paths: the repository, the page, the environment variable that points the page at a checkpoints folder;
- models and text: a small config, toy English text, sentences the toy tokenizer knows;
- hand-made traces, toy-task alignments and the shipped checkpoints several layers test;
- hostile inputs: BAD_INPUTS, shared by the API, page and browser tests;
- the page under AppTest: how to read what it drew;
- headless Chromium: a `streamlit run` server on a free port and Debian's Chromium (selenium is imported inside
  the functions, so that the rest of the suite runs without it);
- builders behind the shared fixtures of tests/conftest.py (the tiny MarianMT model and its import).

The README screenshot is taken by ``python -m tests.browser.screenshot`` with these helpers.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from benchmarks.server import free_port, stop, wait_for_health
from model import Transformer, TransformerConfig
from model.tokenizer import load_sentencepiece, train_sentencepiece
from model.trace import Trace
from model.training.toy_tasks import VERBS

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest

# --- paths ---

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
CHECKPOINTS_ENV = "ATTENTION_EXPLORER_CHECKPOINTS"  # the folder app.py lists checkpoints from
DEFAULT_CHECKPOINT = REPO / "checkpoints" / "multi30k-en-de"  # the page's default, shipped with the repository

# --- models and text ---

WORDS = (
    "a the man woman dog cat child girl boy is are runs sits plays rides walks on in at with "
    "blue red green shirt bike street park snow water ball two three young old"
).split()
SENTENCE = "a man rides a blue bike in the park."  # words the toy tokenizer knows
SHORT_MAX_LEN = 10  # an output limit that keeps traces of the (never stopping) random tiny model short


def toy_sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` seeded sentences of 3 to 9 words from WORDS, each ending with a full stop."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + "." for _ in range(count)]


def small_config(vocab: int, **overrides) -> TransformerConfig:
    """A 2+2-layer, 4-head, d_model 32 config without dropout; ``overrides`` replace any field."""
    settings = dict(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.0,
        max_len=64,
    )
    settings.update(overrides)
    return TransformerConfig(**settings)


def random_model(vocab: int, seed: int) -> Transformer:
    """A random small_config model with shared embeddings and a tied output layer, as the tiny checkpoint's."""
    torch.manual_seed(seed)
    return Transformer(small_config(vocab, share_embeddings=True, tie_output=True, output_bias=False)).eval()


# --- hand-made traces, toy-task alignments, the shipped checkpoints ---

WORD_START = "\u2581"  # SentencePiece's mark of a piece that starts a word
_W = WORD_START
DOG_BITES_MAN = [f"{_W}the", f"{_W}dog", f"{_W}bit", "es", f"{_W}the", f"{_W}man", "</s>"]  # a minimal pair
MAN_BITES_DOG = [f"{_W}the", f"{_W}man", f"{_W}bit", "es", f"{_W}the", f"{_W}dog", "</s>"]
# three sentences of toy words: the head statistics of one trace, and pooled over several
STATISTICS_SENTENCES = ["a man rides a blue bike.", "two dogs play in the snow.", "the girl sits."]
INTERNALS_SENTENCE = "two young girls play with a ball in the park."  # long enough for keys after a mid step
HELD_OUT_SEED = 20240  # a toy-task seed no training used (the shipped toy draws use seed 1)
UNLIKE_CAPTIONS = "The stock market crashed yesterday."  # unlike any image caption: its words split into many pieces
CAT = "The cat sat on the mat."  # caption-like enough that no signal fires, with a word ("sat") training barely saw
# name -> (source language, target language, lowercased BLEU floor on the first 20 test sentences, beam 5).
# Each floor sits a few points below what the shipped model scores on those 20 sentences, so a broken or swapped
# checkpoint fails and a sound one passes; a retrained model needs its floor set again. Twenty sentences say little
# about the whole test set: a model better there can score lower on these.
SHIPPED_MODELS = {
    "multi30k-en-de": ("en", "de", 36.0),
    "multi30k-de-en": ("de", "en", 44.0),
    "multi30k-en-fr": ("en", "fr", 54.0),
}


def hand_trace(source_pieces: list[str], target_pieces: list[str], translation: str, seed: int) -> Trace:
    """A Trace with random (row-normalised) attention of the right shapes for 1 layer and 2 heads."""
    rng = np.random.default_rng(seed)
    n_source, n_steps = len(source_pieces), len(target_pieces) - 1

    def attention(queries: int, keys: int) -> np.ndarray:
        return rng.dirichlet(np.ones(keys), size=(2, queries)).astype(np.float32)

    return Trace(
        source_text=" ".join(source_pieces),
        source_ids=list(range(n_source)),
        source_pieces=source_pieces,
        target_ids=list(range(n_steps + 1)),
        target_pieces=target_pieces,
        translation=translation,
        step_probs=np.ones(n_steps, dtype=np.float32),
        topk_ids=np.zeros((n_steps, 1), dtype=np.int64),
        topk_probs=np.ones((n_steps, 1), dtype=np.float32),
        topk_pieces=[["x"]] * n_steps,
        attention={
            "encoder.layers.0.self_attn": attention(n_source, n_source),
            "decoder.layers.0.self_attn": attention(n_steps, n_steps),
            "decoder.layers.0.cross_attn": attention(n_steps, n_source),
        },
        positional={},
        embedding_norms={},
    )


def expected_positions(task: str, source: list[str]) -> list[int]:
    """Where each output word of a toy task comes from, written out per task (independently of
    model.training.toy_tasks)."""
    n = len(source)
    if task == "copy":
        return list(range(n))
    if task == "reverse":
        return [n - 1 - i for i in range(n)]
    if task == "sort":
        return [source.index(symbol) for symbol in sorted(source)]
    verb = next(i for i, word in enumerate(source) if word in VERBS)
    return [i for i in range(n) if i != verb] + [verb]


# --- hostile inputs ---

BAD_INPUTS: dict[str, str] = {
    "empty": "",
    "whitespace only": " \t\n  ",
    "one character": "a",
    "10,000 characters": ("A man rides a bike. " * 500)[:10_000],
    "one 500-character word": "x" * 500,
    "emoji": "A dog 🐕 plays with a ball ⚽ 🎉",
    "CJK": "一个男人在骑自行车。",
    "Arabic (right-to-left)": "رجل يركب دراجة",
    "Hebrew (right-to-left)": "איש רוכב על אופניים",
    "combining marks": "Z\u0351\u0352a\u0353\u0354l\u0355g\u0356o\u0357 e\u0301 n\u0303",
    "zero-width characters": "a\u200bman\u200c rides\u200d a\ufeff bike\u2060",
    "control characters": "a man\x01\x02\x1b[31m rides\x7f a bike\r\n",
    "NUL": "a man\x00 rides a bike",
    "lone surrogates": "a man \ud800 rides \udfff a bike",
    "HTML and script tags": '<script>alert("x")</script><img src=x onerror=alert(1)><b>bold</b>',
    "markdown": "# Title\n**bold** _italic_ [link](http://example.com) `code` | a | b |\n---",
    "only punctuation": "!?.,;:--...\"'()[]{}",
    "only digits": "0123456789 42 3.14159",
    "same token 300 times": " ".join(["dog"] * 300),
}

# Inputs whose text must never reach a page unescaped.
MARKUP_INPUTS = ("HTML and script tags", "markdown")
# Markup the figure builders add themselves; anything else that looks like a tag came from the text.
OWN_MARKUP = re.compile(r"<i style='color:#6b6b6b'>|</i>|<br>|</?b>|</?extra>")
# Text for a handout: a script, Markdown emphasis and a tag that must all stay text.
HOSTILE = "<script>alert('x')</script> **not bold** & <b>b</b>"
EXTERNAL_REFERENCE = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=""", re.IGNORECASE)

# --- the page under AppTest ---


def assert_ok(app: AppTest) -> None:
    assert not app.exception, [error.value for error in app.exception]


def chart_specs(app: AppTest) -> list[dict]:
    """Every plotly chart on the page, as the JSON sent to the browser."""
    return [json.loads(chart.proto.spec) for chart in app.get("plotly_chart")]


def chart_titles(app: AppTest) -> list[str]:
    return [spec["layout"]["title"]["text"] for spec in chart_specs(app)]


def chart_titled(app: AppTest, start: str) -> dict:
    """The one chart whose title starts with ``start``."""
    matches = [spec for spec in chart_specs(app) if spec["layout"]["title"]["text"].startswith(start)]
    assert len(matches) == 1, chart_titles(app)
    return matches[0]


def component_data(app: AppTest, name: str) -> dict:
    """The data the page gave its one st.components.v2 component ``name`` (AppTest does not run its JavaScript)."""
    found = [element.proto for element in app.get("bidi_component") if element.proto.component_name == name]
    assert len(found) == 1, [element.proto.component_name for element in app.get("bidi_component")]
    return json.loads(found[0].json)


def open_details(app: AppTest) -> AppTest:
    """The page with its folded "Tokenization and how sure the model was of each token" section open (its table
    and probability chart are drawn only then): opened and rerun, unless it already is."""
    if not ("details" in app.session_state and app.session_state["details"]):
        app.session_state["details"] = True
        app.run()
    return app


def shown_tokenization(app: AppTest) -> dict[str, list[str]]:
    """The page's tokenization table (viz.tokenization_table drawn by st.html) as the browser reads its cells:
    row name ("piece", "id") -> cell texts, entities decoded."""
    tables = [read_table(element.proto.body) for element in app.get("html")]
    tokenization = [table for table in tables if table.caption.startswith("Tokenization")]
    assert len(tokenization) == 1, f"{len(tokenization)} tokenization tables"
    _, *rows = tokenization[0].rows  # the first row names the positions
    return {row[0][2]: [text for _, _, text in row[1:]] for row in rows}


class TableReader(HTMLParser):
    """The cells of an HTML table as (tag, scope, text), row by row, and its caption."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, str | None, str]]] = []
        self.caption = ""
        self._cell: tuple[str, str | None] | None = None
        self._text = ""
        self._in_caption = False

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td"):
            self._cell, self._text = (tag, dict(attrs).get("scope")), ""
        elif tag == "caption":
            self._in_caption = True

    def handle_endtag(self, tag):
        if tag in ("th", "td"):
            self.rows[-1].append((*self._cell, self._text))
            self._cell = None
        elif tag == "caption":
            self._in_caption = False

    def handle_data(self, data):
        if self._cell is not None:
            self._text += data
        elif self._in_caption:
            self.caption += data


def read_table(markup: str) -> TableReader:
    reader = TableReader()
    reader.feed(markup)
    return reader


def plotly_array(value) -> np.ndarray:
    """An array from a figure's JSON: a list, or plotly's base64 typed array {"dtype", "bdata", "shape"}."""
    if isinstance(value, dict):
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return flat.reshape([int(n) for n in str(value.get("shape", flat.size)).split(",")])
    return np.asarray(value, dtype=float)


# --- headless Chromium ---

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
)
SERVER_START_LIMIT_S = 90  # streamlit imports torch and plotly before it answers; the machine may be busy


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the selenium package is not installed (pip install -r requirements-dev.txt)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


def need_nginx() -> str:
    """The nginx the launcher finds (deploy.launch.find_nginx); without one, skip (the lecture-hall tests), except in
    CI, where .ci/run installs it and its absence is a failure."""
    import pytest

    from deploy.launch import LaunchError, find_nginx

    try:
        return find_nginx(None)
    except LaunchError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"nginx is missing in CI (.ci/run installs it): {error}")
        pytest.skip(str(error))


@contextmanager
def streamlit_server(
    checkpoints: Path, log_dir: Path | None = None, port: int | None = None, script: Path = REPO / "app.py"
) -> Iterator[str]:
    """Run ``streamlit run app.py`` (or another ``script``) reading ``checkpoints``; yield its URL, stop it after.

    It listens on ``port``, or on a free local port when none is given; pass the port of a server
    that was stopped to restart it where open pages reconnect.
    """
    import tempfile

    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, CHECKPOINTS_ENV: str(checkpoints)}
    command = [
        sys.executable, "-m", "streamlit", "run", str(script),
        "--server.headless", "true",
        "--server.port", str(port),
        "--server.address", "127.0.0.1",
        "--server.fileWatcherType", "none",
    ]  # fmt: skip
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="streamlit-log-"))
    log = log_dir / "streamlit.log"
    with log.open("a") as output:  # a restarted server appends
        server = subprocess.Popen(command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            wait_for_health(url, server, log, SERVER_START_LIMIT_S)
            yield url
        finally:
            stop(server)


@contextmanager
def chromium(
    user_data_dir: Path, width: int = 1400, height: int = 2200, network_log: bool = False, downloads: Path | None = None
) -> Iterator:
    """A headless Chromium (Debian's) driven by chromedriver, with the browser console log recorded (and, with
    ``network_log``, its network events, WebSocket frames included, for ``driver.get_log("performance")``). With
    ``downloads``, files download there without asking, several from one page included (which Chromium would
    otherwise ask a person to allow, and block when headless)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    if downloads is not None:
        options.add_experimental_option(
            "prefs",
            {
                "download.default_directory": str(downloads),
                "download.prompt_for_download": False,
                "profile.default_content_setting_values.automatic_downloads": 1,
            },
        )
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", **({"performance": "ALL"} if network_log else {})})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(user_data_dir, ignore_errors=True)


def click_button(driver, label: str, timeout_s: float = 60.0) -> None:
    """Click the button (or radio choice) labelled ``label`` once it is on the page and enabled.

    A run may still be drawing, or replacing the last run's elements: until the button is there
    it is looked for again, and a button that went stale or was covered is looked up afresh.
    """
    from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def clicked(page) -> bool:
        try:
            buttons = page.find_elements(
                By.XPATH, f"//button[.//p[normalize-space(.)='{label}']] | //label[.//p[normalize-space(.)='{label}']]"
            )
            if not buttons or not (buttons[0].is_displayed() and buttons[0].is_enabled()):
                return False
            # in the middle of the window: scrolled to the top edge, Streamlit's fixed header would take the click
            page.execute_script("arguments[0].scrollIntoView({block: 'center'})", buttons[0])
            buttons[0].click()
            return True
        except (StaleElementReferenceException, ElementClickInterceptedException):
            return False

    WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(clicked, f"no {label!r} button to click")


# --- the tiny MarianMT model (tests/conftest.py's marian fixture) ---

GERMAN = dict(
    zip(
        "a the man woman dog cat child girl boy is are runs sits plays rides walks on in at with".split(),
        "ein der Mann Frau Hund Katze Kind Mädchen Junge ist sind läuft sitzt spielt reitet geht auf in an mit".split(),
        strict=True,
    )
)


def transformers_or_skip():
    """The transformers package; without it the calling test skips, except in CI (CI=true), where it fails."""
    import pytest

    try:
        import transformers
    except ImportError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"transformers must be installed in CI (requirements-dev.txt): {error}")
        pytest.skip("transformers is not installed: pip install -r requirements-dev.txt to compare with MarianMT")
    return transformers


def german(sentence: str) -> str:
    return " ".join(GERMAN.get(word, word) for word in sentence.split())


def opus_vocab(spm_files: list[Path], extra: list[str]) -> dict[str, int]:
    """A vocabulary laid out as OPUS-MT's converter lays them out: </s> 0, <unk> 1, the SentencePiece models' pieces,
    ``extra`` (language codes), <pad> last."""
    pieces = ["</s>", "<unk>"]
    for path in spm_files:
        processor = load_sentencepiece(path)
        for index in range(processor.get_piece_size()):
            piece = processor.id_to_piece(index)
            if not processor.is_control(index) and not processor.is_unknown(index) and piece not in pieces:
                pieces.append(piece)
    return {piece: index for index, piece in enumerate([*pieces, *extra, "<pad>"])}


def write_vocab(path: Path, vocab: dict[str, int]) -> None:
    path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")


def write_spm_files(folder: Path, source_pieces: int, target_pieces: int) -> None:
    """source.spm (English) and target.spm (German) of about these many pieces, trained on toy sentences."""
    english = toy_sentences(300)
    (folder / "source.spm").write_bytes(train_sentencepiece(english, source_pieces, normalization="identity"))
    target = train_sentencepiece([german(s) for s in english], target_pieces, normalization="identity")
    (folder / "target.spm").write_bytes(target)


def write_tokenizer_files(folder: Path) -> dict[str, int]:
    """source.spm, target.spm and a joint vocab.json laid out as OPUS-MT's: </s> 0, <unk> 1, <pad> last."""
    write_spm_files(folder, 70, 90)
    vocab = opus_vocab([folder / "source.spm", folder / "target.spm"], [">>de<<", ">>fr<<"])
    write_vocab(folder / "vocab.json", vocab)
    return vocab


def write_separate_tokenizer_files(folder: Path) -> tuple[dict[str, int], dict[str, int]]:
    """source.spm, target.spm, vocab.json (the source's pieces and language codes) and target_vocab.json (the
    target's pieces), as a tc-big OPUS-MT model has them. The source vocabulary is the larger, so the two <pad> ids
    (each last) differ and the target's is a valid source id too, as MarianConfig's one pad_token_id must be."""
    write_spm_files(folder, 90, 60)
    vocab = opus_vocab([folder / "source.spm"], [">>de<<", ">>fr<<"])
    target_vocab = opus_vocab([folder / "target.spm"], [])
    write_vocab(folder / "vocab.json", vocab)
    write_vocab(folder / "target_vocab.json", target_vocab)
    return vocab, target_vocab


def run_importer(*args: str) -> subprocess.CompletedProcess:
    """``python -m model.import_marian ARGS`` from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "model.import_marian", *map(str, args)], cwd=REPO, capture_output=True, text=True
    )


def assert_attention_equal(capture, expected) -> None:
    """Every head of every layer of each kind captured from our model equals Hugging Face's output_attentions (the
    same number of modules, each within 1e-5)."""
    import torch

    kinds = {
        "encoder.layers.{}.self_attn": expected.encoder_attentions,
        "decoder.layers.{}.self_attn": expected.decoder_attentions,
        "decoder.layers.{}.cross_attn": expected.cross_attentions,
    }
    for name, layers in kinds.items():
        for index, attention in enumerate(layers):
            torch.testing.assert_close(capture.attention[name.format(index)], attention, atol=1e-5, rtol=0)
    assert len(capture.attention) == sum(len(layers) for layers in kinds.values())


def logits_of_both(folder: Path, out: Path, sentence: str):
    """Hugging Face's logits for a MarianMT folder (its model and tokenizer loaded with from_pretrained) and ours for
    its import into ``out``, teacher-forced on ``sentence`` and its German."""
    import torch
    import transformers

    from model import load_checkpoint
    from model.interop.marian import import_marian

    hf_model = transformers.MarianMTModel.from_pretrained(folder).eval()
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    ours = load_checkpoint(import_marian(folder, out), "cpu").model
    src = torch.tensor([hf_tokenizer(sentence).input_ids])
    target = hf_tokenizer(text_target=german(sentence)).input_ids
    tgt = torch.tensor([[hf_model.config.decoder_start_token_id, *target[:-1]]])
    with torch.no_grad():
        return hf_model(input_ids=src, decoder_input_ids=tgt).logits, ours(src, tgt)


def assert_validation_loss_is_per_sentence(translator, examples) -> None:
    """model.training.validation's batched loss equals the mean cross-entropy per target token of each example run
    alone (no padding): whatever padding the batch adds, the loss never sees it."""
    import torch
    import torch.nn.functional as F

    from model.training.validation import validation_loss

    total, tokens = 0.0, 0
    with torch.no_grad():
        for example in examples:
            src, tgt = torch.tensor([example.src]), torch.tensor([example.tgt])
            logits = translator.model(src, tgt[:, :-1])
            total += float(F.cross_entropy(logits[0], tgt[0, 1:], reduction="sum"))
            tokens += len(example.tgt) - 1
    loss = validation_loss(translator.model, examples, translator.config, torch.device("cpu"))
    assert abs(loss - total / tokens) <= 1e-5 * total / tokens
