"""The README screenshot: the app on the shipped default checkpoint in headless Chromium, saved as a PNG.

Run from the repository root::

    .venv/bin/python -m tests.browser.screenshot --checkpoints checkpoints --out docs/screenshot.png
    .venv/bin/python -m tests.browser.screenshot --train --out docs/train.png   # the Train view, after a training
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.browser_helpers import SERVER_START_LIMIT_S, chromium, click_button, streamlit_server
from tests.helpers import REPO

TRAINING_LIMIT_S = 120  # the default reverse training takes well under that on two cores


def take_screenshot(checkpoints: Path, out: Path, query: str, width: int, height: int) -> None:
    """Open the app at ``query`` (URL parameters), wait until its charts are drawn, save a PNG of the window."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with streamlit_server(checkpoints) as url, chromium(Path(tempfile.mkdtemp()), width, height) as driver:
        driver.get(f"{url}/?{query}")
        WebDriverWait(driver, SERVER_START_LIMIT_S).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")
        )  # the first chart drawn; the wait below lets the rest of the page (the map) settle
        time.sleep(2)  # let plotly finish its transitions before the picture
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))


def take_training_screenshot(checkpoints: Path, out: Path, width: int, height: int) -> None:
    """Train the default reverse model in the Train view, then picture its controls, curves and attention."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with streamlit_server(checkpoints) as url, chromium(Path(tempfile.mkdtemp()), width, height) as driver:
        driver.get(f"{url}/?view=train")
        click_button(driver, "Start", timeout_s=SERVER_START_LIMIT_S)  # the help folds: the training comes first
        WebDriverWait(driver, TRAINING_LIMIT_S).until(
            lambda d: "budget" in d.find_element(By.CSS_SELECTOR, "[data-testid='stProgress']").text
        )
        time.sleep(2)  # the first screen as the class sees it: buttons, progress, curves beside the attention
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.browser.screenshot",
        description="Screenshot of the attention explorer in headless Chromium.",
    )
    parser.add_argument("--checkpoints", type=Path, default=REPO / "checkpoints", help="folder of checkpoint folders")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshot.png", help="PNG to write")
    parser.add_argument(
        "--query",
        default="",
        help="URL parameters that pick the state shown (default: none, the first screen), e.g. "
        "view=encoder&layer=3&head=1, in the format the page itself writes into its URL",
    )
    parser.add_argument("--width", type=int, default=1280, help="window width in pixels")
    parser.add_argument("--height", type=int, default=950, help="window height in pixels (about 800 of page)")
    parser.add_argument("--train", action="store_true", help="train in the Train view and picture it (--query unused)")
    arguments = parser.parse_args(argv)
    if arguments.train:
        take_training_screenshot(arguments.checkpoints, arguments.out, arguments.width, arguments.height)
        return
    take_screenshot(arguments.checkpoints, arguments.out, arguments.query, arguments.width, arguments.height)


if __name__ == "__main__":
    main()
