"""The page's shareable state: every setting a person can change, bound to a widget and to the URL.

A link opens exactly the view it was copied from: on a page's first run and on the browser's
Back/Forward the URL sets the widgets (``read_url``, then ``bind``); on every other run the
widgets set the URL (``write_url``, which adds a browser history entry). A parameter is left
out of the URL while its setting has its default value.

Every setting is one row of ``SETTINGS``: its URL name (also its widget key), how URL text
becomes its value, its default and its allowed values. Where the default or the allowed values
depend on the model or the sentence (layers, steps, checkpoint names), the view that draws the
widget passes them to ``bind``. A student's page that follows its teacher (explorer.classes) opens the
teacher's state as it would open a link. Not settings, so not in the URL: the example pickers (menus
that copy into a setting), the quiz's guesses (answers, kept per step), an uploaded file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorer.classes.session import publish, take_follow_request
from model.analysis.ablation import ABLATION_MODES
from model.analysis.head_stats import STATISTICS
from model.analysis.samples import MAX_SAMPLES
from model.analysis.word_order import WORD_ORDER_VARIANTS
from model.config import POSITIONAL_ENCODINGS
from model.decoding.sampling import Sampling
from model.decoding.search import DEFAULT_BEAM_SIZE
from model.heads import ATTENTION_KINDS, STACKS
from model.training.toy_settings import D_MODEL_RANGE, HEAD_RANGE, LAYER_RANGE, LENGTH_RANGE, ToySettings
from model.training.toy_tasks import TASKS

DEVICES = ("auto", "cpu", "cuda")
SEARCHES = ("greedy", "beam", "sampling")
BEAM_SIZES = tuple(range(2, 11))  # the beam-size slider's choices (1 is greedy search)
# the sampling controls' ranges: (lowest, highest, step) for the sliders, (lowest, highest) for the number boxes
TEMPERATURE_RANGE = (0.05, 2.0, 0.05)
TOP_P_RANGE = (0.05, 1.0, 0.05)
TOP_K_RANGE = (0, 100)  # 0: every token
SEED_RANGE = (0, 999_999)
SAMPLING_SETTINGS = tuple(setting.name for setting in fields(Sampling))  # its fields are the URL keys
SAMPLE_DRAWS_RANGE = (1, MAX_SAMPLES)  # "sample again": draws at once
EMBEDDING_PARTS = ("token", "position", "sum")  # the embedding view's heatmap: which vector, over its dimensions
DISPLAYS = ("single", "grid", "heads", "aggregates")
TOKEN_STYLE_TOGGLES = ("merge_words", "show_special", "annotate")
STATS_SOURCES = ("sentence", "file")
ALL_QUERIES = -1  # head view: draw the lines of every query token
AVERAGE_HEADS = -1  # quiz: the mean over the layer's heads decides where the model looks
BOOLEANS = (False, True)
TRAIN_D_MODELS = tuple(d for d in (16, 24, 32, 48, 64, 96, 128) if D_MODEL_RANGE[0] <= d <= D_MODEL_RANGE[1])
TRAIN_LEARNING_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
TRAIN_LAYERS = tuple(range(LAYER_RANGE[0], LAYER_RANGE[1] + 1))
TRAIN_HEADS = tuple(range(HEAD_RANGE[0], HEAD_RANGE[1] + 1))
TRAIN_LENGTHS = tuple(range(LENGTH_RANGE[0], LENGTH_RANGE[1] + 1))
GIVEN_BY_THE_PAGE = None  # in SETTINGS: the default or options come from the view that draws the widget
FROM_THE_TABLE = object()  # bind's arguments left out: the row of SETTINGS says


def parse_bool(raw: str) -> bool:
    if raw not in ("true", "false"):
        raise ValueError(f"not true or false: {raw!r}")
    return raw == "true"


def parse_text(raw: str) -> str:
    return raw


def within(number: Callable[[str], float], bounds: tuple[float, ...]) -> Callable[[str], Any]:
    """A parser of numbers from ``bounds[0]`` to ``bounds[1]`` (a ValueError outside: the setting's default is used)."""

    def parse(raw: str) -> Any:
        value = number(raw)
        if not bounds[0] <= value <= bounds[1]:
            raise ValueError(f"{value} is outside {bounds[0]} to {bounds[1]}")
        return value

    return parse


# The attention kinds' names before they were told apart from the stacks': links with view=decoder still open.
FORMER_KIND_NAMES = {"encoder": "encoder_self", "decoder": "decoder_self"}


def parse_kind_name(raw: str) -> str:
    """An attention kind, or a view named after one, with a former kind name read as today's."""
    return FORMER_KIND_NAMES.get(raw, raw)


def parse_head_key(raw: str) -> str:
    """A head as the ablation's URL names it, "kind.layer.head" ("cross.2.0"), a former kind name read as today's."""
    kind, dot, place = raw.partition(".")
    return f"{parse_kind_name(kind)}{dot}{place}"


@dataclass(frozen=True)
class Setting:
    """One URL-bound setting. ``parse`` turns one URL value into a widget value (ValueError when it cannot);
    ``multi`` settings hold a list, written comma-separated. ``options`` None: free text, or given by the page.
    ``former_keys``: the names older links used for it, read when the link is opened (the URL is then rewritten
    with ``key``); ``parse`` reads the values older links used in the same way (``parse_kind_name``)."""

    key: str
    parse: Callable[[str], Any]
    default: Any = GIVEN_BY_THE_PAGE
    options: tuple[Any, ...] | None = GIVEN_BY_THE_PAGE
    multi: bool = False
    former_keys: tuple[str, ...] = ()

    def from_url(self, raw: str, default: Any, options: Sequence[Any] | None) -> Any:
        """The URL text as this setting's value; ``default`` when it is not one of ``options``.

        A multi setting keeps its valid items, in the URL's order, each once.
        """
        if self.multi:
            values = []
            for part in raw.split(","):
                value = self._parsed(part)
                if value is not None and (options is None or value in options) and value not in values:
                    values.append(value)
            return values
        value = self._parsed(raw)
        return value if value is not None and (options is None or value in options) else default

    def _parsed(self, raw: str) -> Any:
        try:
            return self.parse(raw)
        except ValueError:
            return None


SETTINGS: tuple[Setting, ...] = (
    # in the order they appear in the URL
    Setting("checkpoint", parse_text),
    Setting("sentence", parse_text),
    # a many-language model's source code; the target's, or a multi-target Marian model's ">>xx<<" code (choices
    # given by the page)
    Setting("source_language", parse_text),
    Setting("target_language", parse_text),
    Setting("view", parse_kind_name),
    Setting("display", parse_text, "single", DISPLAYS),
    Setting("layer", int, 0),
    Setting("head", int, 0),
    Setting("grid_layers", parse_text),  # the all-heads grid's layers, "3-5" or "4"; choices given by the page
    Setting("head_view_query", int, ALL_QUERIES),
    Setting("head_view_heads", int, multi=True),
    Setting("positional_stack", parse_text, "encoder", STACKS, former_keys=("positional_side",)),
    Setting("positional_dimensions", int, multi=True),
    Setting("step", int, 0),
    # the boxes of Figure 1 that are not attention (embedding, Add & Norm, Feed Forward): their stack, and their parts
    Setting("stack", parse_text, "encoder", STACKS),
    Setting("embedding_part", parse_text, "sum", EMBEDDING_PARTS),
    Setting("ff_piece", int, 0),
    Setting("ff_unit", int),
    Setting("step_layer", int),
    # the quiz's decoder layer and head, by default the readable head the first screen opens on
    Setting("quiz_layer", int),
    Setting("quiz_head", int),
    Setting("attribution_step", int, 0),
    Setting("evolution_kind", parse_kind_name, "cross", ATTENTION_KINDS),
    Setting("experiment", parse_text, "whatif"),
    Setting("module_kind", parse_kind_name, "cross", ATTENTION_KINDS),
    Setting("query_row", int, 0),
    Setting("fork_step", int, 0),
    Setting("fork_token", int),
    Setting("fork_word", parse_text, ""),
    Setting("beam_node", int),
    Setting("show_pruned", parse_bool, True, BOOLEANS),
    Setting("statistic", parse_text, "entropy", tuple(STATISTICS)),
    Setting("stats_source", parse_text, "sentence", STATS_SOURCES),
    Setting("pair_sentence", parse_text, ""),
    Setting("ablate", parse_head_key, [], multi=True),
    Setting("ablation_mode", parse_text, "zero", ABLATION_MODES),
    Setting("word_order_variant", parse_text, "no-pe", WORD_ORDER_VARIANTS, former_keys=("pe_experiment",)),
    Setting("word_order_stacks", parse_text, list(STACKS), STACKS, multi=True, former_keys=("pe_stacks",)),
    Setting("word_order_seed", int, 0, tuple(range(1000)), former_keys=("pe_seed",)),
    # the Train view: the toy training's settings (model.training.toy_settings.ToySettings) and the head it watches
    Setting("train_task", parse_text, ToySettings.task, tuple(TASKS)),
    Setting("train_shortest", int, ToySettings.shortest, TRAIN_LENGTHS),
    Setting("train_longest", int, ToySettings.longest, TRAIN_LENGTHS),
    Setting("train_encoder_layers", int, ToySettings.encoder_layers, TRAIN_LAYERS),
    Setting("train_decoder_layers", int, ToySettings.decoder_layers, TRAIN_LAYERS),
    Setting("train_heads", int, ToySettings.heads, TRAIN_HEADS),
    Setting("train_d_model", int, ToySettings.d_model, TRAIN_D_MODELS),
    Setting("train_positional", parse_text, ToySettings.positional, POSITIONAL_ENCODINGS),
    Setting("train_lr", float, ToySettings.learning_rate, TRAIN_LEARNING_RATES),
    Setting("train_steps", int, ToySettings.steps),
    Setting("train_layer", int),
    Setting("train_head", int, 0),
    Setting("train_all_heads", parse_bool, False, BOOLEANS),
    Setting("presenter", parse_bool, False, BOOLEANS),
    Setting("device", parse_text, "auto", DEVICES),
    Setting("authors_decoding", parse_bool, False, BOOLEANS),
    Setting("decoding", parse_text, "greedy", SEARCHES),
    Setting("beam_size", int, DEFAULT_BEAM_SIZE, BEAM_SIZES),
    # sampling's settings (model.decoding.Sampling), each within its control's range
    Setting("temperature", within(float, TEMPERATURE_RANGE), Sampling.temperature),
    Setting("top_k", within(int, TOP_K_RANGE), Sampling.top_k),
    Setting("top_p", within(float, TOP_P_RANGE), Sampling.top_p),
    Setting("seed", within(int, SEED_RANGE), Sampling.seed),
    Setting("sample_draws", within(int, SAMPLE_DRAWS_RANGE), 10),
    Setting("max_new_tokens", int, former_keys=("max_len",)),
    Setting("merge_words", parse_bool, False, BOOLEANS),
    Setting("show_special", parse_bool, True, BOOLEANS),
    Setting("annotate", parse_bool, False, BOOLEANS),
    Setting("teacher_forcing", parse_bool, False, BOOLEANS),
    Setting("target", parse_text, ""),
    # a class session (explorer.classes): its join code, and a student's seat, kept when the page reconnects
    Setting("class", parse_text, ""),
    Setting("seat", parse_text, ""),
)
SETTINGS_BY_KEY = {setting.key: setting for setting in SETTINGS}


def url_text(value: Any) -> str:
    """A value as the URL writes it: booleans as true/false, a list (multi-select) comma-separated, else str()."""
    if isinstance(value, list):
        return ",".join(url_text(item) for item in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def valid(value: Any, options: Sequence[Any] | None) -> bool:
    """Whether a widget value is one of ``options`` (each item of it, for a multi-select); None: any value."""
    if options is None:
        return True
    if isinstance(value, list):
        return all(item in options for item in value)
    return value in options


def with_current_keys(url: dict[str, str]) -> dict[str, str]:
    """The URL's parameters with the names older links used replaced by today's (a current name wins)."""
    current = dict(url)
    for setting in SETTINGS:
        for former in setting.former_keys:
            if former in current:
                current.setdefault(setting.key, current[former])
                del current[former]
    return current


def read_url() -> None:
    """Decide whether this run takes its state from the URL: on the page's first run and on Back/Forward.

    On those runs every setting is set from the URL (``bind``), and a setting the URL leaves out
    goes back to its default. On every other run the widgets are the truth and the URL follows.
    """
    context = get_script_run_ctx()
    st.session_state.url_bound = set()  # the settings this page run draws (a fragment's reruns add theirs)
    first_run = "url_defaults" not in st.session_state
    followed = take_follow_request()  # a student's page following its teacher opens the teacher's state as a link
    # Streamlit marks the runs that the browser's Back and Forward start (the flag its own
    # query-bound widgets use; not public API, hence getattr).
    if followed is None and not first_run and not getattr(context, "is_history_navigation", False):
        st.session_state.url_request = None
        return
    url = with_current_keys(followed if followed is not None else st.query_params.to_dict())
    st.session_state.url_request = url
    st.session_state.setdefault("url_defaults", {})
    for setting in SETTINGS:
        if setting.key not in url:
            st.session_state.pop(setting.key, None)


def bind(key: str, default: Any = FROM_THE_TABLE, options: Any = FROM_THE_TABLE) -> Any:
    """Give a setting's widget its value before it is drawn, from the URL when this run reads it; returns the value.

    ``default`` and ``options`` complete the row of SETTINGS where the page decides them (a layer
    the model has, the first example sentence). Widgets get their values only through
    st.session_state (never a ``value=`` argument as well), so a value set here, by a callback or
    from the URL never conflicts with a default. The default is recorded so that the URL can
    leave it out. A key that is not in SETTINGS is a KeyError: every setting is in the table.
    """
    setting = SETTINGS_BY_KEY[key]
    default = setting.default if default is FROM_THE_TABLE else default
    options = setting.options if options is FROM_THE_TABLE else options
    if isinstance(default, list):
        default = list(default)  # widgets may change their value in place; the table's default must not
    st.session_state.url_defaults[key] = default
    st.session_state.setdefault("url_bound", set()).add(key)
    requested = st.session_state.get("url_request")
    if requested is not None:
        raw = requested.get(key)
        st.session_state[key] = default if raw is None else setting.from_url(raw, default, options)
    elif key not in st.session_state or not valid(st.session_state[key], options):
        st.session_state[key] = default
    return st.session_state[key]


def write_url() -> None:
    """Put every setting on screen (bound in this page run) whose value is not its default into the URL.

    Streamlit adds a browser history entry when a run changes the URL, so Back returns to the
    state before; a run that restores from the URL leaves it as it is.
    """
    defaults = st.session_state.url_defaults
    bound = st.session_state.get("url_bound", set())
    wanted = {
        setting.key: url_text(st.session_state[setting.key])
        for setting in SETTINGS
        if setting.key in bound
        and setting.key in st.session_state
        and st.session_state[setting.key] != defaults[setting.key]
    }
    if wanted != st.query_params.to_dict():
        st.query_params.from_dict(wanted)
    st.session_state.url_request = None
    publish(wanted)  # a teacher's page: the class follows


@contextmanager
def view_settings() -> Iterator[None]:
    """Settings bound inside belong to the view drawn there: a fragment rerun that draws another view in its place
    (explorer.main_area.view_area) takes the last view's settings out of the URL, as a page run that does not draw
    it would."""
    state = st.session_state
    if not state.full_run:
        state.url_bound -= state.get("view_bound", set())
    before = set(state.url_bound)
    yield
    state.view_bound = state.url_bound - before


def write_url_after_fragment() -> None:
    """A fragment's own rerun (not its part of a full run) writes the URL it changed, e.g. the step."""
    if not st.session_state.full_run:
        write_url()


def presenting() -> bool:
    return bool(st.session_state.get("presenter"))
