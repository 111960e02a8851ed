"""A classroom in real headless Chromium: four pages at once on one server, each seeing only its own work. (A server
lost under open pages, which come back by themselves: test_replicas.py.)

Starts `streamlit run app.py` on a free local port with a small random checkpoint; skipped with the reason when
Chromium is missing, except under CI=true. One page at a time: test_browser.py.
"""

from __future__ import annotations

import time

import pytest

from benchmarks.server import free_port
from model.trace import Trace
from tests.browser.pages import READ_PAGE, console_errors, driver_sentence, in_parallel, shows, wait_until
from tests.browser_helpers import chromium, click_button, streamlit_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# --- a classroom: many pages at once on one server, then a server restart ---

CLASSROOM = [  # one sentence per page, all from the toy tokenizer's words (tests.helpers.WORDS)
    f"{det} {color} {noun} {verb} {prep} the {place}."
    for det, color, noun, verb, prep, place in [
        ("a", "blue", "man", "rides", "on", "street"),
        ("the", "red", "woman", "walks", "in", "park"),
        ("two", "green", "dog", "plays", "in", "snow"),
        ("three", "old", "cat", "sits", "at", "water"),
    ]
]


POLL_S = 1.0  # four pages polled at once: every check costs the browsers CPU time too


def edit_sentence(driver, sentence: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, "input[aria-label='Source sentence']")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(sentence)
    box.send_keys(Keys.ENTER)


def test_classroom_of_four_pages(browser_ready, tiny_checkpoint, translator, tmp_path):
    """Four pages edit and step at once, each sees only its own work, and keeps it in its URL."""
    from contextlib import ExitStack

    from selenium.webdriver.common.by import By

    expected = [translator.trace(sentence, beam_size=1) for sentence in CLASSROOM]  # the page's defaults
    steps = [min(1 + index % 2, trace.n_steps - 1) for index, trace in enumerate(expected)]
    assert len({tuple(trace.source_pieces) for trace in expected}) == len(CLASSROOM)  # every page tells apart
    port = free_port()
    started = time.monotonic()

    def edit_and_step(driver, sentence: str, trace: Trace, step: int) -> str:
        # A blank sentence in the URL: the page opens with its "type a sentence" message and draws nothing yet.
        driver.get(f"http://127.0.0.1:{port}/?sentence=%20")
        wait_until(
            driver,
            lambda d: "Type a sentence" in d.find_element(By.TAG_NAME, "body").text and driver_sentence(d) == " ",
            "the blank page never appeared",
            POLL_S,
        )
        edit_sentence(driver, sentence)
        wait_until(
            driver,
            lambda d: d.execute_script(READ_PAGE)["translation"] == trace.translation,
            f"{sentence!r} was never translated",
            POLL_S,
        )
        click_button(driver, "Decoding steps")
        wait_until(driver, lambda d: shows(d, sentence, trace, 0), f"{sentence!r}: the steps never showed", POLL_S)
        for reached in range(1, step + 1):
            click_button(driver, "Next")
            wait_until(
                driver, lambda d, s=reached: shows(d, sentence, trace, s), f"{sentence!r}: no step {reached}", POLL_S
            )
        wait_until(driver, lambda d: f"step={step}" in d.current_url, "the step never reached the URL", POLL_S)
        return driver.current_url

    def still_shows(driver, sentence: str, trace: Trace, step: int) -> list[dict]:
        assert shows(driver, sentence, trace, step), f"{sentence!r}: the page changed while the others worked"
        return console_errors(driver)

    with ExitStack() as browsers:
        # A small window: four software-rendered pages share two cores with the server.
        drivers = in_parallel(
            lambda index: browsers.enter_context(chromium(tmp_path / f"profile-{index}", 1000, 900)),
            range(len(CLASSROOM)),
        )
        with streamlit_server(tiny_checkpoint.parent, tmp_path, port):
            urls = in_parallel(edit_and_step, drivers, CLASSROOM, expected, steps)
            print(f"classroom: {len(drivers)} pages edited and stepped after {time.monotonic() - started:.0f} s")
            # Only now that every page is done: nothing one session did showed up on another.
            errors = in_parallel(still_shows, drivers, CLASSROOM, expected, steps)
        assert errors == [[]] * len(CLASSROOM)
        assert all("sentence=" in page_url and "step=" in page_url for page_url in urls)
