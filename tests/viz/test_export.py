"""The handout export (viz.export): one self-contained HTML file that draws its charts with no network.

The handout is the handout fixture (tests/conftest.py). tests/browser/test_export.py opens it, and the one the
page's download button gives, in headless Chromium.
"""

from __future__ import annotations

import html
import re

from tests.helpers import EXTERNAL_REFERENCE, HOSTILE
from viz.export import markdown_html


def test_the_file_is_self_contained(handout):
    document, sections = handout
    assert not EXTERNAL_REFERENCE.search(document)  # no script, style sheet, image or frame loaded from anywhere
    assert "plotly.js v" in document and document.count("<script>") == 1 + sum(s.figure is not None for s in sections)
    assert document.count("Plotly.newPlot(") == sum(section.figure is not None for section in sections)


def test_text_is_escaped_and_explanations_keep_their_emphasis(handout):
    document, _ = handout
    assert "<script>alert" not in document and "<b>b</b>" not in document
    assert f"<dd>{html.escape(HOSTILE)}</dd>" in document  # facts: literal text, no Markdown
    assert f"<th>untrained</th><td>{html.escape(HOSTILE)}</td>" in document  # table rows too
    assert "<strong>Cross-attention.</strong>" in document  # the explanation's **bold**
    assert "<em>reads from</em>" in document  # the caveat's *italics*
    assert [match.group(1) for match in re.finditer(r"<section><h2>(.*?)</h2>", document)][:3] == [
        "Probability of each output token",
        "Step 1",
        "Cross-attention",
    ]


def test_markdown_html_supports_only_the_explanations_subset():
    assert markdown_html("**a** and *b* and `c`\n\nnext") == (
        "<p><strong>a</strong> and <em>b</em> and <code>c</code></p>\n<p>next</p>"
    )
    assert markdown_html("2 * 3 * 4") == "<p>2 * 3 * 4</p>"  # spaced asterisks are not emphasis
    assert markdown_html("<i>x</i> [link](http://x)") == "<p>&lt;i&gt;x&lt;/i&gt; [link](http://x)</p>"
    assert markdown_html("") == ""
