"""One benchmark result: a measured value, the baseline it is compared with, and a reported target.

Targets are reported (``met``), never asserted: a slow machine or a busy one must not make
the harness fail, and the ratio against a baseline measured in the same run is the number
that carries over between machines.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field
from typing import Any

OPERATORS = {"<=": operator.le, ">=": operator.ge}


@dataclass(frozen=True)
class Check:
    """A condition on ``value``, ``ratio`` or a number in the record's params, e.g. Check("ratio", "<=", 1.3) or
    Check("errors", "<=", 0)."""

    on: str  # "value", "ratio", or a key of the record's params
    op: str  # "<=" or ">="
    limit: float

    def __post_init__(self) -> None:
        if not self.on or self.op not in OPERATORS:
            raise ValueError(f"bad check {self}")

    def holds(self, value: float, ratio: float, params: dict[str, Any] | None = None) -> bool:
        measured = value if self.on == "value" else ratio if self.on == "ratio" else (params or {})[self.on]
        return OPERATORS[self.op](measured, self.limit)

    def text(self, unit: str) -> str:
        return f"{self.on} {self.op} {self.limit:g}" + (f" {unit}" if self.on == "value" else "")


@dataclass
class Record:
    """One row of the results: ``ratio`` is always ``value / baseline``."""

    name: str
    value: float
    unit: str
    baseline: float
    checks: tuple[Check, ...]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("nan")

    @property
    def target(self) -> str:
        return " and ".join(check.text(self.unit) for check in self.checks) or "none (figure reported)"

    @property
    def met(self) -> bool | None:
        """None when there is no target to meet."""
        if not self.checks:
            return None
        return all(check.holds(self.value, self.ratio, self.params) for check in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "target": self.target,
            "met": self.met,
            "params": self.params,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, default=_jsonable)


def _jsonable(value: Any) -> Any:
    """numpy scalars, tuples of paths and the like, as plain JSON."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _number(value: float) -> str:
    if value != value:  # NaN
        return "nan"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if magnitude >= 0.01 else f"{value:.2g}"


def table(records: list[Record]) -> str:
    """Fixed-width text table: name, case, value, baseline, ratio, target, met."""
    header = ("benchmark", "case", "value", "baseline", "ratio", "target", "met")
    rows = [
        (
            record.name,
            str(record.params.get("case", "")),
            f"{_number(record.value)} {record.unit}",
            f"{_number(record.baseline)} {record.unit}",
            _number(record.ratio),
            record.target,
            {True: "yes", False: "NO", None: "-"}[record.met],
        )
        for record in records
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
