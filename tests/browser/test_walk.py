"""Every control of the page pressed once, as a person would, on three shipped checkpoints (tests/browser/walk.py).

The walk finds the controls in the page itself, so a new button or picker is pressed without a new test; it fails
on any exception shown on the page, any console error, a run that never ends or a download that never arrives.
What it pressed is written to test-output/walk-CHECKPOINT.txt.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from explorer import views
from tests.browser.pages import load_page
from tests.browser.walk import walk_page
from tests.helpers import REPO, chromium, streamlit_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OUTPUT = REPO / "test-output"


@pytest.fixture(scope="module")
def shipped_server(browser_ready, tmp_path_factory):
    """The app serving the shipped checkpoints."""
    with streamlit_server(REPO / "checkpoints", tmp_path_factory.mktemp("streamlit-log")) as url:
        yield url


@pytest.mark.parametrize("checkpoint", ["multi30k-en-de", "multi30k-en-fr", "toy-copy"])
def test_every_control_of_every_view_works(shipped_server, checkpoint, tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with chromium(Path(tempfile.mkdtemp(prefix="chromium-profile-")), 1280, 800, True, downloads) as driver:
        load_page(driver, f"{shipped_server}/?checkpoint={checkpoint}")
        walk = walk_page(driver, downloads)
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / f"walk-{checkpoint}.txt").write_text("\n".join(walk.pressed + ["", "problems:", *walk.problems]) + "\n")
    assert not walk.problems, "\n".join(walk.problems)
    assert set(walk.views) == {views.label(key) for key in views.VIEWS.keys()}
    kinds = {control.kind for control in walk.changed}
    assert {"button", "toggle", "radio", "select", "slider", "choice", "download", "section"} <= kinds, kinds
    assert {"Right", "Left"} <= set(walk.keys_pressed)
