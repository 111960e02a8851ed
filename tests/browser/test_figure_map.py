"""The map of the model (Figure 1) in headless Chromium at 1280x800: every box drawn within the first screen, each
kind of box opening its view, every box reached with Tab and with the arrow keys, no console error.

The map's JavaScript is explorer/components/figure_map.js; what a click sets is tested under AppTest
(tests/explorer/test_figure_map.py), the axe scan of every view (the map beside each) in test_accessibility.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from explorer.components.figure_map import settings_to_open
from model.analysis.figure_one import figure_boxes
from model.checkpoint import read_config
from tests.browser.pages import charts, console_errors, load_page, wait_until
from tests.browser_helpers import chromium, streamlit_server
from tests.helpers import DEFAULT_CHECKPOINT, REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OUTPUT = REPO / "test-output"
BOXES = "return [...document.querySelectorAll('.fm-box')].map(box => box.dataset.key)"
FOCUSED = "return document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null"


def box(driver, key: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f".fm-box[data-key='{key}']")


def press(driver, key: str) -> None:
    """Click a box as a person would, scrolled to the middle of the window (the page's header covers the top)."""
    element = box(driver, key)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()


def shown_view(driver) -> str:
    """The view in the page's address (the default, cross-attention, is left out of it)."""
    query = parse_qs(urlparse(driver.current_url).query)
    return query.get("view", ["cross"])[0]


def marked(driver) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('.fm-box[aria-current=\"true\"]')].map(box => box.dataset.key)"
    )


def test_every_box_is_drawn_opens_its_view_and_is_reached_by_keyboard(browser_ready, tmp_path):
    from selenium.webdriver.common.keys import Keys

    config = read_config(DEFAULT_CHECKPOINT)
    boxes = figure_boxes(config)
    with (
        streamlit_server(REPO / "checkpoints", tmp_path) as url,
        chromium(Path(tempfile.mkdtemp(prefix="chromium-profile-")), 1280, 800) as driver,
    ):
        load_page(driver, url)
        wait_until(driver, lambda d: d.execute_script(BOXES), "the map was never drawn")
        drawn = driver.execute_script(BOXES)
        assert sorted(drawn) == sorted(b.key for b in boxes)
        OUTPUT.mkdir(exist_ok=True)
        driver.save_screenshot(str(OUTPUT / "figure-map.png"))
        for key in drawn:  # beside the view, every box wide enough for its words; Figure 1 is tall, the page scrolls
            rect = box(driver, key).rect
            assert rect["x"] >= 300 and rect["x"] + rect["width"] <= 1280 and rect["width"] >= 60, (key, rect)
            assert rect["height"] >= 14, (key, rect)
        assert box(driver, "softmax").rect["y"] < 600, "the map starts on the first screen"
        assert marked(driver) == ["decoder.cross_attn"]

        # Tab walks every box in the order drawn; the arrow keys reach every box too
        press(driver, drawn[0])  # the first box (Softmax) opens the decoding steps; focus stays on the map
        wait_until(driver, lambda d: "softmax" in marked(d), "Softmax never opened the decoding steps")
        driver.execute_script(f"document.querySelector(\".fm-box[data-key='{drawn[0]}']\").focus()")
        tabbed = [driver.execute_script(FOCUSED)]
        for _ in drawn[1:]:
            driver.switch_to.active_element.send_keys(Keys.TAB)
            tabbed.append(driver.execute_script(FOCUSED))
        assert tabbed == drawn
        reached = set()
        for start in ("encoder.embed", "decoder.embed"):  # up each column, until the focus stays at its top
            driver.execute_script(f"document.querySelector(\".fm-box[data-key='{start}']\").focus()")
            while (key := driver.execute_script(FOCUSED)) not in reached:
                reached.add(key)
                driver.switch_to.active_element.send_keys(Keys.ARROW_UP)
        driver.execute_script("document.querySelector(\".fm-box[data-key='encoder.feed_forward']\").focus()")
        driver.switch_to.active_element.send_keys(Keys.ARROW_RIGHT)
        assert driver.execute_script(FOCUSED).startswith("decoder."), "Right moves to the decoder"
        driver.switch_to.active_element.send_keys(Keys.ARROW_LEFT)
        assert driver.execute_script(FOCUSED).startswith("encoder."), "Left moves back to the encoder"
        assert reached == set(drawn)

        # one box of each view opens it, and the map marks it
        opened: set[str] = set()
        for each in boxes:
            view = settings_to_open(each, 0)["view"]
            if view in opened:
                continue
            opened.add(view)
            press(driver, each.key)
            wait_until(driver, lambda d, key=each.key: key in marked(d), f"{each.key} never opened its view")
            wait_until(driver, lambda d, view=view: shown_view(d) == view, f"{each.key} never opened {view}")
            wait_until(driver, lambda d: charts(d), f"{each.key}: its view drew no chart")
        assert len(opened) == 8
        assert not console_errors(driver)
