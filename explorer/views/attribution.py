"""Where does this word come from? One output word's source shares by attribution method, the whole map, and how
much of each output word came from the source rather than from the words already written (ALTI+)."""

from __future__ import annotations

import streamlit as st

import viz
from explorer.compute import compute_attribution
from explorer.context import PageContext
from explorer.state import bind, presenting
from explorer.widgets import how_to_read, show_figure
from explorer.wording import ATTRIBUTION_NAMES, alti_fallback_notice
from model.analysis.attribution import ATTRIBUTION_METHODS, attributions_json, attributions_npz
from viz.tokens import display_text


def unique_labels(words: list[str]) -> list[str]:
    """A button label per output word: a word that occurs again gets its count ("a", "a (2)"), as buttons with the
    same label would be one button."""
    seen: dict[str, int] = {}
    labels = []
    for word in words:
        seen[word] = seen.get(word, 0) + 1
        labels.append(word if seen[word] == 1 else f"{word} ({seen[word]})")
    return labels


def render(ctx: PageContext) -> None:
    """Pick an output word (its button); each method's source shares for it side by side, then every word's."""
    explanation = how_to_read("attribution")
    trace, token_style = ctx.trace, ctx.token_style
    outputs = viz.attention_axes(trace, "cross").query_pieces  # the token each step wrote
    steps = list(range(len(outputs)))
    bind("attribution_step", options=steps)
    labels = unique_labels([display_text(piece) for piece in outputs])
    step = st.segmented_control(
        "Output word", steps, format_func=labels.__getitem__, required=True, key="attribution_step"
    )
    found = {ATTRIBUTION_NAMES[method]: compute_attribution(ctx.trace_key, method) for method in ATTRIBUTION_METHODS}
    word = labels[step]
    show_figure(
        viz.attribution_rows(
            {name: attribution.source[step] for name, attribution in found.items()},
            trace.source_pieces,
            **token_style.without_numbers(),
            title=f"Where “{word}” (step {step + 1}) comes from",
        ),
        f"{ctx.file_stem}-attribution-step{step}",
        ctx.handout.view,
        explanation,
    )
    show_figure(
        viz.attribution_maps(
            {name: attribution.source for name, attribution in found.items()},
            outputs,
            trace.source_pieces,
            **token_style.without_numbers(),
            title="Every output word",
        ),
        f"{ctx.file_stem}-attribution-map",
        ctx.handout.view,
    )
    alti = found[ATTRIBUTION_NAMES["alti_plus"]]
    show_figure(
        viz.source_share_figure(outputs, alti.source.sum(axis=1), title="Source or own words? (ALTI+)"),
        f"{ctx.file_stem}-attribution-source-share",
        ctx.handout.view,
    )
    fallback = alti_fallback_notice(alti.params.get("fallback_rows", {}))
    if fallback:
        st.caption(fallback)
    if not presenting():  # presenter mode hides every download
        attributions = list(found.values())
        as_json, as_npz = st.columns(2)
        as_json.download_button(  # the files are written only when a button is clicked (deferred data)
            "Download the trace with its attributions (JSON)",
            lambda: attributions_json(trace, attributions),
            f"{ctx.file_stem}-attributions.json",
            "application/json",
            on_click="ignore",
        )
        as_npz.download_button(
            "Download the trace with its attributions (NPZ)",
            lambda: attributions_npz(trace, attributions),
            f"{ctx.file_stem}-attributions.npz",
            "application/octet-stream",
            on_click="ignore",
        )
