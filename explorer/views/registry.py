"""What a view is: a key (its URL value), a label (its button), and a function that draws it from the context;
and a Registry, the views of one picker in order (the page's views, the experiments)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from explorer.context import PageContext


@dataclass(frozen=True)
class View:
    key: str
    label: str
    render: Callable[[PageContext], None]
    # The view presenter mode opens on (the decoding steps: the presentation starts at its first step).
    opens_presenter: bool = False
    # False for a view that is not about the sentence (the Train view): the page leaves out its translation
    about_the_sentence: bool = True
    # True for the view of a box of Figure 1 (an attention kind, the embedding, Add & Norm, ...): the map of the
    # model is drawn beside it and marks it
    on_the_map: bool = False
    # True for a view only presenter mode offers (the map alone, large, for the projector)
    presenter_only: bool = False


class Registry:
    """Views in their picker's order, looked up by key: iterate it for the views, ``keys()`` for the picker's options,
    ``label`` for its format_func and ``render`` to draw the one chosen."""

    def __init__(self, *views: View) -> None:
        self._by_key = {view.key: view for view in views}

    def __iter__(self) -> Iterator[View]:
        return iter(self._by_key.values())

    def __getitem__(self, key: str) -> View:
        return self._by_key[key]

    def keys(self) -> list[str]:
        return list(self._by_key)

    def label(self, key: str) -> str:
        return self[key].label

    def render(self, key: str, ctx: PageContext) -> None:
        self[key].render(ctx)
