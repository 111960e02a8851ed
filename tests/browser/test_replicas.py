"""A lecture hall in real headless Chromium: two Streamlit replicas behind nginx (``python -m deploy.launch``) with
one SQLite class store, started once for this file.

- A class across the replicas: the teacher's page on one, a student's on the other; the student follows the
  teacher's sentence, view and step without a reload, answers the question the teacher asks, sees the reveal,
  explores on its own and follows again. axe-core scans the student's question and the teacher's revealed page.
- Three pages, and one replica killed under them. Each page on the killed replica comes back by itself, through
  nginx, on the live one, showing its own sentence, step and charts again, and goes on working; the launcher, held
  until then (a replica it restarts answers within a second and would keep the pages), restarts the dead replica.

Skipped with the reason when Chromium or nginx is missing, except under CI=true.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from benchmarks.server import lecture_hall
from deploy.launch import answers
from explorer.classes.store import STORE_ENV, open_store
from model.trace import Trace
from tests.browser.pages import (
    axe_source,
    blocking_violations,
    chart,
    console_errors,
    driver_sentence,
    in_parallel,
    shows,
    translation_text,
    wait_until,
)
from tests.browser_helpers import chromium, click_button, need_nginx
from tests.helpers import CHECKPOINTS_ENV
from viz.classes import choice_text

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


@dataclass(frozen=True)
class Hall:
    url: str
    run_dir: Path
    store_url: str


@pytest.fixture(scope="module")
def hall(tiny_checkpoint, tmp_path_factory) -> Iterator[Hall]:
    """Two replicas behind nginx on the tiny checkpoint, sharing one SQLite class store."""
    need_nginx()
    root = tmp_path_factory.mktemp("hall")
    store_url = f"sqlite:///{root / 'classes.sqlite'}"
    env = {**os.environ, CHECKPOINTS_ENV: str(tiny_checkpoint.parent), STORE_ENV: store_url}
    with lecture_hall(2, root / "run", env) as url:
        yield Hall(url, root / "run", store_url)


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


def parent_of(pid: int) -> int:
    """The process that started ``pid`` (Linux's /proc; nginx runs on Linux here)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def replica_of(driver) -> str:
    """The replica nginx keeps this browser on (its explorer_replica cookie: the address that answered it last)."""
    cookie = driver.get_cookie("explorer_replica")
    return cookie["value"] if cookie else ""


# Notes the page's address at the moment the class panel's first words reach the page (a script run before the page's
# own, watching every change of the document).
ADDRESS_WHEN_THE_CLASS_SHOWS = """
new MutationObserver((changes, observer) => {
    if (document.body && document.body.textContent.includes("You teach class")) {
        window.addressWhenTheClassShowed = location.href;
        observer.disconnect();
    }
}).observe(document, {childList: true, subtree: true, characterData: true});"""
CLASS_SENTENCES = ("a blue man rides on the street.", "two green dog plays in the snow.")


def on_replica(driver, url: str, replica: str) -> None:
    """Keep this browser on ``replica``: nginx routes by the explorer_replica cookie (deploy/nginx.conf.template)."""
    driver.get(f"{url}/nginx-health")
    driver.add_cookie({"name": "explorer_replica", "value": replica, "path": "/"})


def type_sentence(driver, sentence: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, "input[aria-label='Source sentence']")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(sentence, Keys.ENTER)


def page_text(driver) -> str:
    return driver.execute_script("return document.body.innerText")


def shows_translation(driver, sentence: str, trace: Trace) -> bool:
    return driver_sentence(driver) == sentence and translation_text(driver) == trace.translation


def test_a_student_on_one_replica_follows_and_answers_a_teacher_on_the_other(browser_ready, hall, translator, tmp_path):
    first, second = CLASS_SENTENCES
    traces = [translator.trace(text, beam_size=1) for text in CLASS_SENTENCES]
    made = open_store(hall.store_url).create_class(hours=1)  # as python -m explorer.classes new makes one
    axe, violations = axe_source(), {}
    replicas = [f"127.0.0.1:{port}" for port in json.loads((hall.run_dir / "replicas.json").read_text())]
    with chromium(tmp_path / "teacher", 1280, 1600) as teacher, chromium(tmp_path / "student", 1280, 1600) as student:
        on_replica(teacher, hall.url, replicas[0])
        on_replica(student, hall.url, replicas[1])
        teacher.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ADDRESS_WHEN_THE_CLASS_SHOWS})
        teacher.get(f"{hall.url}/?class={made.code}&teacher={made.teacher_key}&sentence={quote(first)}")
        wait_until(teacher, lambda d: "You teach class" in page_text(d), "the teacher link did not open the class")
        # the key left the address bar before the class was drawn (the run's URL is written only at its end)
        assert "teacher=" not in teacher.execute_script("return window.addressWhenTheClassShowed")
        assert "teacher=" not in teacher.current_url
        student.get(f"{hall.url}/?class={made.code}")
        wait_until(student, lambda d: "following the teacher" in page_text(d), "the student did not join")
        wait_until(student, lambda d: driver_sentence(d) == first, "the student did not open the teacher's page")
        assert [replica_of(teacher), replica_of(student)] == replicas  # one replica each

        # the teacher moves: a new sentence, the decoding steps, step 2; the student's page goes there by itself
        type_sentence(teacher, second)
        click_button(teacher, "Decoding steps")
        wait_until(teacher, lambda d: shows(d, second, traces[1], 0), "the teacher's page did not change")
        moved = time.monotonic()
        click_button(teacher, "Next")
        wait_until(student, lambda d: shows(d, second, traces[1], 1), "the student did not follow", 0.25)
        print(f"class across replicas: followed {time.monotonic() - moved:.2f} s after the teacher's step")

        # a question: asked on one replica, answered on the other, counted, revealed to both
        click_button(teacher, "Ask")
        wait_until(student, lambda d: "Question:" in page_text(d), "the question did not reach the student")
        asked = open_store(hall.store_url).info(made.code).question
        choice = choice_text(asked.question, 1)
        wait_until(student, lambda d: choice in page_text(d), "the choices did not show")
        if axe is not None:  # the class's pages pass axe-core as every view does (test_accessibility.py)
            violations["a student's question"] = blocking_violations(student, axe)
        click_button(student, choice)
        wait_until(student, lambda d: "Your answer:" in page_text(d), "the answer was not taken")
        wait_until(teacher, lambda d: "1 of 1 answered" in page_text(d), "the teacher never saw the answer")
        click_button(teacher, "Reveal")
        for driver in (teacher, student):
            wait_until(driver, lambda d: chart(d, "The class's answers and the model's"), "no reveal")
        assert open_store(hall.store_url).counts(asked.id)[1] == 1
        if axe is not None:  # the sidebar's Class section with its QR code, the strip, the chart
            violations["the teacher's page, revealed"] = blocking_violations(teacher, axe)
        assert {page: found for page, found in violations.items() if found} == {}

        # the student explores alone, then follows again
        click_button(student, "Explore on my own")
        wait_until(student, lambda d: "exploring on your own" in page_text(d), "the student kept following")
        type_sentence(teacher, first)
        wait_until(teacher, lambda d: shows_translation(d, first, traces[0]), "the teacher's page did not change")
        time.sleep(1.0)  # five looks of the class watch
        assert driver_sentence(student) == second
        click_button(student, "Follow again")
        wait_until(student, lambda d: shows_translation(d, first, traces[0]), "follow again did not go to the teacher")
        for driver in (teacher, student):
            assert not driver.find_elements("css selector", "[data-testid='stException']")


def test_pages_on_a_killed_replica_come_back_by_themselves_on_the_live_one(browser_ready, hall, translator, tmp_path):
    expected = [translator.trace(sentence, beam_size=1) for sentence, _ in PAGES]
    run_dir = hall.run_dir

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
        url = hall.url
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
        moved = [index for index, replica in enumerate(before) if replica == victim]
        stayed = [index for index in range(len(PAGES)) if index not in moved]
        assert moved  # at least one page was on the killed replica
        # The launcher is held until the moved pages are back: a replica it restarts answers within about a second
        # (Streamlit loads the page's script at its first run), and a page that reconnected after that was kept on the
        # restarted one by its cookie, never failing over to the live replica, which is what this part checks.
        launcher = parent_of(pids[victim_port])
        os.kill(launcher, signal.SIGSTOP)
        try:
            os.kill(pids[victim_port], signal.SIGKILL)
            killed_at = time.monotonic()
            seconds = in_parallel(
                back_and_working,
                [drivers[i] for i in moved],
                [PAGES[i][0] for i in moved],
                [expected[i] for i in moved],
                [PAGES[i][1] for i in moved],
                [sessions[i] for i in moved],
            )
        finally:
            os.kill(launcher, signal.SIGCONT)
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
