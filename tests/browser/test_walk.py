"""Every control of the page pressed once, as a person would, on two shipped checkpoints (tests/browser/walk.py).

The walk finds the controls in the page itself, so a new button or picker is pressed without a new test; it fails
on any exception shown on the page, any console error, a run that never ends, a download that never arrives or
text cut off. What it pressed is written to test-output/walk-CHECKPOINT.txt.

The Train view trains a model of its own and is the same on every checkpoint: its controls are pressed on the last
walk, and the other opens it and checks it. The two walks run at once, each in its own browser on one server
(two sessions, as two students would): most of a walk is waiting for runs to end and for the page to be quiet,
which they share.

The two checkpoints are the two architectures the page draws differently: the default translation model (pre-norm,
a final norm, four layers) and a toy task (post-norm, two layers). The other translation models are drawn view by view
under AppTest (tests/explorer/test_shipped_checkpoints.py): a walk of a second translation model of the same
architecture pressed the same controls again.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from explorer import views
from tests.browser.pages import in_parallel, load_page
from tests.browser.walk import Walk, walk_page
from tests.browser_helpers import chromium, streamlit_server
from tests.helpers import REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.longest]

OUTPUT = REPO / "test-output"
CHECKPOINTS = ("multi30k-en-de", "toy-copy")  # the default, a toy task
# The views not about the sentence (the Train view trains a model of its own) are the same on every checkpoint: their
# controls are pressed on the last walk only, and the others open them and check them
SAME_ON_EVERY_CHECKPOINT = frozenset(
    views.label(key) for key in views.VIEWS.keys() if not views.VIEWS[key].about_the_sentence
)


def walk_checkpoint(url: str, checkpoint: str, downloads: Path) -> Walk:
    downloads.mkdir()
    opened_only = frozenset() if checkpoint == CHECKPOINTS[-1] else SAME_ON_EVERY_CHECKPOINT
    with chromium(Path(tempfile.mkdtemp(prefix="chromium-profile-")), 1280, 800, True, downloads) as driver:
        load_page(driver, f"{url}/?checkpoint={checkpoint}")
        walk = walk_page(driver, downloads, opened_only=opened_only)
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / f"walk-{checkpoint}.txt").write_text("\n".join(walk.pressed + ["", "problems:", *walk.problems]) + "\n")
    return walk


def test_every_control_of_every_view_works_on_two_checkpoints(browser_ready, tmp_path):
    with streamlit_server(REPO / "checkpoints", tmp_path) as url:
        walks = in_parallel(
            walk_checkpoint, [url] * len(CHECKPOINTS), CHECKPOINTS, [tmp_path / name for name in CHECKPOINTS]
        )
    problems = [
        f"{name}: {problem}" for name, walk in zip(CHECKPOINTS, walks, strict=True) for problem in walk.problems
    ]
    assert not problems, "\n".join(problems)
    for name, walk in zip(CHECKPOINTS, walks, strict=True):
        assert set(walk.views) == {views.label(key) for key in views.VIEWS.keys()}, name
        kinds = {control.kind for control in walk.changed}
        assert {"button", "toggle", "radio", "select", "slider", "choice", "download", "section"} <= kinds, name
        assert {"Right", "Left"} <= set(walk.keys_pressed), name
    pressed_in_train_view = [line for line in walks[-1].pressed if line.startswith("view 'Train': view button")]
    assert pressed_in_train_view, "the last walk presses the views that are the same on every checkpoint"
