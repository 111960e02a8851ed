"""The views, in the order of the view picker. Each is a module with ``render(ctx)``.

Adding a view: write ``explorer/views/my_view.py`` with ``render(ctx: PageContext) -> None``
(read the sentence's trace and the display settings from ``ctx``; bind every widget a person
can change to a row of ``explorer.state.SETTINGS``), then add one line to VIEWS below.

The layout and the rules between the packages: docs/architecture.md (its Layout block names every view).
"""

from __future__ import annotations

from functools import partial

from explorer.views import (
    attention,
    attribution,
    embedding,
    evolution,
    experiments,
    feed_forward,
    model_map,
    positional,
    quiz,
    residual,
    steps,
    train,
)
from explorer.views.registry import Registry, View
from model.heads import KIND_TITLES

# A page opens on the first view listed (cross-attention), presenter mode on the decoding steps. Beside the views of
# Figure 1's boxes (on_the_map) the page draws the map of the model; presenter mode draws every view alone, the map
# being a view of its own there.
VIEWS = Registry(
    View("cross", KIND_TITLES["cross"], partial(attention.render, kind="cross"), on_the_map=True),
    View("steps", "Decoding steps", steps.render, opens_presenter=True, on_the_map=True),
    View("map", "The model (Figure 1)", model_map.render, presenter_only=True),
    View("encoder_self", KIND_TITLES["encoder_self"], partial(attention.render, kind="encoder_self"), on_the_map=True),
    View("decoder_self", KIND_TITLES["decoder_self"], partial(attention.render, kind="decoder_self"), on_the_map=True),
    View("positional", "Positional encoding", positional.render, on_the_map=True),
    View("embedding", "Embedding", embedding.render, on_the_map=True),
    View("residual", "Add & Norm", residual.render, on_the_map=True),
    View("feed_forward", "Feed Forward", feed_forward.render, on_the_map=True),
    View("quiz", "Quiz", quiz.render),
    View("evolution", "Training evolution", evolution.render),
    View("experiments", "Experiments", experiments.render),
    View("attribution", "Word sources", attribution.render),
    View("train", "Train", train.render, about_the_sentence=False),
)
label = VIEWS.label
render = VIEWS.render


def choices(presenting: bool) -> list[str]:
    """The view picker's keys, the page's default first: presenter mode puts the view it opens on first."""
    keys = [key for key in VIEWS.keys() if presenting or not VIEWS[key].presenter_only]
    if presenting:
        keys.sort(key=lambda key: not VIEWS[key].opens_presenter)  # stable: the rest keep their order
    return keys
