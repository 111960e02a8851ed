"""The checkpoint card, ``card.json``: what a checkpoint is, what it learned from, how it was made and how well it does.

``Card`` owns the card's schema. Every key the page or a tool reads is a typed field of ``Card`` or of one of its
sections (``TrainingRun``, ``SplitScores``, ``DomainSection``, ``ToyTaskSection``, ...). Reading a card checks the
type of every key it knows and refuses a wrong one with a ValueError naming the file and the key; every key it does
not know is kept as it was, so a tool that rewrites a card (``model.evaluate --card-split``,
``model.analysis.domain --card``, ``model.training.toy_tasks --card``) loses nothing, and the keys keep their order.
A JSON ``null`` is the same as a missing key.

To add a key, give the class that holds it a field with its JSON type (``str``, ``int``, ``float``, ``bool``,
``list[...]``, ``dict[str, ...]``, a section class, or a union of these) and the default ``None``: reading checks
it, and writing leaves it out while it is None (docs/architecture.md, "A card field").
"""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

CARD_FILE = "card.json"
SectionType = TypeVar("SectionType", bound="Section")


@dataclass(kw_only=True)
class Section:
    """A JSON object read into the typed fields of a dataclass; the keys it does not model are kept in ``extra``."""

    extra: dict[str, Any] = field(default_factory=dict)  # the keys this class does not model, as they were read
    order: tuple[str, ...] = field(default=(), repr=False, compare=False)  # every key, in the order it was read

    @classmethod
    def from_dict(cls: type[SectionType], data: Any, source: str = "card", key: str = "") -> SectionType:
        """Read ``data`` (a JSON object); ``source`` (the file) and ``key`` (the path to ``data`` in it) name the
        place in an error."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: {key or 'the card'}: expected an object, got {_short(data)}")
        hints = _schema(cls)
        values = {}
        for name, hint in hints.items():
            place = f"{key}.{name}" if key else name
            if data.get(name) is not None:
                values[name] = _check(data[name], hint, source, place)
            elif _required(cls, name):
                raise ValueError(f"{source}: {place}: missing")
        extra = {name: value for name, value in data.items() if name not in hints}
        return cls(**values, extra=extra, order=tuple(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the keys in the order they were read, then new ones (fields in their order, then
        ``extra``); a field that is None is left out."""
        known = {name: _dump(value) for name in _schema(type(self)) if (value := getattr(self, name)) is not None}
        read = [name for name in self.order if name in known or name in self.extra]
        keys = dict.fromkeys([*read, *known, *self.extra])
        return {name: known[name] if name in known else self.extra[name] for name in keys}


@dataclass(kw_only=True)
class HeadScore(Section):
    """One attention head and how well it matches a toy task's known alignment."""

    module: str  # "decoder.layers.1.cross_attn"
    head: int
    score: float | None = None


@dataclass(kw_only=True)
class ToyTaskSection(Section):
    """``toy_task``: how a toy checkpoint's data was drawn (model.training.toy_tasks --out) and what its check
    measured on held-out pairs (--check --card)."""

    task: str | None = None  # "copy", "reverse", "sort", "svo-sov"
    rule: str | None = None  # the rule in words
    seed: int | None = None
    sizes: dict[str, int] | None = None  # pairs per split: train, val, test
    lengths: dict[str, int] | str | None = None  # shortest, longest and symbols, or the lengths in words
    generator_command: str | None = None
    pattern: str | None = None  # the attention the task should show, in words
    held_out_pairs: int | None = None
    held_out_exact_match: float | None = None  # share of held-out inputs translated exactly right
    attention_pairs: int | None = None
    steps_on_expected_source_position: dict[str, list[float]] | None = None  # per module, per head
    clearest_head: HeadScore | None = None
    verb_step_on_verb: dict[str, list[float]] | None = None  # svo-sov only
    clearest_verb_head: HeadScore | None = None  # svo-sov only
    measured_with: str | None = None


@dataclass(kw_only=True)
class DomainSection(Section):
    """``domain``: what the model learned from, and the thresholds of the page's out-of-domain notice."""

    name: str | None = None  # "image captions"
    description: str | None = None
    training_sentences: int | None = None
    examples: list[str] | None = None
    calibration: dict[str, Any] | None = None  # model.analysis.domain.calibrate's thresholds (that module reads them)


@dataclass(kw_only=True)
class SplitScores(Section):
    """The scores of one split (``scores.SPLIT``), as model.evaluate --card-split writes them."""

    bleu: float | None = None
    bleu_lowercase: float | None = None
    chrf: float | None = None
    beam_size: int | None = None
    length_penalty: float | None = None
    sentences: int | None = None
    signatures: dict[str, str] | None = None  # sacreBLEU's, per metric
    src: str | None = None
    ref: str | None = None
    device: str | None = None


@dataclass(kw_only=True)
class TrainingRun(Section):
    """One record of ``history``: a training run (python -m model.train) or an average (model.training.average)."""

    command: str | None = None
    resumed_with: list[str] | None = None  # the commands of its --resume sessions
    init_from: str | None = None  # the checkpoint it continued
    epochs: int | None = None
    steps: int | None = None
    averaged_epochs: list[str] | None = None
    final_weights: str | None = None
    stopped: str | None = None
    wall_time_s: float | None = None
    hardware: str | None = None
    valid_bleu_greedy: float | None = None
    scores: dict[str, SplitScores] | None = None
    averaged_from: list[str] | None = None  # an average's checkpoints


@dataclass(kw_only=True)
class BestEpoch(Section):
    """``best_single_epoch``: the epoch whose weights validated best, alone."""

    epoch: int
    valid_bleu_greedy: float


@dataclass(kw_only=True)
class InitialWeights(Section):
    """``initial_weights``: an untrained model stored as its seed; the weights' digest checks the rebuild."""

    seed: int
    dtype: str | None = None
    sha256: str


@dataclass(kw_only=True)
class Card(Section):
    """A checkpoint's card.json (module docstring: the schema, and how to add a key).

    The fields come in the order python -m model.train writes them; a card read from a file keeps the file's order.
    """

    source_language: str | None = None
    target_language: str | None = None
    data: dict[str, str] | str | None = None  # a training run's files, or the data in words
    snapshot: str | None = None  # a snapshot folder's training stage: "untrained", "early", "final"
    step: int | None = None  # a snapshot's optimisation steps
    averaged_epochs: list[str] | None = None
    final_weights: str | None = None  # which weights the checkpoint holds, in words
    valid_loss: float | None = None
    valid_bleu_greedy: float | None = None  # greedy BLEU on the training run's validation pairs
    best_single_epoch: BestEpoch | None = None
    stopped: str | None = None  # what ended the last training session
    train_command: str | None = None  # every command that made the weights, in order
    hardware: str | None = None
    wall_time_s: float | None = None
    config: dict[str, Any] | None = None  # config.json's content; config.json is what loading reads
    history: list[TrainingRun] | None = None  # every run that made these weights, oldest first
    parameters: int | None = None
    initial_weights: InitialWeights | None = None
    snapshot_of: str | None = None  # the checkpoint a shipped snapshot belongs to
    description: str | None = None
    training_summary: str | None = None
    examples: list[str] | None = None  # inputs the page offers (a toy checkpoint's symbols)
    domain: DomainSection | str | None = None  # in words on an imported model's card
    toy_task: ToyTaskSection | None = None
    replaces: str | None = None  # the model shipped before, and its scores
    scores: dict[str, SplitScores] | None = None  # per split: "val", "test_2016_flickr"

    @classmethod
    def from_dict(cls, data: Any, source: str = "card", key: str = "") -> Card:
        """Read a card's JSON object; ``source`` names it in errors (the file)."""
        for name, value in data.items() if isinstance(data, Mapping) else ():
            if isinstance(value, Mapping) and "bleu" in value and name not in _schema(cls):
                raise ValueError(
                    f"{source}: {name}: a split's scores at the top of a card are an old format that is no longer "
                    f"read; move them under scores.{name}"
                )
        return super().from_dict(data, source, key)

    @classmethod
    def load(cls, folder: str | Path) -> Card:
        """The card.json of a checkpoint folder; an empty card when the folder has none."""
        path = Path(folder) / CARD_FILE
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: not valid JSON ({error})") from error
        return cls.from_dict(data, str(path))

    def save(self, folder: str | Path) -> Path:
        """Write card.json as every tool writes it: indented, UTF-8 kept readable, one trailing newline. The card is
        checked as reading checks it first, so that no tool writes a card that would not load."""
        path = Path(folder) / CARD_FILE
        data = self.to_dict()
        Card.from_dict(data, str(path))
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    @property
    def languages(self) -> tuple[str | None, str | None]:
        return self.source_language, self.target_language

    @property
    def bleu(self) -> dict[str, float]:
        """BLEU by split (``scores.SPLIT.bleu``), in the card's order; splits without BLEU are left out."""
        return {split: float(s.bleu) for split, s in (self.scores or {}).items() if s.bleu is not None}

    @property
    def domain_section(self) -> DomainSection:
        """``domain`` as a section: an empty one when the card has none, or only words (an imported model's card)."""
        return self.domain if isinstance(self.domain, DomainSection) else DomainSection()

    def runs(self) -> list[TrainingRun]:
        """Every run that made these weights, oldest first: ``history``, or, for a card without one (the toy
        checkpoints'), one run made from the card's own training fields."""
        if self.history is not None:
            return list(self.history)
        fields_of_run = ("averaged_epochs", "stopped", "wall_time_s", "hardware", "valid_bleu_greedy", "scores")
        return [TrainingRun(command=self.train_command, **{name: getattr(self, name) for name in fields_of_run})]


def _read_schema(cls: type) -> dict[str, Any]:
    """The JSON keys a section class models and their types (its dataclass fields, without extra and order)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls) if f.name not in ("extra", "order")}


# _read_schema, cached. Annotated: functools.cache's wrapper is typed to take any hashable arguments, which hides the
# signature, and mypy does not count a class as hashable (python/mypy#11470)
_schema: Callable[[type], dict[str, Any]] = functools.cache(_read_schema)


def _required(cls: type, name: str) -> bool:
    spec = next(f for f in fields(cls) if f.name == name)
    return spec.default is MISSING and spec.default_factory is MISSING


def _arms(hint: Any) -> list[Any]:
    """The types a value may have: the arms of a union except None, or the type itself."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [arm for arm in typing.get_args(hint) if arm is not type(None)]
    return [hint]


def _is_section(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, Section)


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is the JSON kind ``hint`` asks for (its items are checked apart)."""
    if hint is Any:
        return True
    kind = typing.get_origin(hint) or hint
    if kind in (int, float) and isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, dict if _is_section(kind) else kind)


def _check(value: Any, hint: Any, source: str, key: str) -> Any:
    """``value`` if it has the type ``hint`` names (a section read into its class), else a ValueError naming
    ``source`` and ``key``."""
    arm = next((arm for arm in _arms(hint) if _fits(value, arm)), None)
    if arm is None:
        expected = " or ".join(_describe(arm) for arm in _arms(hint))
        raise ValueError(f"{source}: {key}: expected {expected}, got {_short(value)}")
    if _is_section(arm):
        return arm.from_dict(value, source, key)
    kind, args = typing.get_origin(arm), typing.get_args(arm)
    if kind is list:
        return [_check(item, args[0], source, f"{key}[{index}]") for index, item in enumerate(value)]
    if kind is dict:
        return {name: _check(item, args[1], source, f"{key}.{name}") for name, item in value.items()}
    return value


def _describe(hint: Any) -> str:
    kind = typing.get_origin(hint) or hint
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list"}
    return names.get(kind, "an object")


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _dump(value: Any) -> Any:
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, list):
        return [_dump(item) for item in value]
    if isinstance(value, dict):
        return {name: _dump(item) for name, item in value.items()}
    return value
