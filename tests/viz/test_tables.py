"""Every figure's text alternative (viz.tables): the tables hold the figure's own numbers under its own labels, the
description names what is shown, and no text from the user becomes markup."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

import viz
from tests.app_helpers import read_table
from tests.helpers import HOSTILE
from viz.tables import MISSING, cell_text, describe, figure_tables, table_html

SOURCE = ["▁A", "▁dog", "▁runs", "</s>"]
TARGET = ["<s>", "▁Ein", "▁Hund", "▁läuft", "</s>"]


def weights(rows: int, columns: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(columns), size=rows)


def test_a_heatmaps_table_holds_its_weights_under_its_token_labels():
    attention = weights(len(TARGET), len(SOURCE))
    figure = viz.attention_heatmap(attention, TARGET, SOURCE, title="Decoder layer 0 – cross-attention – head 1")
    [table] = figure_tables(figure)
    assert table.caption == "Decoder layer 0 – cross-attention – head 1"
    assert table.rows == ["<s>", "Ein", "Hund", "läuft", "</s>"]  # the axis labels, grey markup taken off
    assert table.columns == ["A", "dog", "runs", "</s>"]
    np.testing.assert_array_equal(np.array(table.values, dtype=float), attention)


def test_the_html_table_has_headers_with_scope_and_the_shown_numbers():
    attention = weights(len(TARGET), len(SOURCE), seed=1)
    figure = viz.attention_heatmap(attention, TARGET, SOURCE, title="one head")
    reader = read_table(table_html(figure_tables(figure)[0]))
    assert reader.caption == "one head"
    header, *body = reader.rows
    assert [(tag, scope) for tag, scope, _ in header] == [("th", "col")] * (len(SOURCE) + 1)
    assert [text for _, _, text in header[1:]] == ["A", "dog", "runs", "</s>"]
    for row, expected in zip(body, attention, strict=True):
        assert row[0][:2] == ("th", "row")
        assert [float(text) for _, _, text in row[1:]] == [float(cell_text(value)) for value in expected]


def test_user_text_stays_text_in_tables_and_descriptions():
    pieces = [HOSTILE, "</s>"]
    figure = viz.attention_heatmap(weights(2, 2), pieces, pieces, title=HOSTILE)
    markup = table_html(figure_tables(figure)[0])
    assert "<script>" not in markup and "<b>" not in markup
    reader = read_table(markup)
    assert reader.caption == HOSTILE
    shown = html.unescape(viz.display_piece(HOSTILE))  # as the axes show it, as text
    assert reader.rows[0][1][2] == shown  # a column
    assert reader.rows[1][0][2] == shown  # a row
    assert describe(figure).startswith(HOSTILE)  # plain text: the page escapes it as Markdown


def test_every_panel_of_the_all_heads_grid_is_a_table_named_by_layer_and_head():
    stack = np.stack([np.stack([weights(3, 4, seed=layer * 2 + head) for head in range(2)]) for layer in range(2)])
    figure = viz.attention_grid(stack, TARGET[:3], SOURCE, title="All heads")
    tables = figure_tables(figure)
    assert [table.caption for table in tables] == [
        f"All heads: layer {layer}, head {head}"
        for layer in (1, 2)
        for head in (1, 2)  # counted from 1
    ]
    for table, (layer, head) in zip(tables, [(0, 0), (0, 1), (1, 0), (1, 1)], strict=True):
        np.testing.assert_array_equal(np.array(table.values, dtype=float), stack[layer, head])


def test_bars_and_lines_over_the_same_x_share_one_table():
    figure = go.Figure(
        [
            go.Bar(x=["a", "b", "c"], y=[0.5, 0.25, 0.25], name="with every head"),
            go.Bar(x=["a", "b", "c"], y=[0.1, None, 0.9], name="heads removed"),
            go.Scatter(x=[0, 1], y=[3.0, 4.0], name="other"),
        ],
        layout={"title": {"text": "Probabilities"}, "xaxis": {"title": {"text": "output token"}}},
    )
    first, second = figure_tables(figure)
    assert (first.row_header, first.rows, first.columns) == (
        "output token",
        ["a", "b", "c"],
        ["with every head", "heads removed"],
    )
    assert first.values == [[0.5, 0.1], [0.25, None], [0.25, 0.9]]
    assert second.rows == ["0", "1"] and second.values == [[3.0], [4.0]]
    assert MISSING in table_html(first)  # a gap stays visible as a gap


def test_the_description_names_the_chart_and_every_row_and_column():
    figure = viz.attention_heatmap(weights(len(TARGET), len(SOURCE)), TARGET, SOURCE, title="Encoder layer 1")
    line = describe(figure)
    assert line.startswith("Encoder layer 1: heatmap of 5 rows (")
    for label in ("Ein", "Hund", "läuft", "dog", "runs"):
        assert label in line
    bars = viz.token_probabilities(["▁Ein", "▁Hund"], [0.9, 0.5], title="Probability of each output token")
    assert describe(bars).startswith("Probability of each output token: bar chart")


def test_cells_show_three_decimals_and_gaps():
    assert [cell_text(v) for v in (0.95238, 1e-5, -0.5, None, float("nan"), 123456.0)] == [
        "0.952",
        "0.000",
        "-0.500",
        MISSING,
        MISSING,
        "1.235e+05",
    ]


def test_the_tokenization_table_shows_every_piece_and_id_as_text():
    """The page's tokenization table: a column per position, the pieces exactly as the tokenizer wrote them (markup
    and ▁ included) and their ids, every cell escaped."""
    pieces = ["▁A", HOSTILE, "&amp;", "</s>"]
    reader = read_table(table_html(viz.tokenization_table(pieces, [7, 0, 12, 2])))
    assert reader.caption.startswith("Tokenization")
    header, piece_row, id_row = reader.rows
    assert [text for _, _, text in header] == ["position", "0", "1", "2", "3"]
    assert piece_row == [("th", "row", "piece")] + [("td", None, piece) for piece in pieces]
    assert [text for _, _, text in id_row] == ["id", "7", "0", "12", "2"]


def test_horizontal_bars_give_a_row_per_bar_with_its_value():
    """The top-k bars lie on their side: each bar's token names a row and its probability is the value."""
    bars = viz.top_k_figure(["▁Ein", "▁Der", "</s>"], np.array([0.7, 0.2, 0.1]), 0, title="Step 1: next token")
    [table] = figure_tables(bars)
    assert table.rows == ["Ein", "Der", "</s>"] and table.columns == ["probability"]
    assert table.values == [[0.7], [0.2], [0.1]]
