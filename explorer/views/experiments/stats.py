"""Head statistics: one statistic of every head as a layers × heads panel per attention kind, and a sortable table."""

from __future__ import annotations

from typing import Any

import streamlit as st

import viz
from explorer.admission import shared_gate
from explorer.compute import sentence_statistics, trace_statistics
from explorer.context import PageContext
from explorer.state import STATS_SOURCES, bind, presenting
from explorer.widgets import how_to_read, show_figure
from explorer.wording import STATS_SOURCE_NAMES, escape_markdown, file_cap_notice
from model.analysis.head_stats import STATISTICS, mean_head_statistics, sentences_from_text
from viz.head_stats import STATISTIC_LABELS

# A shared classroom server computes an uploaded file's sentences one by one; more would hold it up.
MAX_FILE_SENTENCES = 100


def file_statistics(ctx: PageContext) -> list[dict[str, Any]] | None:
    """The statistics table over an uploaded file's sentences (at most MAX_FILE_SENTENCES), with progress."""
    upload = st.file_uploader("A text file, one sentence per line", type=["txt"], key="stats_file")
    if upload is None:
        st.info("Upload a text file (UTF-8, one sentence per line) to average the statistics over its sentences.")
        return None
    try:
        sentences = sentences_from_text(upload.getvalue(), source=upload.name)
    except ValueError as error:
        st.error(escape_markdown(str(error)))
        return None
    used = sentences[:MAX_FILE_SENTENCES]
    if len(used) < len(sentences):
        st.warning(file_cap_notice(len(sentences), len(used)))
    progress = st.progress(0.0, text="Translating the file's sentences…")
    tables = []
    for done, sentence in enumerate(used, start=1):
        shared_gate().pass_turn()  # a long file lets other sessions' runs in between, not after it all
        tables.append(sentence_statistics(ctx.trace_key.with_text(sentence)))
        progress.progress(done / len(used), text=f"Sentence {done} of {len(used)}")
    progress.empty()
    st.caption(f"Mean over {len(used)} sentences of {escape_markdown(upload.name)}, each translated by the model.")
    return mean_head_statistics(tables)


def render(ctx: PageContext) -> None:
    explanation = how_to_read("head_stats")
    bind("stats_source")
    bind("statistic")
    pick_source, pick_statistic = st.columns(2)
    source = pick_source.segmented_control(
        "Over", STATS_SOURCES, format_func=STATS_SOURCE_NAMES.get, required=True, key="stats_source"
    )
    statistic = pick_statistic.selectbox(
        "Statistic", list(STATISTICS), format_func=STATISTIC_LABELS.get, key="statistic"
    )
    table = trace_statistics(ctx.trace_key) if source == "sentence" else file_statistics(ctx)
    if table is None:
        return
    show_figure(
        viz.head_stats_heatmap(table, statistic, stacked=presenting()),
        f"{ctx.file_stem}-stats-{source}-{statistic}",
        ctx.handout.view,
        explanation,
    )
    st.dataframe(
        viz.head_stats_frame(table),
        hide_index=True,
        width="stretch",
        column_config={label: st.column_config.NumberColumn(format="%.3f") for label in STATISTIC_LABELS.values()},
    )
