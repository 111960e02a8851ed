"""A printable handout: the views of one sentence as a single self-contained HTML file.

plotly.js is written inline once, in the page's head, so the file opens and draws its charts
with no network at all (a classroom laptop, a USB stick, an e-mail attachment). Every text is
HTML-escaped; explanations may use the little Markdown the page's explanations use (bold,
italics, code, paragraphs). Print it from the browser: each section stays on one page.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; max-width: 1100px;
       margin: 2rem auto; padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2rem; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; }
table.rows { border-collapse: collapse; }
table.rows th, table.rows td { text-align: left; padding: 0.2rem 0.8rem 0.2rem 0; border-bottom: 1px solid #eee; }
section { margin-top: 2rem; border-top: 1px solid #ddd; padding-top: 0.5rem; }
.caveat { background: #fff8e1; border-left: 4px solid #f0b400; padding: 0.5rem 1rem; }
code { background: #f3f3f3; padding: 0 0.2em; }
@media print {
  body { margin: 0; max-width: none; }
  section { break-inside: avoid; page-break-inside: avoid; }
}
"""
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
# plotly's camera button writes one format (PNG), and a config in JSON cannot carry the JavaScript of a
# second button; so once plotly has drawn a chart, it is drawn again with an SVG button added (plotly's
# public Plotly.react and Plotly.downloadImage). The app's charts get theirs from
# explorer/components/svg_download.js.
SVG_BUTTON_SCRIPT = (
    "var chart = document.getElementById('{plot_id}');\n"
    "Plotly.react(chart, chart.data, chart.layout, Object.assign("
    + json.dumps(PLOTLY_CONFIG)
    + ", {modeBarButtonsToAdd: [{\n"
    "  name: 'Download plot as an SVG (vector, for slides)', icon: Plotly.Icons.camera,\n"
    "  click: function (gd) { Plotly.downloadImage(gd, {format: 'svg', filename: 'handout-chart'}); }\n"
    "}]}));"
)


@dataclass(frozen=True)
class HandoutSection:
    """One part of the handout: a heading, how to read it (Markdown subset), its chart and a table, each optional.

    ``rows`` are (label, text) pairs of plain text, e.g. a model's translation at each training stage.
    """

    title: str
    explanation: str = ""
    figure: go.Figure | None = None
    rows: Sequence[tuple[str, str]] = ()


def markdown_html(text: str) -> str:
    """The Markdown subset of the page's explanations as HTML: text escaped first, then **bold**, *italics*, `code`.

    Blank lines separate paragraphs. Anything else stays literal text.
    """
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    escaped = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", escaped)
    return "\n".join(f"<p>{paragraph.strip()}</p>" for paragraph in escaped.split("\n\n") if paragraph.strip())


def figure_html(figure: go.Figure) -> str:
    """One chart as a div and the script that draws it (with its SVG button), relying on plotly.js already
    on the page."""
    return pio.to_html(
        figure, full_html=False, include_plotlyjs=False, config=PLOTLY_CONFIG, post_script=SVG_BUTTON_SCRIPT
    )


def handout_html(
    title: str,
    sections: Sequence[HandoutSection],
    *,
    facts: Sequence[tuple[str, str]] = (),
    caveat: str = "",
) -> str:
    """The whole handout as one HTML document: title, facts (label, value: plain text), caveat, sections.

    The result has no external references: plotly.js is inlined, no fonts or images are fetched.
    """
    facts_html = "".join(f"<dt>{html.escape(label)}</dt><dd>{html.escape(value)}</dd>" for label, value in facts)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style>",
        f"<script>{plotly.offline.get_plotlyjs()}</script>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if facts:
        parts.append(f'<dl class="facts">{facts_html}</dl>')
    if caveat:
        parts.append(f'<div class="caveat">{markdown_html(caveat)}</div>')
    for section in sections:
        parts.append(f"<section><h2>{html.escape(section.title)}</h2>")
        parts.append(markdown_html(section.explanation))
        if section.figure is not None:
            parts.append(figure_html(section.figure))
        if section.rows:
            cells = "".join(
                f"<tr><th>{html.escape(label)}</th><td>{html.escape(text)}</td></tr>" for label, text in section.rows
            )
            parts.append(f'<table class="rows">{cells}</table>')
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)
