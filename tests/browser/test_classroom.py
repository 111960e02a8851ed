"""Classroom mode in a real headless Chromium: Back and Forward walk through the steps and views a URL holds.

The page runs on the classroom_checkpoints fixture (tests/conftest.py); skipped with the reason when Chromium is
missing, except under CI=true. The page's state and URLs under AppTest: tests/explorer/test_classroom.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.browser_helpers import chromium, click_button, streamlit_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]


READ_STATE = """
const step = Array.from(document.querySelectorAll('p > strong'))
    .find(strong => strong.innerText.trim().startsWith('Step '));
const charts = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .map(gd => (gd.layout.title && gd.layout.title.text) || '');
const running = document.querySelector("[data-testid='stStatusWidget']") !== null;
return {query: window.location.search, step: step ? step.innerText.trim() : '', charts: charts, running: running};
"""


def test_back_and_forward_in_chromium_walk_through_steps_and_views(browser_ready, classroom_checkpoints):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def wait_for(driver, query: str, step: int | None, chart: str) -> None:
        def arrived(d) -> bool:
            state = d.execute_script(READ_STATE)
            return (
                not state["running"]  # the run has finished: the page takes the next click or key
                and state["query"] == query
                and (state["step"].startswith(f"Step {step + 1} of ") if step is not None else not state["step"])
                and any(title.startswith(chart) for title in state["charts"])
            )

        WebDriverWait(driver, 90, poll_frequency=0.5).until(arrived, f"never reached {query} (step {step}, {chart})")

    with (
        streamlit_server(classroom_checkpoints) as url,
        chromium(Path(tempfile.mkdtemp(prefix="chromium-profile-"))) as driver,
    ):
        steps = "?checkpoint=toy-plain-en-de&view=steps"
        driver.get(f"{url}/{steps}")
        wait_for(driver, steps, 0, "Step 1: next token and attention")
        click_button(driver, "Next")
        wait_for(driver, f"{steps}&step=1", 1, "Step 2: next token and attention")
        ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()  # the Next button's shortcut
        wait_for(driver, f"{steps}&step=2", 2, "Step 3: next token and attention")
        click_button(driver, "Cross-attention")
        cross = "Decoder layer 2 – cross-attention"  # the tiny model's readable head
        wait_for(driver, "?checkpoint=toy-plain-en-de", None, cross)
        driver.back()
        wait_for(driver, f"{steps}&step=2", 2, "Step 3: next token and attention")
        driver.back()
        wait_for(driver, f"{steps}&step=1", 1, "Step 2: next token and attention")
        driver.forward()
        wait_for(driver, f"{steps}&step=2", 2, "Step 3: next token and attention")
        assert [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"] == []
