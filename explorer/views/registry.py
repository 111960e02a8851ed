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
    # Drawn above the view picker on a normal page (the decoding steps); a view of its own in presenter mode.
    always_shown: bool = False
