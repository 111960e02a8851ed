"""A class question's answers: how many students chose each choice, and, once revealed, the model's own value for
each choice beside them, its answer marked."""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go

from model.analysis.questions import ClassQuestion
from viz.style import head_colour, shared_layout, white_figure
from viz.tokens import display_piece, display_text

CHOICE_ROW_PX = 34


def class_answers_figure(question: ClassQuestion, counts: Sequence[int], revealed: bool) -> go.Figure:
    """The class's answers per choice (bars, left); revealed, the model's ``value_label`` per choice (right) and its
    answer marked with ▶ on the choices' axis. Before the reveal nothing tells which choice the model made."""
    if len(counts) != len(question.choices):
        raise ValueError(f"{len(counts)} counts for {len(question.choices)} choices")
    plain = [choice_html(question, index) for index in range(len(question.choices))]
    labels = [
        f"<b>▶ {label}</b>" if revealed and index == question.answer else label for index, label in enumerate(plain)
    ]
    positions = list(range(len(labels)))
    total = sum(counts)
    panels = [
        {
            "type": "bar",
            "name": "the class",
            "x": list(counts),
            "y": positions,
            "orientation": "h",
            "marker": {"color": head_colour(0)},
            "customdata": plain,
            "hovertemplate": "%{customdata}<br>students: %{x}<extra></extra>",
        }
    ]
    layout = {
        "yaxis": {"tickmode": "array", "tickvals": positions, "ticktext": labels, "autorange": "reversed"},
        "xaxis": {"title": {"text": f"students ({total} answered)"}, "rangemode": "tozero"},
        "showlegend": False,
        **shared_layout(
            "The class's answers" + (" and the model's" if revealed else ""),  # HTML-safe as it stands
            120 + CHOICE_ROW_PX * len(labels),
        ),
    }
    if revealed:
        panels.append(
            {
                "type": "bar",
                "name": "the model",
                "x": list(question.model_values),
                "y": positions,
                "orientation": "h",
                "marker": {"color": head_colour(1)},
                "customdata": plain,
                "hovertemplate": f"%{{customdata}}<br>{html.escape(question.value_label)}: %{{x:.3f}}<extra></extra>",
                "xaxis": "x2",
                "yaxis": "y2",
            }
        )
        layout["xaxis"]["domain"] = [0.0, 0.46]
        layout["xaxis2"] = {
            "domain": [0.54, 1.0],
            "title": {"text": f"the model's {html.escape(question.value_label)}"},
        }
        layout["yaxis2"] = {
            "anchor": "x2",
            "tickmode": "array",
            "tickvals": positions,
            "ticktext": [""] * len(labels),
            "autorange": "reversed",
        }
    return white_figure(panels, layout)


def choice_text(question: ClassQuestion, index: int) -> str:
    """A choice as the page writes it (plain text): a token as the other views write one ("Hund", "·lärt")."""
    choice = question.choices[index]
    return display_text(choice) if question.kind == "next_word" else choice


def choice_html(question: ClassQuestion, index: int) -> str:
    """The same, HTML-safe, a special token in grey italics as on the heatmaps' axes."""
    if question.kind == "next_word":
        return display_piece(question.choices[index])
    return html.escape(question.choices[index])


def class_answers_rows(question: ClassQuestion, counts: Sequence[int], revealed: bool) -> list[tuple[str, str]]:
    """The same numbers as text rows (the handout's table, a screen reader's)."""
    rows = []
    for index, count in enumerate(counts):
        choice = choice_text(question, index)
        text = f"{count} student{'s' if count != 1 else ''}"
        if revealed:
            text += f"; the model's {question.value_label}: {question.model_values[index]:.3f}"
            if index == question.answer:
                text += " (the model's answer)"
        rows.append((choice, text))
    return rows
