"""Trace: everything one translation shows, as plain data (numpy arrays and strings).

A Trace can be cached (st.cache_data), saved to JSON or NPZ, compared, and drawn in a
notebook with the viz functions. Decoder attention rows are indexed by step: at step t the
decoder input is ``target_pieces[: t + 1]`` (BOS first) and the model predicts
``predicted_pieces[t]``.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model.heads import attention_modules

DEFAULT_TOP_K = 5  # next-token candidates a trace keeps per step, unless asked for more
ARRAY_FIELDS = ("step_probs", "topk_ids", "topk_probs")
DICT_ARRAY_FIELDS = ("attention", "positional", "embedding_norms")


@dataclass
class Trace:
    source_text: str
    source_ids: list[int]  # pieces + EOS, as the encoder saw them
    source_pieces: list[str]
    target_ids: list[int]  # BOS + output + EOS (when generated)
    target_pieces: list[str]
    translation: str
    step_probs: np.ndarray  # (T,) probability of the token chosen at each step
    topk_ids: np.ndarray  # (T, k) most likely next tokens at each step
    topk_probs: np.ndarray  # (T, k)
    topk_pieces: list[list[str]]
    attention: dict[str, np.ndarray]  # module name -> (heads, queries, keys)
    positional: dict[str, np.ndarray]  # module name -> (positions, d_model), the encoding added
    embedding_norms: dict[str, np.ndarray]  # "encoder"/"decoder" -> (positions,) |scaled token embedding|
    settings: dict[str, Any] = field(default_factory=dict)  # decoding mode, beam size, truncation, ...
    model_info: dict[str, Any] = field(default_factory=dict)  # layers, heads, d_model, checkpoint

    @property
    def n_steps(self) -> int:
        return len(self.target_ids) - 1

    @property
    def decoder_input_pieces(self) -> list[str]:
        """Queries of decoder attention: BOS and every output token but the last."""
        return self.target_pieces[:-1]

    @property
    def predicted_pieces(self) -> list[str]:
        return self.target_pieces[1:]

    def attention_names(self, kind: str) -> list[str]:
        """Module names of one kind ("encoder", "decoder" self-attention or "cross"), in layer order."""
        return attention_modules(self.attention, kind)

    def attention_stack(self, kind: str) -> np.ndarray:
        """(layers, heads, queries, keys) for "encoder", "decoder" or "cross"."""
        return np.stack([self.attention[n] for n in self.attention_names(kind)])

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            if name in ARRAY_FIELDS:
                data[name] = value.tolist()
            elif name in DICT_ARRAY_FIELDS:
                data[name] = {k: v.tolist() for k, v in value.items()}
            else:
                data[name] = value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        values = dict(data)
        values["step_probs"] = np.asarray(values["step_probs"], dtype=np.float32)
        values["topk_probs"] = np.asarray(values["topk_probs"], dtype=np.float32)
        values["topk_ids"] = np.asarray(values["topk_ids"], dtype=np.int64)
        for name in DICT_ARRAY_FIELDS:
            values[name] = {k: np.asarray(v, dtype=np.float32) for k, v in values[name].items()}
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Trace:
        return cls.from_dict(json.loads(text))

    def to_npz_bytes(self) -> bytes:
        """Arrays stored natively, everything else as one JSON string under "meta"."""
        arrays: dict[str, np.ndarray] = {name: getattr(self, name) for name in ARRAY_FIELDS}
        for group in DICT_ARRAY_FIELDS:
            for key, value in getattr(self, group).items():
                arrays[f"{group}/{key}"] = value
        meta = {k: v for k, v in self.__dict__.items() if k not in ARRAY_FIELDS and k not in DICT_ARRAY_FIELDS}
        meta["groups"] = {group: list(getattr(self, group)) for group in DICT_ARRAY_FIELDS}
        buffer = io.BytesIO()
        np.savez_compressed(buffer, meta=np.array(json.dumps(meta, ensure_ascii=False)), **arrays)
        return buffer.getvalue()

    @classmethod
    def from_npz(cls, source: bytes | str | Path) -> Trace:
        file = io.BytesIO(source) if isinstance(source, bytes) else source
        with np.load(file, allow_pickle=False) as npz:
            meta = json.loads(str(npz["meta"]))
            groups = meta.pop("groups")
            values = dict(meta)
            for name in ARRAY_FIELDS:
                values[name] = npz[name]
            for group, keys in groups.items():
                values[group] = {key: npz[f"{group}/{key}"] for key in keys}
        return cls(**values)
