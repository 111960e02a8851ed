"""Fixtures the browser tests share."""

from __future__ import annotations

import pytest

from tests.browser_helpers import streamlit_server


@pytest.fixture(scope="module")
def server(browser_ready, tiny_checkpoint, tmp_path_factory):
    """The app served from a folder holding only the tiny test checkpoint (one server per test module)."""
    with streamlit_server(tiny_checkpoint.parent, tmp_path_factory.mktemp("streamlit-log")) as url:
        yield url
