"""Headless Chromium and a real server: a `streamlit run` server on a free port and Debian's Chromium (selenium is
imported inside the functions, so that the rest of the suite runs without it). The README screenshot is taken by
``python -m tests.browser.screenshot`` with these helpers; the benchmarks use them too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.server import free_port, stop, wait_for_health
from tests.helpers import CHECKPOINTS_ENV, REPO

# --- headless Chromium ---

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
    # as a person who asks for less motion: the page then opens sections and flips switches without animating them
    # (explorer/components/assistive.py), and a section opened costs the browser about a third of the CPU time; the
    # page with its motion is tested in test_accessibility.py
    "--force-prefers-reduced-motion",
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


def need_nginx() -> str:
    """The nginx the launcher finds (deploy.launch.find_nginx); without one, skip (the lecture-hall tests), except in
    CI, where .ci/run installs it and its absence is a failure."""
    import pytest

    from deploy.launch import LaunchError, find_nginx

    try:
        return find_nginx(None)
    except LaunchError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"nginx is missing in CI (.ci/run installs it): {error}")
        pytest.skip(str(error))


@contextmanager
def streamlit_server(
    checkpoints: Path, log_dir: Path | None = None, port: int | None = None, script: Path = REPO / "app.py"
) -> Iterator[str]:
    """Run ``streamlit run app.py`` (or another ``script``) reading ``checkpoints``; yield its URL, stop it after.

    It listens on ``port``, or on a free local port when none is given; pass the port of a server
    that was stopped to restart it where open pages reconnect.
    """
    import tempfile

    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, CHECKPOINTS_ENV: str(checkpoints)}
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
            stop(server)


@contextmanager
def chromium(
    user_data_dir: Path, width: int = 1400, height: int = 2200, network_log: bool = False, downloads: Path | None = None
) -> Iterator:
    """A headless Chromium (Debian's) driven by chromedriver, with the browser console log recorded (and, with
    ``network_log``, its network events, WebSocket frames included, for ``driver.get_log("performance")``). With
    ``downloads``, files download there without asking, several from one page included (which Chromium would
    otherwise ask a person to allow, and block when headless)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    if downloads is not None:
        options.add_experimental_option(
            "prefs",
            {
                "download.default_directory": str(downloads),
                "download.prompt_for_download": False,
                "profile.default_content_setting_values.automatic_downloads": 1,
            },
        )
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", **({"performance": "ALL"} if network_log else {})})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(user_data_dir, ignore_errors=True)


def as_new(driver, width: int, height: int):
    """A browser that a test before has used, made ready for the next test as a new one would be: console and
    network logs emptied (what they hold from here is this test's), the window at ``width`` x ``height`` with no
    emulated screen, downloads as the browser's default. The page stays open until the test opens its own.

    A module's tests share one browser: a page of a server this browser has drawn before takes a fraction of the
    CPU of a new browser's first page (its renderer and compiled scripts are kept), on a machine whose two cores the
    suite keeps busy (docs/testing.md, "Where the time goes")."""
    driver.get_log("browser")
    if "performance" in driver.log_types:
        driver.get_log("performance")
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "default"})
    driver.set_window_size(width, height)
    return driver


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
            # in the middle of the window: scrolled to the top edge, Streamlit's fixed header would take the click
            page.execute_script("arguments[0].scrollIntoView({block: 'center'})", buttons[0])
            buttons[0].click()
            return True
        except (StaleElementReferenceException, ElementClickInterceptedException):
            return False

    WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(clicked, f"no {label!r} button to click")
