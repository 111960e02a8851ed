"""What a person waits for in a real browser: the first attention heatmap of a new page, its redraw after Enter,
and the redraw after a head, view or decoding-step change.

Headless Debian Chromium at 1280x800 drives a real ``streamlit run app.py`` reading only the
subject checkpoint. A script installed before every page load records, with the page's own
clock (``performance.now()``, 0 at navigation), when the first plotly heatmap's plotting area
appears, and the time of the last Enter keydown or click; an edit is timed from Enter to the
first chart showing the new sentence's pieces, a control from its click or Enter to the first
chart bearing the title it asks for. The baseline is the floor: a bare Streamlit page with one
text box, one head picker and one plotly heatmap (benchmarks/bare_heatmap_page.py), measured the
same way in the same run, in its own server and browser, in turns with the page: each interaction
on the page is timed beside one on the bare page, so a load that comes and goes on the two shared
cores hits both alike. The same edit is timed again on a random model of opus-mt-en-de's shape.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch

from benchmarks.context import Context
from benchmarks.records import Check, Record
from benchmarks.subject import REPO, sentence_with_pieces
from benchmarks.timing import median, time_call, wait_for
from model.heads import KIND_TITLES
from model.translator import Translator
from viz.tokens import display_labels

BARE_PAGE = Path(__file__).with_name("bare_heatmap_page.py")
VIEWPORT = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
# Installed before each document: the time the first heatmap's plotting area exists, and the last Enter or click.
RECORDER = """
window.__firstHeatmap = null;
new MutationObserver((changes, observer) => {
  if (document.querySelector('.js-plotly-plot .nsewdrag')) {
    window.__firstHeatmap = performance.now();
    observer.disconnect();
  }
}).observe(document, {childList: true, subtree: true});
document.addEventListener('keydown', event => {
  if (event.key === 'Enter') window.__inputAt = performance.now();
}, true);
document.addEventListener('click', () => { window.__inputAt = performance.now(); }, true);
"""
FIRST_COLUMNS = """
const gd = document.querySelector('.js-plotly-plot');
return gd && gd.layout.xaxis ? {columns: gd.layout.xaxis.ticktext || [], now: performance.now()} : null;
"""
# The first chart's title as text (Streamlit's theme wraps a title in <b>).
FIRST_TITLE = """
const gd = document.querySelector('.js-plotly-plot');
const title = gd && gd.layout && gd.layout.title;
return title ? {title: (title.text || '').replace(/<[^>]*>/g, ''), now: performance.now()} : null;
"""
SENTENCE_BOX = "input[aria-label='Source sentence'], input[aria-label='Sentence']"  # the page's, the bare page's
POLL_S = 0.01
LIMIT_S = 90.0


def _open(driver, url: str) -> float:
    """Navigate to ``url`` in a fresh document; ms from navigation to the first heatmap's plotting area."""
    driver.get("about:blank")
    driver.get(url)
    return float(wait_for(lambda: driver.execute_script("return window.__firstHeatmap"), "a heatmap", LIMIT_S, POLL_S))


def _edit(driver, sentence: str, columns: list[str]) -> float:
    """Type ``sentence`` with plain Enter; ms from Enter to the first chart labelling its columns ``columns``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = driver.find_element(By.CSS_SELECTOR, SENTENCE_BOX)
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(sentence)
    field.send_keys(Keys.ENTER)

    def redrawn() -> float | None:
        state = driver.execute_script(FIRST_COLUMNS)
        if state and state["columns"] == columns:
            return state["now"] - driver.execute_script("return window.__inputAt")
        return None

    return float(wait_for(redrawn, "the redraw", LIMIT_S, POLL_S))


def _first_title(driver) -> str:
    return str(wait_for(lambda: driver.execute_script(FIRST_TITLE), "a chart with a title", LIMIT_S, POLL_S)["title"])


def _rerun(driver, act: Callable[[], None], wanted: Callable[[str], bool]) -> float:
    """Do ``act`` (a click, or a choice ended with Enter); ms from it to the first chart with a ``wanted`` title."""
    act()

    def redrawn() -> float | None:
        state = driver.execute_script(FIRST_TITLE)
        if state and wanted(state["title"]):
            return state["now"] - driver.execute_script("return window.__inputAt")
        return None

    return float(wait_for(redrawn, "the redraw", LIMIT_S, POLL_S))


def _pick(driver, label: str, option: str) -> None:
    """Choose ``option`` in the selectbox labelled ``label`` as a keyboard user does: type it, then Enter."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    path = f"//div[@data-testid='stSelectbox'][.//label[normalize-space()='{label}']]//input"
    box = wait_for(lambda: driver.find_elements(By.XPATH, path), f"the {label} picker", LIMIT_S, POLL_S)[0]
    box.click()
    box.send_keys(option)
    box.send_keys(Keys.ENTER)


def _other_heads(driver) -> list[int]:
    """Two heads other than the one the first chart shows, to switch between (as the page counts them, from 1)."""
    shown = _first_title(driver)
    return [head for head in range(1, 5) if not shown.endswith(f"head {head}")][:2]


def _head_change(driver, heads: list[int], index: int) -> float:
    head = heads[index % 2]
    return _rerun(driver, lambda: _pick(driver, "Head", f"head {head}"), _ends(f"head {head}"))


def _view_switch(driver, index: int) -> float:
    """To the encoder's self-attention view and back, in turn."""
    from tests.browser_helpers import click_button

    if index % 2 == 0:
        wanted = lambda title: title.startswith("Encoder") and "self-attention" in title  # noqa: E731
        return _rerun(driver, lambda: click_button(driver, KIND_TITLES["encoder_self"]), wanted)
    return _rerun(driver, lambda: click_button(driver, KIND_TITLES["cross"]), lambda title: "cross-attention" in title)


def _map_click(driver, index: int) -> float:
    """A click on the map's encoder Multi-Head Attention box, then on its decoder cross-attention box, in turns."""
    from selenium.webdriver.common.by import By

    key, wanted = (
        ("encoder.self_attn", lambda title: title.startswith("Encoder") and "self-attention" in title)
        if index % 2 == 0
        else ("decoder.cross_attn", lambda title: "cross-attention" in title)
    )
    box = driver.find_element(By.CSS_SELECTOR, f".fm-box[data-key='{key}']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
    return _rerun(driver, box.click, wanted)


def _step(driver, index: int) -> float:
    """Next to step 2, then Previous to step 1, in turn."""
    from tests.browser_helpers import click_button

    button, step = ("Next", 2) if index % 2 == 0 else ("Previous", 1)
    return _rerun(driver, lambda: click_button(driver, button), _starts(f"Step {step}:"))


def _ends(suffix: str) -> Callable[[str], bool]:
    return lambda title: title.endswith(suffix)


def _starts(prefix: str) -> Callable[[str], bool]:
    return lambda title: title.startswith(prefix)


@contextmanager
def _page(script: Path, checkpoints: Path) -> Iterator[tuple[object, str]]:
    """A server of ``script`` reading ``checkpoints`` and a browser to time it in: (driver, URL)."""
    from tests.browser_helpers import chromium, streamlit_server

    with (
        streamlit_server(checkpoints, script=script) as url,
        chromium(Path(tempfile.mkdtemp(prefix="bench-chromium-")), width=1280, height=800) as driver,
    ):
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", VIEWPORT)
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORDER})
        yield driver, url


def _in_turns(count: int, ours: Callable[[int], float], bare: Callable[[int], float]) -> tuple[list, list]:
    """``count`` timings of each, taken in turns (A B B A A B ...), so that a load that comes and goes on the shared
    cores hits both pages alike: each interaction's baseline is measured beside it, not minutes before."""
    samples: tuple[list, list] = ([], [])
    for index in range(count):
        order = [(ours, samples[0]), (bare, samples[1])]
        for act, into in reversed(order) if index % 2 else order:
            into.append(act(index))
    return samples


def _compare(
    checkpoints: Path,
    sentences: tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]],
    loads: int,
    interactions: int,
) -> dict[str, tuple[object, object]]:
    """The page and the bare page, each in its own server and browser, timed in turns: (ours, bare) samples of a new
    page's first heatmap (the first load cold, then ``loads`` warm), an edit per sentence, then ``interactions`` head
    changes, view switches and decoding steps on the page, each beside as many head changes on the bare page."""
    from tests.browser_helpers import click_button

    with _page(REPO / "app.py", checkpoints) as (ours, ours_url), _page(BARE_PAGE, checkpoints) as (bare, bare_url):
        measured: dict[str, tuple[object, object]] = {"cold": (_open(ours, ours_url), _open(bare, bare_url))}
        measured["warm"] = _in_turns(loads, lambda _: _open(ours, ours_url), lambda _: _open(bare, bare_url))
        time.sleep(1.0)  # let the last pages settle before typing
        ours_sentences, bare_sentences = sentences
        measured["edits"] = _in_turns(
            len(ours_sentences),
            lambda index: _edit(ours, *ours_sentences[index]),
            lambda index: _edit(bare, *bare_sentences[index]),
        )
        ours_heads, bare_heads = _other_heads(ours), _other_heads(bare)
        bare_rerun = partial(_head_change, bare, bare_heads)
        measured["heads"] = _in_turns(interactions, partial(_head_change, ours, ours_heads), bare_rerun)
        measured["views"] = _in_turns(interactions, partial(_view_switch, ours), bare_rerun)
        # a box of the map against the view picker on the same page, in turns, each leaving the other's view
        view_picker = lambda index: _view_switch(ours, index + 1)  # noqa: E731
        measured["map"] = _in_turns(interactions, partial(_map_click, ours), view_picker)
        _rerun(ours, lambda: click_button(ours, "Decoding steps"), _starts("Step "))
        measured["steps"] = _in_turns(interactions, partial(_step, ours), bare_rerun)
        return measured


def model_trace_ms(translator: Translator, texts: list[str], max_new_tokens: int | None = None) -> float:
    """Median ms of the page's own trace (greedy, at most ``max_new_tokens`` output tokens) of each text, here, as the
    page's one request thread runs it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return median(
            [
                time_call(lambda text=text: translator.trace(text, beam_size=1, max_new_tokens=max_new_tokens)) * 1000
                for text in texts
            ]
        )
    finally:
        torch.set_num_threads(threads)


def browser_times(ctx: Context, names: tuple[str, ...]) -> list[Record]:
    """first_heatmap_ms (a new page on a warm server), edit_redraw_ms (Enter to redrawn heatmap), head_switch_ms,
    view_switch_ms and step_redraw_ms, each against a bare Streamlit page with one heatmap measured in the same run;
    map_click_ms (a box of the map) against the view picker's switch on the same page;
    edit_overhead_ms (an edit minus the model's own trace) on the subject and on a model of opus-mt-en-de's shape."""
    from tests.browser_helpers import missing_browser

    reason = missing_browser()
    if reason:
        raise RuntimeError(f"needs headless Chromium: {reason}")
    translator = ctx.subject.translator
    edits = ctx.reps(3, 11)
    texts = [sentence_with_pieces(translator, 15, seed=seed) for seed in range(edits)]
    # the page's first chart, cross-attention, has a column per source piece; the bare page's, a column per word
    ours_sentences = [(text, display_labels(translator.trace(text, beam_size=1).source_pieces)) for text in texts]
    bare_sentences = [(text, text.split()) for text in texts]
    interactions = ctx.reps(4, 12)
    with tempfile.TemporaryDirectory(prefix="bench-browser-") as root:
        folder = Path(root) / ctx.subject.folder.name
        folder.symlink_to(ctx.subject.folder.resolve())
        measured = _compare(Path(root), (ours_sentences, bare_sentences), ctx.reps(3, 7), interactions)
        trace_ms = model_trace_ms(translator, texts)
        opus = _opus_edits(ctx, Path(root), texts) if "opus_edit_overhead_ms" in names else None
    clock = "the page's performance.now(): "
    rerun_floor = (
        "the bare page's rerun after its head picker changes (typed, then Enter), its one heatmap redrawn, timed in "
        "turns with these"
    )
    cases = {
        "first_heatmap_ms": (
            "warm",
            (Check("value", "<=", 2500.0), Check("ratio", "<=", 1.2)),
            {
                "case": "new page, warm server, 1280x800",
                "baseline_is": "a bare Streamlit page with one text box and one plotly heatmap (the floor)",
                "cold_ms": measured["cold"][0],
                "baseline_cold_ms": measured["cold"][1],
                "clock": clock + "navigation start to the first heatmap's plotting area",
            },
        ),
        "edit_redraw_ms": (
            "edits",
            (Check("value", "<=", 400.0), Check("ratio", "<=", 1.3)),
            {
                "case": f"{edits} new 15-piece sentences, plain Enter, greedy (the page's default)",
                "baseline_is": "the bare page redrawing its heatmap for the same sentences, in turns with these",
                "clock": clock + f"Enter keydown to the new heatmap, polled every {POLL_S}s",
            },
        ),
        "head_switch_ms": (
            "heads",
            (Check("ratio", "<=", 1.3),),
            {
                "case": f"{interactions} head changes in the cross-attention view (typed in the Head picker, Enter)",
                "baseline_is": rerun_floor,
                "clock": clock + "Enter keydown to the first chart titled with the new head",
            },
        ),
        "view_switch_ms": (
            "views",
            (Check("ratio", "<=", 1.3),),
            {
                "case": f"{interactions} clicks between the cross-attention and encoder self-attention views",
                "baseline_is": rerun_floor,
                "clock": clock + "click to the first chart titled with the new view's attention",
            },
        ),
        "map_click_ms": (
            "map",
            (Check("ratio", "<=", 1.3),),
            {
                "case": f"{interactions} clicks on the map's encoder self-attention and cross-attention boxes",
                "baseline_is": "the same switches made with the view picker on the same page, in turns with these",
                "clock": clock + "click to the first chart titled with the new view's attention",
            },
        ),
        "step_redraw_ms": (
            "steps",
            (Check("ratio", "<=", 1.3),),
            {
                "case": f"{interactions} Next / Previous clicks in the decoding-steps view",
                "baseline_is": rerun_floor,
                "clock": clock + "click to the step's figure, titled with the new step",
            },
        ),
    }
    records = []
    for name, (samples, checks, params) in cases.items():
        if name in names:
            value_samples, baseline_samples = measured[samples]
            value, baseline = statistics.median(value_samples), statistics.median(baseline_samples)
            params = {
                **params,
                "value_samples": value_samples,
                "baseline_samples": baseline_samples,
                "statistic": "median",
            }
            records.append(Record(name, value, "ms", baseline, checks, params))
    if "edit_overhead_ms" in names:
        records.append(_overhead_record("edit_overhead_ms", measured["edits"][0], trace_ms, ctx.subject.folder.name))
    if opus is not None:
        edits_ms, opus_trace_ms = opus
        limit = f", at most {OPUS_OUTPUT_TOKENS} output tokens on the page and in the trace"
        records.append(_overhead_record("opus_edit_overhead_ms", edits_ms, opus_trace_ms, OPUS_SHAPE + limit))
    return records


OPUS_SHAPE = "opus-shape"
# The random model never ends a sentence: unlimited, each translation of a 15-piece sentence would run to the
# default limit (34 tokens), and the page would draw twice the rows a real model's translation has. Both the page
# (its "Max output tokens") and the trace are held to a real translation's length.
OPUS_OUTPUT_TOKENS = 16


def _overhead_record(name: str, edits_ms: list[float], trace_ms: float, model: str) -> Record:
    """What the page adds to an edit: the median edit minus the median of the model's own trace of the sentences."""
    edit_ms = statistics.median(edits_ms)
    return Record(
        name,
        edit_ms - trace_ms,
        "ms",
        trace_ms,
        (Check("value", "<=", 150.0),),
        {
            "case": f"edit_redraw_ms's edits on {model}, minus the model's own greedy trace of the same sentences",
            "baseline_is": "the model's own trace (Translator.trace, greedy, one thread) in the benchmark process: "
            "the ratio is the page's share against the model's",
            "edit_ms": edit_ms,
            "edit_samples": edits_ms,
            "statistic": "median edit - median trace",
        },
    )


def _opus_edits(ctx: Context, root: Path, texts: list[str]) -> tuple[list[float], float]:
    """Edits on a page opened on a random model of opus-mt-en-de's shape, and that model's own trace of them."""
    from benchmarks.model_benchmarks import opus_shaped_translator
    from model.checkpoint import save_checkpoint

    opus = opus_shaped_translator(ctx.subject.translator.tokenizer, torch.device("cpu"))
    save_checkpoint(root / OPUS_SHAPE, opus.model, opus.tokenizer, {"name": OPUS_SHAPE, "domain": "random weights"})
    sentences = [(text, display_labels(opus.trace(text, beam_size=1).source_pieces)) for text in texts]
    with _page(REPO / "app.py", root) as (driver, url):
        _open(driver, f"{url}/?checkpoint={OPUS_SHAPE}&max_new_tokens={OPUS_OUTPUT_TOKENS}")
        time.sleep(1.0)  # let the page settle before typing
        edits = [_edit(driver, sentence, columns) for sentence, columns in sentences]
    return edits, model_trace_ms(opus, texts, max_new_tokens=OPUS_OUTPUT_TOKENS)
