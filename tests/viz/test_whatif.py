"""The what-if figures (viz.whatif): both translations with the fork marked, user text escaped. Forking itself is
tested in tests/model/test_whatif.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tests.helpers import SENTENCE
from tests.helpers import SHORT_MAX_LEN as MAX_LEN
from viz.whatif import fork_attention_figures, fork_tokens_figure


def test_fork_figures_show_both_translations_and_mark_the_fork(translator):
    original = translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN)
    forked = translator.fork(original, 2, "parks")
    forced = len(forked.outcome.fork.token_ids)
    tokens = fork_tokens_figure(original, forked, title="<b>what if</b>")
    heatmap = tokens.data[0]
    z = np.asarray(heatmap.z, dtype=float)
    np.testing.assert_allclose(z[0, : original.n_steps], original.step_probs, rtol=1e-6)
    np.testing.assert_allclose(z[1, : forked.n_steps], forked.step_probs, rtol=1e-6)
    frame = tokens.layout.shapes[0]
    assert (frame.x0, frame.x1) == (2 - 0.5, 2 + forced - 0.5)
    assert tokens.layout.title.text == "&lt;b&gt;what if&lt;/b&gt;"
    # steps counted from 1, as the steps view counts them: the fork at index 2 is step 3
    assert tokens.layout.annotations[0].text == "fork at step 3"
    assert list(tokens.layout.xaxis.ticktext[:3]) == ["1", "2", "3"]
    assert heatmap.customdata[1][2][2] == 3 and "step %{customdata[2]}" in heatmap.hovertemplate
    name = "decoder.layers.1.cross_attn"
    left, right = fork_attention_figures(original, forked, name, 3)
    np.testing.assert_allclose(np.asarray(left.data[0].z, dtype=float), original.attention[name][3], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(right.data[0].z, dtype=float), forked.attention[name][3], rtol=1e-6)
    assert right.layout.title.text.startswith("What if: step 3 → ")
    for figure in (left, right):
        assert (figure.layout.shapes[0].y0, figure.layout.shapes[0].y1) == (1.5, 2.5)  # row 2: the fork step
    self_left, self_right = fork_attention_figures(original, forked, "decoder.layers.0.self_attn", 0)
    assert np.asarray(self_right.data[0].z).shape == (forked.n_steps, forked.n_steps)


def test_fork_figures_escape_user_text(translator):
    original = translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN)
    forked = translator.fork(original, 1, 7)
    hostile = "\u2581<script>alert(1)</script>"
    forked.outcome.fork = replace(forked.outcome.fork, pieces=[hostile])
    forked.target_pieces = forked.target_pieces[:2] + [hostile] + forked.target_pieces[3:]
    _, right = fork_attention_figures(original, forked, "decoder.layers.0.cross_attn", 0)
    tokens = fork_tokens_figure(original, forked)
    assert "<script>" not in right.layout.title.text and "&lt;script&gt;" in right.layout.title.text
    assert not any("<script>" in str(label) for label in right.layout.yaxis.ticktext)
    assert not any("<script>" in str(text) for text in np.asarray(tokens.data[0].text).ravel())
