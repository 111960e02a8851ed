"""Train a small Transformer on a toy task and watch its attention learn.

The training runs in the server's TrainingPool (explorer.compute.training_pool: a process per
training, a queue when the class starts more than the server runs at once); this view only
submits, stops and reads it. The live part is a fragment that reruns itself every second while
the session's training is queued or running, so the rest of the page stays usable. A finished
model opens in every other view like a shipped checkpoint (saved into the session's own folder),
or is saved into the checkpoints folder when the server allows it (ATTENTION_EXPLORER_ALLOW_SAVE).
"""

from __future__ import annotations

import os
import re
import uuid

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

import viz
from explorer.compute import checkpoints_dir, trained_folder, training_pool
from explorer.context import PageContext
from explorer.explanations import EXPLANATIONS
from explorer.state import (
    TRAIN_D_MODELS,
    TRAIN_HEADS,
    TRAIN_LAYERS,
    TRAIN_LEARNING_RATES,
    TRAIN_LENGTHS,
    bind,
    write_url_after_fragment,
)
from explorer.widgets import how_to_read, show_figure
from explorer.wording import EXERCISE_RESULT, TRAIN_STATES, escape_markdown
from model.config import POSITIONAL_ENCODINGS
from model.heads import head_label, layer_label, module_name
from model.training.exercises import EXERCISES, Exercise
from model.training.live import ToyRun
from model.training.pool import JobView
from model.training.toy_settings import ToySettings
from model.training.toy_tasks import TASKS

SAVE_ENV = "ATTENTION_EXPLORER_ALLOW_SAVE"  # "1": the Train view may write checkpoints into the checkpoints folder
REFRESH_S = 1.0  # how often the live panel rereads the training
CHECKPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SETTING_FIELDS = {  # Train view setting -> ToySettings field
    "train_task": "task",
    "train_shortest": "shortest",
    "train_longest": "longest",
    "train_encoder_layers": "encoder_layers",
    "train_decoder_layers": "decoder_layers",
    "train_heads": "heads",
    "train_d_model": "d_model",
    "train_positional": "positional",
    "train_lr": "learning_rate",
    "train_steps": "steps",
}


def owner() -> str:
    """This browser session's name in the training pool: its Streamlit session id, by which the pool tells that it
    has gone, and a random part (AppTest gives every session the same id)."""
    if "train_owner" not in st.session_state:
        context = get_script_run_ctx()
        st.session_state.train_owner = f"{context.session_id if context else 'no-session'}/{uuid.uuid4().hex[:12]}"
    return st.session_state.train_owner


def saving_allowed() -> bool:
    return os.environ.get(SAVE_ENV, "").lower() in ("1", "true", "yes")


def chosen_settings() -> ToySettings:
    """The settings the widgets show (possibly invalid: ``problems`` says why)."""
    return ToySettings(**{field: st.session_state[key] for key, field in SETTING_FIELDS.items()})


def settings_panel(locked: bool) -> ToySettings:
    """The task, the model and the budget; ``locked`` while a training runs (its settings are fixed).

    The settings outlive the view (``persist_state``): a teacher who leaves the Train view while a model trains (for
    another view, or presenter mode) comes back to the settings it trains with, and can continue it once stopped;
    Streamlit would otherwise forget the widgets of a view not drawn and the page would show its defaults."""
    for key in SETTING_FIELDS:
        bind(key)
    st.selectbox(
        "Task",
        list(TASKS),
        key="train_task",
        disabled=locked,
        persist_state="page",
        help=TASKS[st.session_state.train_task].rule,
    )
    if TASKS[st.session_state.train_task].uses_lengths:
        shortest, longest = st.columns(2)
        shortest.selectbox("Shortest input", TRAIN_LENGTHS, key="train_shortest", disabled=locked, persist_state="page")
        longest.selectbox("Longest input", TRAIN_LENGTHS, key="train_longest", disabled=locked, persist_state="page")
    encoder, decoder = st.columns(2)
    encoder.selectbox("Encoder layers", TRAIN_LAYERS, key="train_encoder_layers", disabled=locked, persist_state="page")
    decoder.selectbox("Decoder layers", TRAIN_LAYERS, key="train_decoder_layers", disabled=locked, persist_state="page")
    heads, width = st.columns(2)
    heads.selectbox("Heads", TRAIN_HEADS, key="train_heads", disabled=locked, persist_state="page")
    width.selectbox("d_model", TRAIN_D_MODELS, key="train_d_model", disabled=locked, persist_state="page")
    st.radio(
        "Positional encoding",
        POSITIONAL_ENCODINGS,
        key="train_positional",
        horizontal=True,
        disabled=locked,
        persist_state="page",
        help=EXPLANATIONS["train_positional"],
    )
    rate, budget = st.columns(2)
    rate.selectbox(
        "Learning rate",
        TRAIN_LEARNING_RATES,
        format_func=lambda r: f"{r:g}",
        key="train_lr",
        disabled=locked,
        persist_state="page",
    )
    budget.number_input(
        "Steps", step=100, key="train_steps", disabled=locked, persist_state="page", help=EXPLANATIONS["train_steps"]
    )
    return chosen_settings()


def start(settings: ToySettings, continued: ToyRun | None = None) -> None:
    """Start (or continue) this session's training; a refusal is kept for the next run to show."""
    try:
        training_pool().submit(owner(), settings, start=continued)
        st.session_state.train_message = None
    except (ValueError, RuntimeError) as error:
        st.session_state.train_message = str(error)


def stop() -> None:
    training_pool().stop(owner())


def reset() -> None:
    training_pool().forget(owner())
    st.session_state.train_message = None


def try_exercise(exercise: Exercise) -> None:
    """Put an exercise's settings into the widgets (the person presses Start)."""
    settings = exercise.settings()
    for key, field in SETTING_FIELDS.items():
        st.session_state[key] = getattr(settings, field)


def buttons(job: JobView | None, settings: ToySettings, in_a_row: bool = False) -> None:
    """Start, Stop, Continue and Reset, each enabled when it can act: two by two, or ``in_a_row``."""
    active = job is not None and job.active
    ended_run = job.run if job is not None and not job.active else None
    can_continue = ended_run is not None and ended_run.settings.same_model(settings)
    if in_a_row:
        row = st.columns(4)
        first, second = row[:2], row[2:]
    else:
        first, second = st.columns(2), st.columns(2)
    first[0].button("Start", icon=":material/play_arrow:", type="primary", disabled=active, on_click=start,
                    args=(settings,), width="stretch", key="train_start")  # fmt: skip
    first[1].button("Stop", icon=":material/stop:", disabled=not active, on_click=stop, width="stretch",
                    key="train_stop")  # fmt: skip
    second[0].button("Continue", icon=":material/resume:", disabled=not can_continue, on_click=start,
                     args=(settings, ended_run), width="stretch", key="train_continue",
                     help=EXPLANATIONS["train_continue"])  # fmt: skip
    second[1].button("Reset", icon=":material/restart_alt:", disabled=job is None, on_click=reset, width="stretch",
                     key="train_reset")  # fmt: skip
    problems = settings.problems()
    if problems and not active:
        st.error("These settings cannot train: " + "; ".join(problems) + ".")
    if st.session_state.get("train_message"):
        st.error(st.session_state.train_message)


def exercises_panel() -> None:
    """The exercises: each button puts its settings into the widgets, and the text says what it should show."""
    with st.expander("Try this", icon=":material/science:", expanded=True):
        for index, exercise in enumerate(EXERCISES):
            st.button(
                exercise.title, key=f"train_exercise_{index}", on_click=try_exercise, args=(exercise,), width="stretch"
            )
            st.caption(exercise.expect)
        st.caption(EXERCISE_RESULT)


def status_line(job: JobView) -> None:
    """Where the training stands, as a progress bar with its steps and time left."""
    if job.state == "queued":
        st.info(TRAIN_STATES["queued"].format(position=job.position), icon=":material/hourglass_top:")
        return
    if job.state == "failed":
        st.error(f"The training failed: {escape_markdown(job.error)}")
    done = job.step / max(job.steps, 1)
    left = job.time_left_s()
    parts = [f"step {job.step:,} of {job.steps:,}", f"{job.elapsed_s:.0f} s"]
    if left is not None:
        parts.append(f"about {left:.0f} s left")
    if job.exact_match is not None:
        parts.append(f"held-out exact match {job.exact_match:.0%}")
    state = TRAIN_STATES[job.state] if job.state != "finished" or job.run is None else job.run.stopped.capitalize()
    st.progress(min(done, 1.0), text=f"**{state}** · " + " · ".join(parts))


def bind_watched_head(settings: ToySettings) -> tuple[list[int], list[int]]:
    """The watched layer and head (and All heads) for a model of ``settings``: its layers and heads."""
    layers, heads = list(range(settings.decoder_layers)), list(range(settings.heads))
    bind("train_layer", layers[-1], layers)
    bind("train_head", 0, heads)
    bind("train_all_heads")
    return layers, heads


def attention_panel(job: JobView) -> None:
    """The watched held-out example's cross-attention, one head or all, with where the task says to look."""
    trace = job.latest
    if trace is None:
        st.caption("The watched example's attention appears at the first measurement.")
        return
    settings = job.settings
    expected = TASKS[settings.task].order(trace.source_text.split())
    layers, heads = bind_watched_head(settings)
    layer_column, head_column, all_column = st.columns([2, 2, 3], vertical_alignment="bottom")
    layer = layer_column.selectbox("Layer", layers, format_func=layer_label, key="train_layer")
    all_heads = all_column.toggle("All heads", key="train_all_heads")
    head = head_column.selectbox("Head", heads, format_func=head_label, key="train_head", disabled=all_heads)
    if all_heads:
        figure = viz.alignment_grid(trace, expected, job.alignment)
    else:
        # the chart has half the row: the whole head title ran under the chart's toolbar, and the pickers right
        # above it name the layer and head
        figure = viz.alignment_heatmap(trace, module_name("cross", layer), head, expected, title="Cross-attention")
    show_figure(figure, f"training-{settings.task}-attention")
    st.caption(EXPLANATIONS["train_outline"])


def live_panel(job: JobView | None) -> None:
    """The live part: reruns itself every REFRESH_S while the training is queued or running."""
    polling = job is not None and job.active
    st.fragment(_live, run_every=REFRESH_S if polling else None)(polling)


def _live(polling: bool) -> None:
    job = training_pool().view(owner())
    if polling and (job is None or not job.active):
        st.rerun(scope="app")  # it ended: the buttons and the finished model's actions change
    if job is None:
        st.info(EXPLANATIONS["train_idle"], icon=":material/model_training:")
        return
    status_line(job)
    history = job.history
    measured = [point for point in history if point.exact_match is not None]
    curves, attention = st.columns(2, gap="medium")  # side by side: both on the first screen while it trains
    with curves:
        show_figure(
            viz.training_curves(
                [point.step for point in history],
                [point.loss for point in history],
                [point.step for point in measured],
                [point.exact_match for point in measured],
                budget=job.steps,
            ),
            f"training-{job.settings.task}-curves",
        )
    with attention:
        attention_panel(job)
    write_url_after_fragment()


def explore(run: ToyRun, name: str) -> None:
    """Open the trained model in every other view: save it into the session's folder and pick it."""
    run.save(trained_folder(owner()) / name)
    training_pool().watch(owner())  # its folder goes when the session does, even after a Reset
    st.session_state.setdefault("trained_checkpoints", {})[name] = str(trained_folder(owner()) / name)
    st.session_state.checkpoint = name
    st.session_state.checkpoint_switched = True
    st.session_state.view = "cross"


def save(run: ToyRun) -> None:
    name = st.session_state.get("train_save_name", "").strip()
    target = checkpoints_dir() / name
    if not CHECKPOINT_NAME.fullmatch(name):
        st.session_state.train_saved = ("error", "A name of letters, digits, '.', '_' or '-' (64 at most), please.")
    elif target.exists():
        st.session_state.train_saved = ("error", f"There is already a checkpoint called {name}; pick another name.")
    else:
        run.save(target)
        st.session_state.train_saved = ("success", f"Saved as {name}: it is in the checkpoint list for everyone.")


def finished_panel(run: ToyRun) -> None:
    """What to do with a trained model: open it in the other views, or save it as a checkpoint."""
    name = f"trained-{run.settings.task}"
    st.button(
        "Explore this model",
        icon=":material/travel_explore:",
        on_click=explore,
        args=(run, name),
        help=EXPLANATIONS["train_explore"].format(name=name),
        key="train_explore",
        width="stretch",
    )
    if not saving_allowed():
        st.caption(EXPLANATIONS["train_save_off"].format(env=SAVE_ENV))
        return
    st.session_state.setdefault("train_save_name", f"{name}-{run.step}")
    name_column, button_column = st.columns([3, 2], vertical_alignment="bottom")
    name_column.text_input("Checkpoint name", key="train_save_name")
    button_column.button("Save", icon=":material/save:", on_click=save, args=(run,), key="train_save", width="stretch")
    saved = st.session_state.get("train_saved")
    if saved:
        getattr(st, saved[0])(escape_markdown(saved[1]))


def render(ctx: PageContext) -> None:  # noqa: ARG001 - a view's signature; this one trains its own model
    """Before a training: the buttons, settings and exercises beside the idle panel. Once this session has a
    training, it comes first: the buttons in a row, then its curves beside the watched attention (both on a 1280x800
    first screen), then the settings (locked while it runs) and the exercises."""
    job = training_pool().view(owner())
    how_to_read("train", caveat=False, folded=job is not None)
    if job is None:
        controls, live = st.columns([2, 3], gap="large")
        with controls:
            top = st.container()  # the buttons, first on screen, start the settings drawn under them
            settings = settings_panel(locked=False)
            bind_watched_head(settings)  # a link keeps them before a training
            with top:
                buttons(job, settings)
            exercises_panel()
        with live:
            live_panel(job)
        return
    top = st.container()  # the buttons, drawn once the settings under the charts are known
    live_panel(job)
    controls, exercises = st.columns([2, 3], gap="large")
    with controls:
        settings = settings_panel(locked=job.active)
    bind_watched_head(job.settings)
    with exercises:
        exercises_panel()
    with top:
        buttons(job, settings, in_a_row=True)
        if job.run is not None and not job.active:
            finished_panel(job.run)
