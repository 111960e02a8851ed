"""The lecture-hall load benchmark (benchmarks/proxy_load.py): a class of websocket sessions edits every sentence it
was given and reports sessions that fail as errors, not as a crash. The timings themselves are not asserted."""

from __future__ import annotations

import pytest

from benchmarks.proxy_load import class_of
from benchmarks.server import free_port
from tests.browser_helpers import streamlit_server


def test_sessions_that_cannot_connect_are_each_reported_as_an_error():
    latencies, errors, _, _ = class_of(f"http://127.0.0.1:{free_port()}", [["a man."], ["a dog."], ["a cat."]])
    assert latencies == []
    assert len(errors) == 3 and all("refused" in error.lower() for error in errors)


@pytest.mark.slow
def test_every_session_times_every_edit_of_its_own(tiny_checkpoint, tmp_path):
    sentences = [["a man rides a bike.", "a dog plays in the snow."], ["two women walk in the park."]]
    with streamlit_server(tiny_checkpoint.parent, tmp_path) as url:
        clock = iter([10.0, 12.5])
        latencies, errors, open_s, cpu = class_of(url, sentences, lambda: next(clock))
    assert errors == []
    assert len(latencies) == 3 and all(latency > 0 for latency in latencies)
    assert open_s > 0 and cpu == 2.5  # read once when every page is open, once when every edit is done
