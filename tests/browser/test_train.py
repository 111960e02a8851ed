"""The Train view in a real headless Chromium at 1280x800: a training starts, its curve and attention change while
it runs, it stops, and the trained model opens in the cross-attention view; the console stays clean."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.browser.pages import chart, console_errors, wait_until
from tests.browser_helpers import chromium, click_button
from tests.helpers import REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OUTPUT = REPO / "test-output"
# small enough to take a few milliseconds a step, a budget long enough to watch it change and stop it by hand
TRAIN_URL = "/?view=train&train_encoder_layers=1&train_decoder_layers=1&train_d_model=16&train_steps=20000"
PROGRESS = """
const bar = document.querySelector('[data-testid="stProgress"]');
return bar ? bar.innerText : '';
"""


@pytest.fixture
def driver(browser_ready):
    with chromium(Path(tempfile.mkdtemp(prefix="chromium-profile-")), width=1280, height=800) as browser:
        yield browser


def curve_points(driver) -> int:
    """How many points the training curve's loss line has now."""
    return driver.execute_script(
        "const gd = [...document.querySelectorAll('.js-plotly-plot')].find(g => g.layout.title.text === 'Training');"
        "return gd && gd._fullData.length ? gd._fullData[0]._length || 0 : 0;"
    )


def heatmap_weights(driver) -> str:
    """The watched head's weights as text: they change as the model learns."""
    return driver.execute_script(
        "const gd = [...document.querySelectorAll('.js-plotly-plot')]"
        ".find(g => g.layout.title.text === 'Cross-attention');"
        "return gd ? JSON.stringify(gd.data[0].z) : '';"
    )


def test_a_training_is_watched_stopped_and_explored(server, driver):
    driver.get(server + TRAIN_URL)
    click_button(driver, "Start", timeout_s=90)
    wait_until(driver, lambda d: "exact match" in d.execute_script(PROGRESS), "no measurement appeared")
    seen = []
    for _ in range(3):  # the page redraws the curve and the heatmap by itself, without a reload
        before = (curve_points(driver), heatmap_weights(driver))
        wait_until(
            driver,
            lambda d, before=before: curve_points(d) > before[0] and heatmap_weights(d) != before[1],
            "the curve and the heatmap did not change",
            poll_s=0.2,
        )
        seen.append((curve_points(driver), heatmap_weights(driver)))
    assert len({weights for _, weights in seen}) == 3
    OUTPUT.mkdir(exist_ok=True)
    driver.save_screenshot(str(OUTPUT / "browser-train-view.png"))
    click_button(driver, "Stop")
    wait_until(driver, lambda d: "Stopped by hand" in d.execute_script(PROGRESS), "the training did not stop")
    click_button(driver, "Explore this model")
    wait_until(driver, lambda d: chart(d, "Decoder layer") is not None, "the cross-attention view")
    wait_until(driver, lambda d: "checkpoint=trained-reverse" in d.current_url, "the link does not name the model")
    assert "The sequence reversed" in driver.find_element("css selector", "[data-testid='stSidebar']").text
    assert console_errors(driver) == []
