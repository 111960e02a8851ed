"""What the AppTest suites share: where the page is, and how to read what it drew."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
CHECKPOINTS_ENV = "ATTENTION_EXPLORER_CHECKPOINTS"  # the folder app.py lists checkpoints from


def assert_ok(app: AppTest) -> None:
    assert not app.exception, [error.value for error in app.exception]


def chart_specs(app: AppTest) -> list[dict]:
    """Every plotly chart on the page, as the JSON sent to the browser."""
    return [json.loads(chart.proto.spec) for chart in app.get("plotly_chart")]


def chart_titles(app: AppTest) -> list[str]:
    return [spec["layout"]["title"]["text"] for spec in chart_specs(app)]


def chart_titled(app: AppTest, start: str) -> dict:
    """The one chart whose title starts with ``start``."""
    matches = [spec for spec in chart_specs(app) if spec["layout"]["title"]["text"].startswith(start)]
    assert len(matches) == 1, chart_titles(app)
    return matches[0]


def component_data(app: AppTest, name: str) -> dict:
    """The data the page gave its one st.components.v2 component ``name`` (AppTest does not run its JavaScript)."""
    found = [element.proto for element in app.get("bidi_component") if element.proto.component_name == name]
    assert len(found) == 1, [element.proto.component_name for element in app.get("bidi_component")]
    return json.loads(found[0].json)


def plotly_array(value) -> np.ndarray:
    """An array from a figure's JSON: a list, or plotly's base64 typed array {"dtype", "bdata", "shape"}."""
    if isinstance(value, dict):
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return flat.reshape([int(n) for n in str(value.get("shape", flat.size)).split(",")])
    return np.asarray(value, dtype=float)
