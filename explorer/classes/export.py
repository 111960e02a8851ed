"""A class's questions and answers as CSV: one row per choice, for a spreadsheet."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone

from explorer.classes.store import AskedQuestion

CSV_COLUMNS = (
    "question",
    "asked_at_utc",
    "kind",
    "prompt",
    "choice",
    "students",
    "model_value",
    "value_label",
    "model_answer",
    "revealed",
)


def answers_csv(questions: list[tuple[AskedQuestion, list[int]]]) -> str:
    """A class's questions and their counts, one row per choice (``ClassStore.questions``'s result)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for number, (asked, counts) in enumerate(questions, start=1):
        question = asked.question
        when = datetime.fromtimestamp(asked.asked_at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        for index, choice in enumerate(question.choices):
            writer.writerow(
                [
                    number,
                    when,
                    question.kind,
                    _spreadsheet_safe(question.prompt),
                    _spreadsheet_safe(choice),
                    counts[index],
                    f"{question.model_values[index]:.4f}",
                    question.value_label,
                    "yes" if index == question.answer else "no",
                    "yes" if asked.revealed else "no",
                ]
            )
    return out.getvalue()


def _spreadsheet_safe(text: str) -> str:
    """Text a spreadsheet shows as text: a leading =, +, - or @ would make it a formula (CSV injection)."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@") else text
