"""A class across two replicas behind nginx, in real headless Chromium: the teacher's page on one replica, two
students' pages on the other, one SQLite store between them (as ``python -m deploy.launch`` serves a lecture hall).

The students follow the teacher's sentence, view and step without a reload, answer a question the teacher asks,
see the reveal; one explores on its own and follows again. Skipped with the reason when Chromium or nginx is
missing, except under CI=true.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from benchmarks.server import lecture_hall
from explorer.classes.store import STORE_ENV, open_store
from tests.browser.pages import chart, in_parallel, shows, wait_until
from tests.browser_helpers import chromium, click_button, need_nginx
from tests.helpers import CHECKPOINTS_ENV
from viz.classes import choice_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SENTENCE = "a blue man rides on the street."
OTHER = "two green dog plays in the snow."
POLL_S = 0.25


def on_replica(driver, hall: str, replica: str) -> None:
    """Keep this browser on ``replica``: nginx routes by the explorer_replica cookie (deploy/nginx.conf.template)."""
    driver.get(f"{hall}/nginx-health")
    driver.add_cookie({"name": "explorer_replica", "value": replica, "path": "/"})


def type_sentence(driver, sentence: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, "input[aria-label='Source sentence']")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(sentence, Keys.ENTER)


def page_text(driver) -> str:
    return driver.execute_script("return document.body.innerText")


def test_students_on_one_replica_follow_and_answer_a_teacher_on_the_other(
    browser_ready, tiny_checkpoint, translator, tmp_path
):
    need_nginx()
    store_url = f"sqlite:///{tmp_path / 'classes.sqlite'}"
    env = {**os.environ, CHECKPOINTS_ENV: str(tiny_checkpoint.parent), STORE_ENV: store_url}
    made = open_store(store_url).create_class(hours=1)  # as python -m explorer.classes new does before a lecture
    first, second = (translator.trace(text, beam_size=1) for text in (SENTENCE, OTHER))
    with lecture_hall(2, tmp_path / "hall", env) as hall:
        replicas = [f"127.0.0.1:{port}" for port in json.loads((tmp_path / "hall" / "replicas.json").read_text())]
        with (
            chromium(tmp_path / "teacher", 1280, 1600) as teacher,
            chromium(tmp_path / "student-1", 1280, 1600) as one,
            chromium(tmp_path / "student-2", 1280, 1600) as two,
        ):
            students = [one, two]
            on_replica(teacher, hall, replicas[0])
            teacher.get(f"{hall}/?class={made.code}&teacher={made.teacher_key}&sentence={SENTENCE.replace(' ', '+')}")
            wait_until(teacher, lambda d: "You teach class" in page_text(d), "the teacher link did not open the class")
            assert "teacher=" not in teacher.current_url  # the key leaves the address bar at once
            for student in students:
                on_replica(student, hall, replicas[1])
            in_parallel(lambda driver: driver.get(f"{hall}/?class={made.code}"), students)
            for student in students:
                wait_until(student, lambda d: "following the teacher" in page_text(d), "a student did not join")
                assert shows_sentence(student, SENTENCE)
            assert [d.get_cookie("explorer_replica")["value"] for d in (teacher, *students)] == [
                replicas[0],
                replicas[1],
                replicas[1],
            ]

            # the teacher moves: a new sentence, the decoding steps, step 2; the students' pages go there by themselves
            type_sentence(teacher, OTHER)
            click_button(teacher, "Decoding steps")
            wait_until(teacher, lambda d: shows(d, OTHER, second, 0), "the teacher's page did not change")
            moved = time.monotonic()
            click_button(teacher, "Next")
            for student in students:
                wait_until(student, lambda d: shows(d, OTHER, second, 1), "a student did not follow", POLL_S)
            print(f"class across replicas: followed {time.monotonic() - moved:.2f} s after the teacher's step")

            # a question: asked on one replica, answered on the other, counted, revealed to all
            click_button(teacher, "Ask")
            for student in students:
                wait_until(
                    student, lambda d: "**Question" in d.page_source or "Question:" in page_text(d), "no question"
                )
            asked = open_store(store_url).info(made.code).question
            for student, choice in zip(students, (0, 1), strict=True):
                click_button(student, choice_text(asked.question, choice))
                wait_until(student, lambda d: "Your answer:" in page_text(d), "the answer was not taken")
            wait_until(teacher, lambda d: "2 of 2 answered" in page_text(d), "the teacher never saw both answers")
            click_button(teacher, "Reveal")
            for driver in (teacher, *students):
                wait_until(driver, lambda d: chart(d, "The class's answers and the model's"), "no reveal")
            assert open_store(store_url).counts(asked.id)[:2] == [1, 1]

            # one student explores alone, then follows again
            click_button(one, "Explore on my own")
            wait_until(one, lambda d: "exploring on your own" in page_text(d), "the student kept following")
            type_sentence(teacher, SENTENCE)
            wait_until(two, lambda d: shows_sentence(d, SENTENCE), "the other student stopped following")
            time.sleep(1.0)  # two looks at the class
            assert shows_sentence(one, OTHER)
            click_button(one, "Follow again")
            wait_until(one, lambda d: shows_sentence(d, SENTENCE), "follow again did not jump to the teacher")
            assert first.translation in page_text(one)
            for driver in (teacher, *students):
                assert not driver.find_elements("css selector", "[data-testid='stException']")


def shows_sentence(driver, sentence: str) -> bool:
    return (
        driver.execute_script(
            "const box = document.querySelector(\"input[aria-label='Source sentence']\"); return box ? box.value : null"
        )
        == sentence
    )
