"""Helpers for the browser tests: a `streamlit run` server on a free port and Debian's headless Chromium.

Run as a script to take the README screenshot of the shipped default checkpoint::

    .venv/bin/python tests/browser_utils.py --checkpoints checkpoints --out docs/screenshot.png
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # also run as a script (the README screenshot command)
    sys.path.insert(0, str(REPO))

from benchmarks.server import free_port, wait_for_health  # noqa: E402

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


@contextmanager
def streamlit_server(
    checkpoints: Path, log_dir: Path | None = None, port: int | None = None, script: Path = REPO / "app.py"
) -> Iterator[str]:
    """Run ``streamlit run app.py`` (or another ``script``) reading ``checkpoints``; yield its URL, stop it after.

    It listens on ``port``, or on a free local port when none is given; pass the port of a server
    that was stopped to restart it where open pages reconnect.
    """
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "ATTENTION_EXPLORER_CHECKPOINTS": str(checkpoints)}
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
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@contextmanager
def chromium(user_data_dir: Path, width: int = 1400, height: int = 2200) -> Iterator:
    """A headless Chromium (Debian's) driven by chromedriver, with the browser console log recorded."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
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
            buttons[0].click()
            return True
        except (StaleElementReferenceException, ElementClickInterceptedException):
            return False

    WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(clicked, f"no {label!r} button to click")


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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Screenshot of the attention explorer in headless Chromium.")
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
    arguments = parser.parse_args()
    take_screenshot(arguments.checkpoints, arguments.out, arguments.query, arguments.width, arguments.height)
