"""Every control of the page pressed once, as a person would, on two shipped checkpoints (tests/browser/walk.py).

The walk finds the controls in the page itself, so a new button or picker is pressed without a new test; it fails
on any exception shown on the page, any console error, a run that never ends, a download that never arrives, text
cut off or a request to anywhere but the server. What it pressed is written to test-output/walk-CHECKPOINT.txt.

The two checkpoints are the two architectures the page draws differently: the default translation model (pre-norm,
a final norm, four layers) and a toy task (post-norm, two layers). The views of Figure 1's boxes (attention, the
positional encoding, the embedding, Add & Norm, Feed Forward, the decoding steps) draw each architecture otherwise:
both walks press their controls. The other views, the sidebar and presenter mode are the same code on every
checkpoint: each walk presses one half of them and opens and checks the other half, so that the two walks, run at
once in two browsers on one server (two sessions, as two students), take about as long. The other translation
models are drawn view by view under AppTest (tests/explorer/test_shipped_checkpoints.py).
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
ARCHITECTURE_VIEWS = frozenset(views.label(key) for key in views.VIEWS.keys() if views.VIEWS[key].on_the_map)
# the views whose controls the walk of the default checkpoint presses besides Figure 1's; the toy walk presses the
# rest (the quiz, word sources, training evolution, the Train view), the sidebar and presenter mode
DEFAULT_WALK_PRESSES = frozenset({views.label("experiments")})


def walk_checkpoint(url: str, checkpoint: str, downloads: Path) -> Walk:
    downloads.mkdir()
    default = checkpoint == CHECKPOINTS[0]
    pressed = ARCHITECTURE_VIEWS | (DEFAULT_WALK_PRESSES if default else all_views() - DEFAULT_WALK_PRESSES)
    with chromium(Path(tempfile.mkdtemp(prefix="chromium-profile-")), 1280, 800, True, downloads) as driver:
        load_page(driver, f"{url}/?checkpoint={checkpoint}")
        walk = walk_page(driver, downloads, opened_only=all_views() - pressed, sidebar_and_presenter=not default)
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / f"walk-{checkpoint}.txt").write_text("\n".join(walk.pressed + ["", "problems:", *walk.problems]) + "\n")
    return walk


def all_views() -> frozenset[str]:
    """The views of the picker (presenter mode adds the map of the model, which the toy walk opens there)."""
    return frozenset(views.label(key) for key in views.VIEWS.keys() if not views.VIEWS[key].presenter_only)


def test_every_control_of_every_view_works_on_two_checkpoints(browser_ready, tmp_path):
    with streamlit_server(REPO / "checkpoints", tmp_path) as url:
        walks = in_parallel(
            walk_checkpoint, [url] * len(CHECKPOINTS), CHECKPOINTS, [tmp_path / name for name in CHECKPOINTS]
        )
    problems = [
        f"{name}: {problem}" for name, walk in zip(CHECKPOINTS, walks, strict=True) for problem in walk.problems
    ]
    assert not problems, "\n".join(problems)
    presenter_views = {views.label(key) for key in views.VIEWS.keys() if views.VIEWS[key].presenter_only}
    assert set(walks[0].views) == all_views()
    assert set(walks[1].views) == all_views() | presenter_views
    for name, walk in zip(CHECKPOINTS, walks, strict=True):
        assert {"button", "toggle", "radio", "select", "slider", "choice"} <= {c.kind for c in walk.changed}, name
    pressed_views = [
        {line.split("'")[1] for line in walk.pressed if line.startswith("view '") and ": " in line} for walk in walks
    ]
    assert set.union(*pressed_views) == all_views(), "every view's controls pressed on a walk"
    assert ARCHITECTURE_VIEWS <= set.intersection(*pressed_views), "Figure 1's views pressed on both architectures"
    kinds = {control.kind for walk in walks for control in walk.changed}
    assert {"download", "section"} <= kinds
    assert {"Right", "Left"} <= set(walks[0].keys_pressed)
