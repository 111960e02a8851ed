"""What a person waits for in a real browser: the first attention heatmap of a new page, and its redraw after Enter.

Headless Debian Chromium at 1280x800 drives a real ``streamlit run app.py`` reading only the
subject checkpoint. A script installed before every page load records, with the page's own
clock (``performance.now()``, 0 at navigation), when the first plotly heatmap's plotting area
appears; an edit is timed from the Enter key's keydown to the first chart showing the new
sentence's pieces. The baseline is the floor: a bare Streamlit page with one text box and one
plotly heatmap (benchmarks/bare_heatmap_page.py), measured the same way in the same run.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.context import Context
from benchmarks.records import Check, Record
from benchmarks.subject import REPO, sentence_with_pieces
from benchmarks.timing import wait_for
from viz.tokens import display_labels

BARE_PAGE = Path(__file__).with_name("bare_heatmap_page.py")
VIEWPORT = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
# Installed before each document: the time the first heatmap's plotting area exists, and Enter's keydown.
RECORDER = """
window.__firstHeatmap = null;
new MutationObserver((changes, observer) => {
  if (document.querySelector('.js-plotly-plot .nsewdrag')) {
    window.__firstHeatmap = performance.now();
    observer.disconnect();
  }
}).observe(document, {childList: true, subtree: true});
document.addEventListener('keydown', event => {
  if (event.key === 'Enter') window.__enterAt = performance.now();
}, true);
"""
FIRST_COLUMNS = """
const gd = document.querySelector('.js-plotly-plot');
return gd && gd.layout.xaxis ? {columns: gd.layout.xaxis.ticktext || [], now: performance.now()} : null;
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
            return state["now"] - driver.execute_script("return window.__enterAt")
        return None

    return float(wait_for(redrawn, "the redraw", LIMIT_S, POLL_S))


def _measure(script: Path, checkpoints: Path, sentences: list[tuple[str, list[str]]], loads: int) -> dict[str, object]:
    """Cold and warm first-heatmap times of a page served from ``script``, then one edit per sentence."""
    from tests.helpers import chromium, streamlit_server

    with (
        streamlit_server(checkpoints, script=script) as url,
        chromium(Path(tempfile.mkdtemp(prefix="bench-chromium-")), width=1280, height=800) as driver,
    ):
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", VIEWPORT)
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORDER})
        cold = _open(driver, url)
        warm = [_open(driver, url) for _ in range(loads)]
        time.sleep(1.0)  # let the last page settle before typing
        edits = [_edit(driver, sentence, columns) for sentence, columns in sentences]
    return {"cold": cold, "warm": warm, "edits": edits}


def browser_times(ctx: Context, names: tuple[str, ...]) -> list[Record]:
    """first_heatmap_ms (a new page on a warm server) and edit_redraw_ms (Enter to redrawn heatmap), each against
    a bare Streamlit page with one heatmap measured in the same run."""
    from tests.helpers import missing_browser

    reason = missing_browser()
    if reason:
        raise RuntimeError(f"needs headless Chromium: {reason}")
    translator = ctx.subject.translator
    edits = ctx.reps(3, 7)
    texts = [sentence_with_pieces(translator, 15, seed=seed) for seed in range(edits)]
    # the page's first chart, cross-attention, has a column per source piece; the bare page's, a column per word
    ours_sentences = [(text, display_labels(translator.trace(text, beam_size=1).source_pieces)) for text in texts]
    bare_sentences = [(text, text.split()) for text in texts]
    with tempfile.TemporaryDirectory(prefix="bench-browser-") as root:
        folder = Path(root) / ctx.subject.folder.name
        folder.symlink_to(ctx.subject.folder.resolve())
        loads = ctx.reps(3, 7)
        ours = _measure(REPO / "app.py", Path(root), ours_sentences, loads)
        bare = _measure(BARE_PAGE, Path(root), bare_sentences, loads)
    clock = "the page's performance.now(): "
    measured = {
        "first_heatmap_ms": (
            "warm",
            2500.0,
            {
                "case": "new page, warm server, 1280x800",
                "baseline_is": "a bare Streamlit page with one text box and one plotly heatmap (the floor)",
                "cold_ms": ours["cold"],
                "baseline_cold_ms": bare["cold"],
                "clock": clock + "navigation start to the first heatmap's plotting area",
            },
        ),
        "edit_redraw_ms": (
            "edits",
            400.0,
            {
                "case": f"{edits} new 15-piece sentences, plain Enter, greedy (the page's default)",
                "baseline_is": "the bare page redrawing its heatmap for the same sentences",
                "clock": clock + f"Enter keydown to the new heatmap, polled every {POLL_S}s",
            },
        ),
    }
    records = []
    for name, (samples, budget, params) in measured.items():
        if name in names:
            value, baseline = statistics.median(ours[samples]), statistics.median(bare[samples])
            params = {
                **params,
                "value_samples": ours[samples],
                "baseline_samples": bare[samples],
                "statistic": "median",
            }
            records.append(Record(name, value, "ms", baseline, (Check("value", "<=", budget),), params))
    return records
