"""The page context: what every view receives, built once per page run from the sidebar and the sentence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from streamlit.delta_generator import DeltaGenerator

from explorer.compute import TraceKey
from model.card import Card
from model.checkpoint import CheckpointEntry
from model.config import TransformerConfig
from model.trace import Trace
from viz.export import HandoutSection


@dataclass(frozen=True)
class TokenStyle:
    """How tokens are drawn in every attention figure (the sidebar's display toggles)."""

    merge_words: bool
    show_special: bool
    annotate: bool

    def options(self) -> dict[str, bool]:
        """Keyword arguments of the viz builders that write numbers in cells."""
        return asdict(self)

    def without_numbers(self) -> dict[str, bool]:
        """Keyword arguments of the builders whose cells are too small to write numbers in (grids, lines)."""
        return {"merge_words": self.merge_words, "show_special": self.show_special}


@dataclass
class Handout:
    """The charts the page drew, by section, for the handout export (the step section follows its fragment).

    Sections come in the page's order: the view, the decoding steps, the translation's probabilities, then a class's
    questions with its answers (explorer.classes, on the teacher's page), read from the store and drawn only when
    the handout is written.
    """

    translation: list[HandoutSection] = field(default_factory=list)
    steps: list[HandoutSection] = field(default_factory=list)
    view: list[HandoutSection] = field(default_factory=list)
    classroom: Callable[[], list[HandoutSection]] = list

    def sections(self) -> list[HandoutSection]:
        return [*self.view, *self.steps, *self.translation, *self.classroom()]


@dataclass(frozen=True)
class PageContext:
    """One page run's checkpoint, model configuration, trace and display settings, and where its charts are
    collected. It holds the configuration, not the model: a session keeps its context between runs (a fragment, a
    deferred download), and a model closed to stay within the memory budget must not stay alive through it."""

    entry: CheckpointEntry
    config: TransformerConfig
    trace: Trace
    trace_key: TraceKey  # what the experiments' cached results are keyed on
    token_style: TokenStyle
    first_head: tuple[int, int]  # the cross-attention (layer, head) the page opens on
    handout: Handout = field(default_factory=Handout)
    # where the sentence box and the view picker are drawn: None for the page's own flow, in presenter mode a
    # slot in the sidebar (explorer.sidebar.presenter_toggle)
    controls: DeltaGenerator | None = None

    @property
    def file_stem(self) -> str:
        """The start of every download's file name."""
        return self.entry.name

    @property
    def card(self) -> Card:
        return self.entry.card

    @property
    def mode(self) -> str:
        """How the trace's output was made, in words: "greedy search", "beam search, beam 5", "sampling at
        temperature 0.8, top-p 0.9, seed 3", "teacher forcing", "beam search, beam 4, as the model's authors decode".
        No parentheses: the page writes it in some."""
        settings = self.trace.settings
        names = {"greedy": "greedy search", "beam": f"beam search, beam {settings.beam_size}"}
        if settings.sampling is not None:
            names["sampling"] = settings.sampling.describe()
        mode = names.get(settings.mode, "teacher forcing")
        if settings.scoring and settings.mode != "forced":
            return f"{mode}, as the model's authors decode"
        return mode
