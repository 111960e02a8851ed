"""An attribution as plain data (Attribution), and a trace saved with its attributions as JSON or NPZ."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model.trace import Trace

ATTRIBUTION_METHODS = ("attention", "value_norm", "grad_attention", "alti_plus")
NPZ_PREFIX = "attribution/"  # attributions_npz: the attributions' arrays, beside the trace's
NPZ_META = "attribution_meta"


@dataclass
class Attribution:
    """One method's attribution of a trace's output steps.

    ``source`` is (output steps, source pieces), each row summing to 1; a method that also gives
    ``target`` (output steps, decoder input pieces; else None) makes each row of the two together sum
    to 1. ``layers`` holds the method's per-layer (and per-head) detail by name, e.g. value_norm's "per_head":
    (decoder layers, heads, steps, source pieces); each method's docstring lists its own.
    """

    method: str
    source: np.ndarray
    target: np.ndarray | None = None
    params: dict[str, Any] = field(default_factory=dict)
    layers: dict[str, np.ndarray] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: arrays as nested lists."""
        return {
            "method": self.method,
            "source": self.source.tolist(),
            "target": None if self.target is None else self.target.tolist(),
            "params": self.params,
            "layers": {name: value.tolist() for name, value in self.layers.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attribution:
        return cls(
            data["method"],
            np.asarray(data["source"], dtype=np.float64),
            None if data["target"] is None else np.asarray(data["target"], dtype=np.float64),
            dict(data["params"]),
            {name: np.asarray(value, dtype=np.float64) for name, value in data["layers"].items()},
        )


def attributions_json(trace: Trace, attributions: Sequence[Attribution]) -> str:
    """The trace and its attributions as one JSON document: {"trace": Trace.to_dict(), "attributions": {method: ...}}
    (read back with Trace.from_dict and Attribution.from_dict)."""
    return json.dumps(
        {"trace": trace.to_dict(), "attributions": {found.method: found.to_dict() for found in attributions}},
        ensure_ascii=False,
    )


def attributions_npz(trace: Trace, attributions: Sequence[Attribution]) -> bytes:
    """The trace and its attributions as one NPZ file: the trace's arrays and "meta" as Trace.to_npz_bytes writes
    them (Trace.from_npz reads the file as it is); each attribution's arrays under "attribution/<method>/source",
    ".../target" and ".../layers/<name>", and what else it holds as JSON under "attribution_meta" (read back with
    attributions_from_npz)."""
    with np.load(io.BytesIO(trace.to_npz_bytes()), allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    meta = {}
    for found in attributions:
        prefix = f"{NPZ_PREFIX}{found.method}/"
        arrays[prefix + "source"] = found.source
        if found.target is not None:
            arrays[prefix + "target"] = found.target
        arrays.update({f"{prefix}layers/{name}": value for name, value in found.layers.items()})
        meta[found.method] = {"params": found.params, "target": found.target is not None, "layers": list(found.layers)}
    arrays[NPZ_META] = np.array(json.dumps(meta, ensure_ascii=False))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def attributions_from_npz(source: bytes | str | Path) -> dict[str, Attribution]:
    """The attributions attributions_npz saved, by method (the trace beside them: Trace.from_npz on the same file)."""
    file = io.BytesIO(source) if isinstance(source, bytes) else source
    with np.load(file, allow_pickle=False) as saved:
        meta = json.loads(str(saved[NPZ_META]))
        found = {}
        for method, entry in meta.items():
            prefix = f"{NPZ_PREFIX}{method}/"
            found[method] = Attribution(
                method,
                saved[prefix + "source"],
                saved[prefix + "target"] if entry["target"] else None,
                entry["params"],
                {name: saved[f"{prefix}layers/{name}"] for name in entry["layers"]},
            )
    return found
