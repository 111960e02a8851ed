"""Property-based tests over text -> tokens -> trace -> figures (hypothesis, derandomized).

CI runs the "ci" profile (1,000 generated inputs); ``HYPOTHESIS_PROFILE=long`` runs 20,000
(see benchmarks/README.md for the documented longer run).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.helpers import OWN_MARKUP
from viz import attention_axes, attention_heatmap, decoding_step, step_attention

settings.register_profile(
    "ci", max_examples=1000, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "long", max_examples=20_000, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=50, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ANY_CHARACTER = st.characters(exclude_categories=())  # includes control characters and lone surrogates
TEXTS = st.one_of(
    st.text(ANY_CHARACTER, max_size=40),
    st.lists(
        st.sampled_from(["a", "man", "<b>", "<script>", "▁", "&amp;", "dog", "ü", "🐕", " ", "\u200b"]), max_size=20
    ).map(" ".join),
)


def figure_strings(figure) -> list[str]:
    """Every label, hover text and template in a figure, as the browser would receive them."""
    found: list[str] = []

    def walk(value) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads(figure.to_json()))
    return found


@pytest.mark.slow  # 1,000 generated inputs, each traced and drawn
@given(text=TEXTS, merge_words=st.booleans(), show_special=st.booleans())
@example(text="a \ud800 dog", merge_words=False, show_special=True)  # a lone surrogate: no browser sends one
def test_text_to_trace_to_figures(translator, text, merge_words, show_special):
    trace = translator.trace(text, beam_size=1, max_new_tokens=4, top_k=3)
    assert trace.to_json().encode("utf-8")  # the trace holds the text as the model read it: it saves as any other
    config = translator.config
    assert len(trace.source_pieces) == len(trace.source_ids) <= config.max_len
    assert trace.source_ids[-1] == config.eos_id and trace.target_ids[0] == config.bos_id
    for kind in ("encoder_self", "decoder_self", "cross"):
        stack = attention_axes(trace, kind).stack
        assert np.isfinite(stack).all()
        np.testing.assert_allclose(stack.sum(-1), 1.0, atol=1e-5)

    axes = attention_axes(trace, "cross")
    figure = attention_heatmap(
        axes.stack[0, 0],
        axes.query_pieces,
        axes.key_pieces,
        merge_words=merge_words,
        show_special=show_special,
        title=trace.source_text,
    )
    heatmap = figure.data[0]
    rows, columns = np.asarray(heatmap.z).shape if heatmap.z is not None and len(heatmap.z) else (0, 0)
    assert rows <= len(axes.query_pieces) and columns <= len(axes.key_pieces)
    step = decoding_step(trace, 0, layer=0)
    for built in (
        figure,
        step_attention(step.cross_rows, trace.source_pieces, merge_words=merge_words, show_special=show_special),
    ):
        for value in figure_strings(built):
            leftover = OWN_MARKUP.sub("", value)
            assert "<" not in leftover and ">" not in leftover, f"unescaped markup in figure text: {value!r}"
