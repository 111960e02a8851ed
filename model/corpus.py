"""Sentence files: one sentence a line, plain or gzipped. Below both model.training (corpora) and model.analysis
(model.analysis.domain's command reads validation and training sentences), so neither imports the other for it."""

from __future__ import annotations

import gzip
from pathlib import Path


def read_lines(path: str | Path) -> list[str]:
    """One sentence a line; ``.gz`` files are decompressed; trailing newlines removed."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]
