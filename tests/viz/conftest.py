"""Fixtures of the viz tests: the trace test_viz.py and test_style.py draw (module-scoped: each module its own)."""

from __future__ import annotations

import pytest

from model import load_checkpoint
from tests.helpers import SENTENCE


@pytest.fixture(scope="module")
def trace(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint, device="cpu").trace(SENTENCE, beam_size=1, max_new_tokens=8)
