"""The README screenshot: the app on the shipped default checkpoint in headless Chromium, saved as a PNG.

Run from the repository root::

    .venv/bin/python -m tests.browser.screenshot --checkpoints checkpoints --out docs/screenshot.png
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.helpers import REPO, SERVER_START_LIMIT_S, chromium, streamlit_server


def take_screenshot(checkpoints: Path, out: Path, query: str, width: int, height: int) -> None:
    """Open the app at ``query`` (URL parameters), wait until its charts are drawn, save a PNG of the window."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with streamlit_server(checkpoints) as url, chromium(Path(tempfile.mkdtemp()), width, height) as driver:
        driver.get(f"{url}/?{query}")
        WebDriverWait(driver, SERVER_START_LIMIT_S).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")) >= 5
        )
        time.sleep(2)  # let plotly finish its transitions before the picture
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
    arguments = parser.parse_args(argv)
    take_screenshot(arguments.checkpoints, arguments.out, arguments.query, arguments.width, arguments.height)


if __name__ == "__main__":
    main()
