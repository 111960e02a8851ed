"""Trace: everything one translation shows, as plain data (numpy arrays and strings).

A Trace can be cached (st.cache_data), saved to JSON or NPZ, compared, and drawn in a
notebook with the viz functions. Decoder attention rows are indexed by step: at step t the
decoder input is ``target_pieces[: t + 1]`` (BOS first) and the model predicts
``predicted_pieces[t]``.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from model.decoding.sampling import Sampling
from model.decoding.scoring import Scoring
from model.heads import attention_modules

DEFAULT_TOP_K = 5  # next-token candidates a trace keeps per step, unless asked for more
ARRAY_FIELDS = ("step_probs", "topk_ids", "topk_probs")
DICT_ARRAY_FIELDS = ("attention", "positional", "embedding_norms")
# forced: teacher forcing, the output given rather than searched; sampling: each token drawn (TraceSettings.sampling)
DECODING_MODES = ("greedy", "beam", "sampling", "forced")


@dataclass(frozen=True)
class TraceSettings:
    """What a trace asked for: how the output was found (searched, or given) and how much of each step it keeps."""

    mode: str = "greedy"  # one of DECODING_MODES
    beam_size: int = 1
    max_new_tokens: int | None = None  # the output limit asked for; None: the model's own
    top_k: int = DEFAULT_TOP_K
    target: str | None = None  # teacher forcing's output as text
    prefix: str | None = None  # the output's forced start as text
    target_ids: list[int] | None = None  # teacher forcing's output ids (BOS left out)
    prefix_ids: list[int] = field(default_factory=list)  # the output's forced start (BOS left out)
    scoring: Scoring | None = None  # how the search ranked and stopped; None: ours (scoring.GNMT_SCORING)
    sampling: Sampling | None = None  # mode "sampling": how each token was drawn
    # a many-language model's (mBART-50, M2M100, NLLB) source and target language codes; the target's code is the
    # output's first token, forced (it is the first of prefix_ids or target_ids)
    source_language: str | None = None
    target_language: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in DECODING_MODES:
            raise ValueError(f"mode must be one of {DECODING_MODES}, not {self.mode!r}")
        if (self.mode == "sampling") != (self.sampling is not None):
            raise ValueError("a sampled trace records its Sampling, and only a sampled trace does")

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "scoring": self.scoring.to_dict() if self.scoring else None,
            "sampling": self.sampling.to_dict() if self.sampling else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceSettings:
        """From to_dict's output, or from the settings of a trace saved before the output limit was renamed."""
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        if "max_len" in data and "max_new_tokens" not in data:
            values["max_new_tokens"] = data["max_len"]
        if data.get("scoring"):
            values["scoring"] = Scoring.from_dict(data["scoring"])
        if data.get("sampling"):
            values["sampling"] = Sampling.from_dict(data["sampling"])
        values["prefix_ids"] = list(values.get("prefix_ids") or [])
        return cls(**values)


@dataclass(frozen=True)
class Fork:
    """What-if decoding's forced choice (Translator.fork): at ``step`` the tokens ``token_ids`` were written in place
    of the model's, and the model went on from there."""

    step: int
    token_ids: list[int]
    pieces: list[str]
    notice: str | None  # e.g. a typed word that is several pieces, all forced
    original_target_ids: list[int]


# Where a trace saved before TraceOutcome kept an experiment's record, and the experiment's name.
FORMER_EXPERIMENT_KEYS = {"ablation": "ablation", "positional_experiment": "word_order"}


@dataclass
class TraceOutcome:
    """What happened while tracing, as opposed to what was asked (TraceSettings)."""

    truncated: bool = False  # the source had more pieces than the model's positions hold, and was cut
    source_pieces_before_truncation: int = 0
    cut_off: bool = False  # the output reached its limit before the model wrote EOS: it may be unfinished
    notice: str | None = None  # e.g. the GPU ran out of memory and the CPU ran it
    fork: Fork | None = None  # a what-if trace's forced choice
    beam_node: int | None = None  # a beam-tree node's trace: the node
    # an experiment that changed the model or the input for this trace: its name ("ablation", "word_order") and
    # choices, e.g. {"name": "ablation", "heads": [...], "mode": "zero"}
    experiment: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceOutcome:
        """From to_dict's output, or from the settings of a trace saved when what happened was kept there."""
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        if data.get("fork"):
            values["fork"] = Fork(**data["fork"])
        for key, name in FORMER_EXPERIMENT_KEYS.items():
            if data.get(key) and not values.get("experiment"):
                values["experiment"] = {"name": name, **data[key]}
        return cls(**values)


@dataclass
class Trace:
    """One translation's steps: tokens, probabilities, every head's attention and the positional encodings."""

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
    embedding_norms: dict[str, np.ndarray]  # stack ("encoder"/"decoder") -> (positions,) |scaled token embedding|
    settings: TraceSettings = field(default_factory=TraceSettings)  # what was asked
    outcome: TraceOutcome = field(default_factory=TraceOutcome)  # what happened
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
        """Module names of one kind ("encoder_self", "decoder_self" or "cross"), in layer order."""
        return attention_modules(self.attention, kind)

    def attention_stack(self, kind: str) -> np.ndarray:
        """(layers, heads, queries, keys) for "encoder_self", "decoder_self" or "cross"."""
        return np.stack([self.attention[n] for n in self.attention_names(kind)])

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            if name in ARRAY_FIELDS:
                data[name] = value.tolist()
            elif name in DICT_ARRAY_FIELDS:
                data[name] = {k: v.tolist() for k, v in value.items()}
            elif name in ("settings", "outcome"):
                data[name] = value.to_dict()
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
        return cls(**typed_settings(values))

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
        meta = {k: v for k, v in self.to_dict().items() if k not in ARRAY_FIELDS and k not in DICT_ARRAY_FIELDS}
        meta["groups"] = {group: list(getattr(self, group)) for group in DICT_ARRAY_FIELDS}
        buffer = io.BytesIO()
        # the array names are field names and "group/key" paths, so none is taken for savez's allow_pickle
        np.savez_compressed(buffer, meta=np.array(json.dumps(meta, ensure_ascii=False)), **arrays)  # type: ignore[arg-type]
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
        return cls(**typed_settings(values))


def typed_settings(values: dict[str, Any]) -> dict[str, Any]:
    """A saved trace's fields with its settings and outcome typed. A trace saved before TraceOutcome existed kept
    both in one ``settings`` dict: what happened is read from there."""
    settings = values.get("settings") or {}
    outcome = values.get("outcome", settings)
    return {**values, "settings": TraceSettings.from_dict(settings), "outcome": TraceOutcome.from_dict(outcome or {})}
