"""The handout export in Debian's headless Chromium, opened from a local file: the handout fixture
(tests/conftest.py) and the one the page's download button gives draw every chart with no network.

Skipped with the reason when Chromium is missing, except under CI=true, where a missing browser fails.
The file itself is tested in tests/viz/test_export.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from xml.etree import ElementTree

import pytest
from streamlit.testing.v1 import AppTest

from tests.app_helpers import assert_ok, chart_titles
from tests.browser_helpers import chromium
from tests.helpers import APP, CHECKPOINTS_ENV, EXTERNAL_REFERENCE, HOSTILE

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WAIT_S = 60  # an upper bound for plotly to draw on a busy 2-core machine, not a timing assertion


READ_CHARTS = """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    title: (gd.layout && gd.layout.title && gd.layout.title.text) || '',
    marks: gd.querySelectorAll('.overplot .point, .overplot .js-line, .overplot .hm image').length,
    drawn: gd.querySelectorAll('.main-svg').length > 0 && !!gd._fullLayout,
    svg_button: gd.querySelectorAll('.modebar-btn[data-title^="Download plot as an SVG"]').length,
}));
"""


def open_offline(document: str, folder: Path) -> list[dict]:
    """Open the handout as a local file in Chromium; once every chart is drawn, its charts (titles, marks drawn).

    Fails when a chart is not drawn or lacks its SVG button, the first chart's SVG button does not download
    an SVG drawing, something outside the file was requested, or the console logged an error.
    """
    from selenium.webdriver.support.ui import WebDriverWait

    path = folder / "handout.html"
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
        saved = downloads / "handout-chart.svg"
        WebDriverWait(driver, WAIT_S, poll_frequency=0.5).until(
            lambda d: saved.exists() and saved.stat().st_size > 0, "the chart's SVG never arrived"
        )
        assert ElementTree.parse(saved).getroot().tag == "{http://www.w3.org/2000/svg}svg"
        resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert [name for name in resources if not name.startswith(("file:", "data:", "blob:"))] == []
        assert [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"] == []
        assert driver.execute_script("return document.querySelectorAll('b').length") == 0  # hostile text stays text
    return charts


def test_the_file_opens_offline_in_chromium_with_every_chart_drawn(browser_ready, handout, tmp_path):
    document, sections = handout
    charts = open_offline(document, tmp_path)
    assert [chart["title"] for chart in charts] == [s.figure.layout.title.text for s in sections if s.figure]


def test_the_pages_own_export_opens_offline_in_chromium(
    browser_ready, tiny_checkpoint, handout_files, monkeypatch, tmp_path
):
    """The file the page's "Download handout (HTML)" button gives, for the cross-attention view at step 2."""

    monkeypatch.setenv(CHECKPOINTS_ENV, str(tiny_checkpoint.parent))
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params.update({"sentence": HOSTILE, "view": "cross", "display": "grid", "step": "1"})
    app.run()
    assert_ok(app)
    page_titles = chart_titles(app)
    document = handout_files[f"{tiny_checkpoint.name}-handout.html"]()
    assert not EXTERNAL_REFERENCE.search(document)
    charts = open_offline(document, tmp_path)
    assert [chart["title"] for chart in charts] == page_titles
