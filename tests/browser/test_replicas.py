"""A lecture hall in real headless Chromium: two Streamlit replicas behind nginx (``python -m deploy.launch``), three
pages, and one replica killed under them. Each page on the killed replica comes back by itself, through nginx, on
the live one, showing its own sentence, step and charts again, and goes on working; the launcher restarts the
dead replica. Skipped with the reason when Chromium or nginx is missing, except under CI=true.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from contextlib import ExitStack
from urllib.parse import quote

import pytest

from benchmarks.server import lecture_hall
from deploy.launch import answers
from model.trace import Trace
from tests.browser.pages import console_errors, in_parallel, shows, wait_until
from tests.browser_helpers import chromium, click_button, need_nginx
from tests.helpers import CHECKPOINTS_ENV

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PAGES = [  # (sentence, decoding step shown): every page tells apart from the others by both
    ("a blue man rides on the street.", 1),
    ("the red woman walks in the park.", 2),
    ("two green dog plays in the snow.", 1),
]
POLL_S = 1.0
CLICK_ANSWER_S = 10.0  # a live session answers a step click in well under a second, even on two busy cores
# a synchronous request of the page's own, through nginx, with its cookies: true when the replica answering it is up
HEALTH_THROUGH_NGINX = """
const request = new XMLHttpRequest();
request.open('GET', '/_stcore/health', false);
request.send();
return request.status === 200;
"""


@pytest.fixture
def nginx_ready() -> None:
    need_nginx()


def answered_within(driver, condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition(driver):
            return True
        time.sleep(0.5)
    return False


def session_of(driver) -> str:
    """The server session that drew the page last (explorer/components/reconnect.py marks the page with it)."""
    return driver.execute_script("return document.documentElement.dataset.explorerSession || ''")


def replica_of(driver) -> str:
    """The replica nginx keeps this browser on (its explorer_replica cookie: the address that answered it last)."""
    cookie = driver.get_cookie("explorer_replica")
    return cookie["value"] if cookie else ""


def test_pages_on_a_killed_replica_come_back_by_themselves_on_the_live_one(
    browser_ready, nginx_ready, tiny_checkpoint, translator, tmp_path
):
    expected = [translator.trace(sentence, beam_size=1) for sentence, _ in PAGES]
    run_dir = tmp_path / "hall"
    env = {**os.environ, CHECKPOINTS_ENV: str(tiny_checkpoint.parent)}

    def open_page(driver, url: str, sentence: str, trace: Trace, step: int) -> str:
        driver.get(f"{url}/?sentence={quote(sentence)}&view=steps&step={step}")
        wait_until(driver, lambda d: shows(d, sentence, trace, step), f"{sentence!r} never showed step {step}", POLL_S)
        return replica_of(driver)

    def back_and_working(driver, sentence: str, trace: Trace, step: int, old_session: str) -> float:
        """Seconds from the kill until the page, without a reload, is drawn by a new session with its state, and
        answers a click."""
        wait_until(driver, lambda d: session_of(d) not in ("", old_session), f"{sentence!r} was not run again", POLL_S)
        wait_until(driver, lambda d: shows(d, sentence, trace, step), f"{sentence!r} lost its state", POLL_S)
        click_button(driver, "Previous")  # only a live session answers: the page is connected again
        if not answered_within(driver, lambda d: shows(d, sentence, trace, step - 1), CLICK_ANSWER_S):
            # a reconnection that comes in two tries more than reconnect.js's settling time apart asks for a second
            # page run, which may replace the click's fragment run: click once more (a dead session answers neither)
            click_button(driver, "Previous")
        wait_until(driver, lambda d: shows(d, sentence, trace, step - 1), f"{sentence!r} did not answer after", POLL_S)
        return time.monotonic() - killed_at

    with ExitStack() as stack:
        url = stack.enter_context(lecture_hall(2, run_dir, env))
        drivers = in_parallel(
            lambda index: stack.enter_context(chromium(tmp_path / f"profile-{index}", 1000, 900)), range(len(PAGES))
        )
        before = in_parallel(
            open_page, drivers, [url] * len(PAGES), [s for s, _ in PAGES], expected, [step for _, step in PAGES]
        )
        sessions = [session_of(driver) for driver in drivers]
        pids = json.loads((run_dir / "replicas.json").read_text())
        assert set(before) <= {f"127.0.0.1:{port}" for port in pids}  # every page is kept on a replica
        victim, _ = Counter(before).most_common(1)[0]
        victim_port = victim.rsplit(":", 1)[1]
        os.kill(pids[victim_port], signal.SIGKILL)
        killed_at = time.monotonic()
        moved = [index for index, replica in enumerate(before) if replica == victim]
        stayed = [index for index in range(len(PAGES)) if index not in moved]
        assert moved  # at least one page was on the killed replica

        seconds = in_parallel(
            back_and_working,
            [drivers[i] for i in moved],
            [PAGES[i][0] for i in moved],
            [expected[i] for i in moved],
            [PAGES[i][1] for i in moved],
            [sessions[i] for i in moved],
        )
        print(f"replicas: {len(moved)} page(s) back {', '.join(f'{s:.1f}' for s in seconds)} s after the kill")
        # their browsers are now kept on the live replica, where their sessions moved; the others never noticed
        live = next(f"127.0.0.1:{port}" for port in pids if port != victim_port)
        assert [replica_of(drivers[i]) for i in moved] == [live] * len(moved)
        for index in stayed:
            sentence, step = PAGES[index]
            assert (
                shows(drivers[index], sentence, expected[index], step) and session_of(drivers[index]) == sessions[index]
            )
            click_button(drivers[index], "Previous")
            wait_until(
                drivers[index],
                lambda d, i=index: shows(d, PAGES[i][0], expected[i], PAGES[i][1] - 1),
                f"{sentence!r}, on the live replica all along, stopped answering",
                POLL_S,
            )
        # the launcher restarted the killed replica on its port; the moved pages stay where their sessions are
        wait_until(
            drivers[0],
            lambda _: json.loads((run_dir / "replicas.json").read_text())[victim_port] != pids[victim_port],
            "the killed replica was not restarted",
        )
        wait_until(drivers[0], lambda _: answers(f"http://{victim}/_stcore/health"), "the restarted one never answered")
        for index in moved:
            drivers[index].execute_script(HEALTH_THROUGH_NGINX)  # a request of the page's own, after the restart
            assert replica_of(drivers[index]) == live
        for driver in drivers:
            assert not driver.find_elements("css selector", "[data-testid='stException']")
            # what a lost connection logs (the websocket, the reconnecting page's requests) is all the console has
            unexpected = [
                entry
                for entry in console_errors(driver)
                if not re.search(r"websocket|_stcore|Failed to load", entry["message"], re.I)
            ]
            assert unexpected == []
    assert "restarting it" in (run_dir / "launcher.log").read_text()
