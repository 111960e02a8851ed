"""The lesson export (viz.export): one self-contained HTML file that draws its charts with no network.

The browser tests open a lesson built here and the one the page's download button gives in
Debian's headless Chromium, from a local file (skipped with the reason when Chromium is missing,
except under CI=true, where a missing browser fails).
"""

from __future__ import annotations

import html
import re
import tempfile
from pathlib import Path
from xml.etree import ElementTree

import pytest

import viz
from explorer.copy import CAVEAT, EXPLANATIONS
from model import load_checkpoint
from viz.export import LessonSection, lesson_html, markdown_html

HOSTILE = "<script>alert('x')</script> **not bold** & <b>b</b>"
EXTERNAL_REFERENCE = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=""", re.IGNORECASE)
WAIT_S = 60  # an upper bound for plotly to draw on a busy 2-core machine, not a timing assertion


@pytest.fixture(scope="module")
def lesson(tiny_checkpoint) -> tuple[str, list[LessonSection]]:
    """A lesson with real figures of the tiny checkpoint, of several kinds (bars, heatmaps, subplots, lines)."""
    trace = load_checkpoint(tiny_checkpoint, device="cpu").trace("the girl sits.", beam_size=1)
    axes = viz.attention_axes(trace, "cross")
    step = viz.decoding_step(trace, 0, 1)
    sections = [
        LessonSection(
            "Probability of each output token",
            "",
            viz.token_probabilities(trace.predicted_pieces, trace.step_probs, title="Probabilities"),
        ),
        LessonSection(
            "Step 1", EXPLANATIONS["step"], viz.step_attention(step.cross_rows, trace.source_pieces, title="Step 1")
        ),
        LessonSection(
            "Cross-attention",
            EXPLANATIONS["cross"],
            viz.attention_heatmap(axes.stack[0, 0], axes.query_pieces, axes.key_pieces, title="One head"),
        ),
        LessonSection(
            "All heads",
            EXPLANATIONS["grid"],
            viz.attention_grid(axes.stack, axes.query_pieces, axes.key_pieces, title="All heads"),
        ),
        LessonSection(
            "Head view",
            EXPLANATIONS["heads"],
            viz.head_view(axes.stack[1], axes.query_pieces, axes.key_pieces, title="Head view"),
        ),
        LessonSection("Translation at each stage", rows=[("untrained", HOSTILE), ("final", trace.translation)]),
    ]
    facts = [("Source sentence", trace.source_text), ("Translation", trace.translation), ("Note", HOSTILE)]
    return lesson_html("A lesson", sections, facts=facts, caveat=CAVEAT), sections


def test_the_file_is_self_contained(lesson):
    document, sections = lesson
    assert not EXTERNAL_REFERENCE.search(document)  # no script, style sheet, image or frame loaded from anywhere
    assert "plotly.js v" in document and document.count("<script>") == 1 + sum(s.figure is not None for s in sections)
    assert document.count("Plotly.newPlot(") == sum(section.figure is not None for section in sections)


def test_text_is_escaped_and_explanations_keep_their_emphasis(lesson):
    document, _ = lesson
    assert "<script>alert" not in document and "<b>b</b>" not in document
    assert f"<dd>{html.escape(HOSTILE)}</dd>" in document  # facts: literal text, no Markdown
    assert f"<th>untrained</th><td>{html.escape(HOSTILE)}</td>" in document  # table rows too
    assert "<strong>Cross-attention.</strong>" in document  # the explanation's **bold**
    assert "<em>reads from</em>" in document  # the caveat's *italics*
    assert [match.group(1) for match in re.finditer(r"<section><h2>(.*?)</h2>", document)][:3] == [
        "Probability of each output token",
        "Step 1",
        "Cross-attention",
    ]


def test_markdown_html_supports_only_the_explanations_subset():
    assert markdown_html("**a** and *b* and `c`\n\nnext") == (
        "<p><strong>a</strong> and <em>b</em> and <code>c</code></p>\n<p>next</p>"
    )
    assert markdown_html("2 * 3 * 4") == "<p>2 * 3 * 4</p>"  # spaced asterisks are not emphasis
    assert markdown_html("<i>x</i> [link](http://x)") == "<p>&lt;i&gt;x&lt;/i&gt; [link](http://x)</p>"
    assert markdown_html("") == ""


READ_CHARTS = """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    title: (gd.layout && gd.layout.title && gd.layout.title.text) || '',
    marks: gd.querySelectorAll('.overplot .point, .overplot .js-line, .overplot .hm image').length,
    drawn: gd.querySelectorAll('.main-svg').length > 0 && !!gd._fullLayout,
    svg_button: gd.querySelectorAll('.modebar-btn[data-title^="Download plot as an SVG"]').length,
}));
"""


def open_offline(document: str, folder: Path) -> list[dict]:
    """Open the lesson as a local file in Chromium; once every chart is drawn, its charts (titles, marks drawn).

    Fails when a chart is not drawn or lacks its SVG button, the first chart's SVG button does not download
    an SVG drawing, something outside the file was requested, or the console logged an error.
    """
    from browser_utils import chromium
    from selenium.webdriver.support.ui import WebDriverWait

    path = folder / "lesson.html"
    path.write_text(document, encoding="utf-8")
    n_charts = document.count("Plotly.newPlot(")
    with chromium(Path(tempfile.mkdtemp(prefix="chromium-profile-"))) as driver:
        driver.get(path.as_uri())
        WebDriverWait(driver, WAIT_S, poll_frequency=0.5).until(
            lambda d: (
                [(chart["drawn"], chart["svg_button"]) for chart in d.execute_script(READ_CHARTS)]
                == [(True, 1)] * n_charts
            ),
            "the charts, each with one SVG button in its toolbar, were never drawn",
        )
        charts = driver.execute_script(READ_CHARTS)
        assert all(chart["marks"] > 0 for chart in charts), charts  # bars, lines or heatmap images
        downloads = folder / "downloads"
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        driver.execute_script("document.querySelector('.modebar-btn[data-title^=\"Download plot as an SVG\"]').click()")
        saved = downloads / "lesson-chart.svg"
        WebDriverWait(driver, WAIT_S, poll_frequency=0.5).until(
            lambda d: saved.exists() and saved.stat().st_size > 0, "the chart's SVG never arrived"
        )
        assert ElementTree.parse(saved).getroot().tag == "{http://www.w3.org/2000/svg}svg"
        resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert [name for name in resources if not name.startswith(("file:", "data:", "blob:"))] == []
        assert [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"] == []
        assert driver.execute_script("return document.querySelectorAll('b').length") == 0  # hostile text stays text
    return charts


@pytest.mark.browser
def test_the_file_opens_offline_in_chromium_with_every_chart_drawn(browser_ready, lesson, tmp_path):
    document, sections = lesson
    charts = open_offline(document, tmp_path)
    assert [chart["title"] for chart in charts] == [s.figure.layout.title.text for s in sections if s.figure]


@pytest.mark.browser
def test_the_pages_own_export_opens_offline_in_chromium(
    browser_ready, tiny_checkpoint, lesson_files, monkeypatch, tmp_path
):
    """The file the page's "Download lesson (HTML)" button gives, for the cross-attention view at step 2."""
    from app_utils import APP, CHECKPOINTS_ENV, assert_ok, chart_titles
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(CHECKPOINTS_ENV, str(tiny_checkpoint.parent))
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params.update({"sentence": HOSTILE, "view": "cross", "display": "grid", "step": "1"})
    app.run()
    assert_ok(app)
    page_titles = chart_titles(app)
    document = lesson_files[f"{tiny_checkpoint.name}-lesson.html"]()
    assert not EXTERNAL_REFERENCE.search(document)
    charts = open_offline(document, tmp_path)
    assert [chart["title"] for chart in charts] == page_titles
