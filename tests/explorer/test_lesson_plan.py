"""The lesson plan's links (docs/lesson-plan.md) open the page it describes: each link's settings are the page's
after its first run, and the page runs without an error."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlparse

import pytest
from streamlit.testing.v1 import AppTest

from explorer.state import url_text
from tests.app_helpers import assert_ok
from tests.helpers import APP, REPO

LINK = re.compile(r"`(/\?[^`\s]+)`")


def lesson_links() -> list[str]:
    return LINK.findall((REPO / "docs" / "lesson-plan.md").read_text(encoding="utf-8"))


def test_the_lesson_plan_has_a_link_for_each_step():
    links = lesson_links()
    assert len(links) >= 12, links
    views = {dict(parse_qsl(urlparse(link).query)).get("view") for link in links}
    assert {"map", "positional", "embedding", "attribution", "quiz", "residual", "steps", "train"} <= views


@pytest.mark.slow  # a page run for each link
def test_every_link_of_the_lesson_plan_opens_what_it_says():
    for link in lesson_links():
        settings = dict(parse_qsl(urlparse(link).query))
        app = AppTest.from_file(APP, default_timeout=120)
        app.query_params.update(settings)
        app.run()
        assert_ok(app)
        assert {key: url_text(app.session_state[key]) for key in settings} == settings, link
