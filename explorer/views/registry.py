"""What a view is: a key (its URL value), a label (its button), and a function that draws it from the context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from explorer.context import PageContext


@dataclass(frozen=True)
class View:
    key: str
    label: str
    render: Callable[[PageContext], None]
    # The view presenter mode opens on (the decoding steps: the lesson starts at its first step).
    opens_presenter: bool = False
