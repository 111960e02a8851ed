"""The page under AppTest: how to read what it drew (charts, components, tables, the tokenization)."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest

# --- the page under AppTest ---


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


def open_details(app: AppTest) -> AppTest:
    """The page with its folded "Tokenization and how sure the model was of each token" section open (its table
    and probability chart are drawn only then): opened and rerun, unless it already is."""
    if not ("details" in app.session_state and app.session_state["details"]):
        app.session_state["details"] = True
        app.run()
    return app


def shown_tokenization(app: AppTest) -> dict[str, list[str]]:
    """The page's tokenization table (viz.tokenization_table drawn by st.html) as the browser reads its cells:
    row name ("piece", "id") -> cell texts, entities decoded."""
    tables = [read_table(element.proto.body) for element in app.get("html")]
    tokenization = [table for table in tables if table.caption.startswith("Tokenization")]
    assert len(tokenization) == 1, f"{len(tokenization)} tokenization tables"
    _, *rows = tokenization[0].rows  # the first row names the positions
    return {row[0][2]: [text for _, _, text in row[1:]] for row in rows}


class TableReader(HTMLParser):
    """The cells of an HTML table as (tag, scope, text), row by row, and its caption."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, str | None, str]]] = []
        self.caption = ""
        self._cell: tuple[str, str | None] | None = None
        self._text = ""
        self._in_caption = False

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td"):
            self._cell, self._text = (tag, dict(attrs).get("scope")), ""
        elif tag == "caption":
            self._in_caption = True

    def handle_endtag(self, tag):
        if tag in ("th", "td"):
            self.rows[-1].append((*self._cell, self._text))
            self._cell = None
        elif tag == "caption":
            self._in_caption = False

    def handle_data(self, data):
        if self._cell is not None:
            self._text += data
        elif self._in_caption:
            self.caption += data


def read_table(markup: str) -> TableReader:
    reader = TableReader()
    reader.feed(markup)
    return reader


def plotly_array(value) -> np.ndarray:
    """An array from a figure's JSON: a list, or plotly's base64 typed array {"dtype", "bdata", "shape"}."""
    if isinstance(value, dict):
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return flat.reshape([int(n) for n in str(value.get("shape", flat.size)).split(",")])
    return np.asarray(value, dtype=float)
