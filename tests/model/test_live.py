"""Training a toy model while someone watches (model.training.live) and the classroom's pool of trainings
(model.training.pool): settings checked, progress reported, stop and continue, the exercises' claims."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from model import load_checkpoint
from model.config import TransformerConfig
from model.interop import export_torch
from model.training.exercises import EXERCISES
from model.training.live import (
    Progress,
    ToySettings,
    distinct_inputs,
    draw_data,
    start_run,
    train_toy,
)
from model.training.pool import TrainingPool
from model.training.toy_tasks import TASKS, alignment_scores

# a model small enough to take a few milliseconds a step
TINY = ToySettings(d_model=16, heads=2, encoder_layers=1, decoder_layers=1, steps=30, eval_every=10, held_out=20)
# held-out inputs whose cross-attention the exercises' test measures (one input of 3-8 words is too few: one output
# step read elsewhere, as on another CPU's path, moves its share by an eighth to a third)
ALIGNMENT_INPUTS = 50


@pytest.fixture(scope="module")
def tiny_run():
    return train_toy(TINY)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"heads": 0}, "heads must be between 1 and 8"),
        ({"d_model": 30, "heads": 4}, "d_model (30) must be divisible by the number of heads (4)"),
        ({"shortest": 6, "longest": 4}, "shortest <= longest"),
        ({"steps": 10**9}, "step budget"),
        ({"steps": 0}, "step budget"),
        ({"learning_rate": 5.0}, "learning rate"),
        ({"task": "translate"}, "task must be one of"),
        ({"positional": "rotary"}, "positional encoding must be one of"),
        ({"encoder_layers": 9}, "encoder layers must be between 1 and 4"),
    ],
)
def test_bad_settings_are_refused_with_a_message_and_train_nothing(changes, words):
    settings = replace(ToySettings(), **changes)
    assert any(words in problem for problem in settings.problems())
    steps = []
    with pytest.raises(ValueError, match="must|shortest"):
        train_toy(settings, on_step=steps.append)
    assert steps == []


def test_default_settings_are_valid():
    assert ToySettings().problems() == []
    for exercise in EXERCISES:
        assert exercise.settings().problems() == [], exercise.title


def test_held_out_inputs_are_never_trained_on():
    settings = replace(ToySettings(), shortest=2, longest=2)  # 676 possible inputs: the pool takes all the rest
    held_out, train = draw_data(settings)
    assert len(held_out) == 169  # a quarter of the inputs when the task has few
    assert len(held_out) + len(train) == distinct_inputs(settings) == 26**2
    assert not {source for source, _ in held_out} & {source for source, _ in train}
    task = TASKS["reverse"]
    assert all(target == " ".join(task.target(source.split())) for source, target in held_out + train)


def test_every_step_is_reported_and_measured_on_schedule(tiny_run):
    reports: list[Progress] = []
    run = train_toy(TINY, on_step=reports.append)
    assert [p.step for p in reports] == list(range(1, 31))
    assert [p.step for p in reports if p.exact_match is not None] == [10, 20, 30]
    measured = reports[9]
    source, target = run.example
    assert measured.attention.source_text == source and measured.attention.translation == target
    assert measured.attention.settings.mode == "forced"
    assert (
        set(measured.alignment) == {"decoder.layers.0.cross_attn"}
        and len(measured.alignment[next(iter(measured.alignment))]) == 2
    )
    assert all(p.loss > 0 and np.isfinite(p.loss) for p in reports)
    assert np.mean([p.loss for p in reports[-5:]]) < np.mean([p.loss for p in reports[:5]])
    # the same settings and seed train the same weights
    assert all(torch.equal(run.weights[name], tiny_run.weights[name]) for name in run.weights)
    assert [p.step for p in run.history] == list(range(1, 31)) and run.step == 30


def test_stop_ends_at_once_and_keeps_what_was_learned():
    reports: list[Progress] = []
    run = train_toy(TINY, on_step=reports.append, should_stop=lambda: len(reports) >= 5)
    assert run.step == 5 and len(reports) == 5
    assert "by hand after 5 steps" in run.stopped
    assert run.history[-1].exact_match is not None  # measured where it stopped
    assert "--steps 5 " in run.card().train_command  # the command that trains these weights again


def test_a_run_continues_where_it_stopped(tiny_run):
    more = train_toy(replace(TINY, steps=10, learning_rate=1e-3), start=tiny_run)
    assert more.step == 40 and [p.step for p in more.history] == list(range(1, 41))
    assert more.elapsed_s > tiny_run.elapsed_s
    assert tiny_run.step == 30 and len(tiny_run.history) == 30  # the run it continued is unchanged
    assert any(not torch.equal(more.weights[n], tiny_run.weights[n]) for n in more.weights)
    history = more.card().history
    assert [call.steps for call in history] == [30, 10] and "continued" in history[1].command
    assert more.card().train_command.startswith(tiny_run.card().train_command + "; then continued")
    with pytest.raises(ValueError, match="same task and model"):
        train_toy(replace(TINY, heads=4), start=tiny_run)


def test_the_trained_model_becomes_a_checkpoint(tiny_run, tmp_path):
    folder = tiny_run.save(tmp_path / "trained-reverse")
    translator = load_checkpoint(folder, device="cpu")
    source, _ = tiny_run.example
    assert translator.translate(source, beam_size=1) == tiny_run.translator().translate(source, beam_size=1)
    card = json.loads((folder / "card.json").read_text())
    assert card["toy_task"]["task"] == "reverse"
    assert card["toy_task"]["held_out_exact_match"] == tiny_run.exact_match
    assert card["train_command"].startswith("python -m model.training.live --task reverse")
    assert "--d-model 16" in card["train_command"] and "--steps 30" in card["train_command"]
    assert card["toy_task"]["clearest_head"]["module"] == "decoder.layers.0.cross_attn"
    assert card["examples"][0] == tiny_run.example[0]  # the page opens the model on the watched example


def test_the_command_line_trains_the_same_model(tmp_path):
    from model.training.live import main

    threads = torch.get_num_threads()
    try:  # the command trains on one thread; sums over a different number of threads differ in the last bits
        torch.set_num_threads(1)
        run = train_toy(replace(TINY, steps=10))
        main([*run.settings.command(str(tmp_path / "cli")).split()[3:], "--quiet"])
    finally:
        torch.set_num_threads(threads)
    loaded = load_checkpoint(tmp_path / "cli", device="cpu").model.state_dict()
    expected = run.model().state_dict()
    assert all(torch.equal(loaded[n], expected[n].half().float()) for n in expected)


@pytest.mark.parametrize("kind", ["none", "learned"])
def test_positional_encoding_options(kind):
    run = train_toy(replace(TINY, positional=kind, steps=5, eval_every=5))
    model = run.model()
    config = TransformerConfig.from_dict(run.config)
    assert config.positional_encoding == kind and run.config["positional_encoding"] == kind
    encoding = model.encoder.positional.encoding
    if kind == "none":
        assert not encoding.any() and "encoder.positional.encoding" not in run.weights
    else:
        assert isinstance(encoding, torch.nn.Parameter)
        untrained = start_run(replace(TINY, positional=kind)).weights["encoder.positional.encoding"]
        assert not torch.equal(run.weights["encoder.positional.encoding"], untrained)
        with pytest.raises(ValueError, match="learned positional encoding cannot be exported"):
            export_torch(model)


def test_a_config_without_the_option_keeps_the_papers_encoding():
    config = TransformerConfig.from_dict({"src_vocab_size": 10, "tgt_vocab_size": 10})
    assert config.positional_encoding == "sinusoidal" and "positional_encoding" not in config.to_dict()
    with pytest.raises(ValueError, match="positional_encoding must be one of"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, positional_encoding="rope")


@pytest.fixture
def one_thread():
    """Train as the Train view's workers do: sums over another number of threads differ in the last bits, and a
    seeded training follows another path."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


LEARNING = [exercise for exercise in EXERCISES if exercise.at_least is not None]
NEVER_LEARNING = [exercise for exercise in EXERCISES if exercise.at_most is not None]


@pytest.mark.slow
@pytest.mark.parametrize("exercise", LEARNING, ids=[exercise.title for exercise in LEARNING])
def test_each_exercise_that_learns_shows_what_it_claims(exercise, one_thread):
    """Every "try this" claim to learn, trained here with its settings and seed, measured every 50 steps. The
    training stops once the claimed score is reached.

    Another CPU sums in another order and a seeded training takes another path (docs/testing.md), so each claim
    is checked with room. Across seeds 0-2 on one and two threads, the exercises reach their level 100 to 150 steps
    before their last step. When a reverse exercise first reaches 90%, its best head of the last layer reads the
    mirrored position at 87% or more of the output steps of 50 held-out inputs; 75% is asked, which the same model
    at step 200 (59% exact) does not reach (69%), nor one without the encoding (22%)."""
    reached = {"done": False}

    def note(progress) -> None:
        if progress.exact_match is not None:
            reached["done"] = progress.exact_match >= exercise.at_least

    settings = exercise.settings(steps=exercise.steps, eval_every=50)
    run = train_toy(settings, on_step=note, should_stop=lambda: reached["done"])
    measured = [point.exact_match for point in run.history if point.exact_match is not None]
    assert max(measured) >= exercise.at_least, (exercise.expect, measured)
    if settings.task == "reverse":
        # the anti-diagonal: a head of the last layer reads the mirrored position at most output steps of held-out
        # inputs (teacher-forced on the right answer)
        translator = run.translator()
        traces = [translator.trace(source, target=target) for source, target in run.held_out[:ALIGNMENT_INPUTS]]
        last = alignment_scores(TASKS["reverse"], traces)[f"decoder.layers.{settings.decoder_layers - 1}.cross_attn"]
        assert max(last) >= 0.75, (exercise.expect, last)


def orderings(words: list[str]) -> int:
    """How many different sequences the same symbols make ("a b a": 3)."""
    return math.factorial(len(words)) // math.prod(math.factorial(count) for count in Counter(words).values())


def chance_above(chances: list[float], count: int) -> float:
    """The probability that more than ``count`` of independent events with these chances happen."""
    happened = [1.0]  # happened[k]: the probability that k of the events so far happened
    for chance in chances:
        happened = [
            (happened[k] if k < len(happened) else 0.0) * (1 - chance) + (happened[k - 1] * chance if k else 0.0)
            for k in range(len(happened) + 1)
        ]
    return sum(happened[count + 1 :])


@pytest.mark.parametrize("exercise", NEVER_LEARNING, ids=[exercise.title for exercise in NEVER_LEARNING])
def test_without_the_positional_encoding_no_training_passes_the_ceiling(exercise):
    """The claims never to learn hold for every training, not for one seed's path, and so are checked without
    training to the end. Without the positional encoding the model scores every next token alike for every ordering
    of the same symbols (checked on the exercise's model after a few steps), so it writes the same output for each.
    Copy and reverse move each position to a fixed place, so one output is right for one ordering alone: on a
    held-out input whose symbols make ``o`` orderings, each as likely to be drawn, any such model is right with a
    chance of at most 1/o. From those chances, the probability that any model without the encoding passes the
    claimed ceiling at one of the exercise's measurements (every 50 steps) is computed for its held-out inputs,
    and must be under 1%."""
    settings = exercise.settings(steps=20, eval_every=20)
    assert settings.positional == "none" and settings.task in ("copy", "reverse"), "the argument holds for these alone"
    run = train_toy(settings)
    translator, model = run.translator(), run.model()
    sources = [source.split() for source, _ in run.held_out]
    reordered = 0
    for (source, target), words in zip(run.held_out, sources, strict=True):
        rotated = " ".join(words[1:] + words[:1])
        reordered += rotated != source
        # the next-token scores for the right answer, step by step, read by the model given either ordering
        answer = torch.tensor([[model.config.start_id, *translator.target_ids(target, len(words) + 1)]])
        with torch.no_grad():
            scores = [model(torch.tensor([translator.source_ids(text).ids]), answer) for text in (source, rotated)]
        torch.testing.assert_close(scores[1], scores[0], rtol=0, atol=1e-5, msg=f"{source!r} and {rotated!r}")
    assert reordered > 0.9 * len(sources)
    chances = [1 / orderings(words) for words in sources]
    above = chance_above(chances, math.floor(exercise.at_most * len(sources)))
    assert above * (exercise.steps // 50) < 0.01, (exercise.expect, above)


# --- the pool: processes, a queue, one training per owner ------------------------------------------------------------


@pytest.fixture
def pools():
    """Make pools with ``pools(**options)``; each is closed (its trainings stopped) after the test."""
    made: list[TrainingPool] = []

    def make(**options) -> TrainingPool:
        made.append(TrainingPool(**options))
        return made[-1]

    yield make
    for pool in made:
        pool.close()


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_the_pool_refuses_bad_settings_and_a_second_training_per_session(pools):
    pool = pools(slots=1, start_method="spawn")
    with pytest.raises(ValueError, match="divisible"):
        pool.submit("a", replace(TINY, d_model=30, heads=4))
    assert pool.view("a") is None and pool.running() == 0 and pool.waiting() == 0
    pool.submit("a", replace(TINY, steps=5000))
    with pytest.raises(RuntimeError, match="already has a training"):
        pool.submit("a", TINY)
    with pytest.raises(ValueError, match="at least one slot"):
        TrainingPool(slots=0)


def test_an_owner_without_a_job_is_still_cleaned_up_after_when_watched(pools):
    gone = []
    pool = pools(slots=1, alive=lambda owner: False, on_gone=gone.append, grace_s=0.1, start_method="spawn")
    pool.watch("explored-then-reset")
    wait_for(lambda: gone == ["explored-then-reset"], timeout_s=5)


@pytest.mark.slow
def test_a_second_session_waits_its_turn_and_starts_when_the_first_stops(pools):
    pool = pools(slots=1)
    pool.submit("first", replace(TINY, steps=20_000))
    second = pool.submit("second", TINY)
    assert second.state == "queued" and second.position == 1
    third = pool.submit("third", TINY)
    assert third.position == 2
    wait_for(lambda: pool.view("first").step > 0)
    assert pool.view("second").state == "queued"
    pool.stop("first")
    wait_for(lambda: pool.view("first").state == "finished")
    first = pool.view("first")
    assert "by hand" in first.run.stopped and first.run.step == first.step > 0
    wait_for(lambda: pool.view("second").state in ("running", "finished"))
    assert pool.view("third").position == 1
    wait_for(lambda: pool.view("second").state == "finished")
    assert pool.view("second").run.step == TINY.steps
    assert len(pool.view("second").history) == TINY.steps


@pytest.mark.slow
def test_a_closed_sessions_training_ends(pools):
    present = {"a": True}
    pool = pools(slots=1, alive=lambda owner: present.get(owner, False), grace_s=0.5)
    pool.submit("a", replace(TINY, steps=20_000))
    wait_for(lambda: pool.view("a").step > 0)
    process = pool._jobs["a"].process
    present["a"] = False
    wait_for(lambda: pool.view("a") is None, timeout_s=10)
    wait_for(lambda: not process.is_alive(), timeout_s=10)
    assert pool.running() == 0


@pytest.mark.slow
def test_closing_the_pool_ends_its_trainings_and_empties_its_queue(pools):
    pool = pools(slots=1)
    pool.submit("a", replace(TINY, steps=20_000))
    pool.submit("b", TINY)
    wait_for(lambda: pool.view("a").step > 0)
    process = pool._jobs["a"].process
    pool.close()
    assert not process.is_alive()
    assert pool.view("a") is None and pool.view("b") is None and pool.waiting() == 0


@pytest.mark.slow
def test_a_training_continues_in_the_pool_and_a_queued_one_can_be_cancelled(pools):
    pool = pools(slots=1)
    pool.submit("a", TINY)
    queued = pool.submit("b", TINY)
    assert queued.position == 1
    pool.stop("b")
    assert pool.view("b").state == "cancelled" and pool.waiting() == 0
    wait_for(lambda: pool.view("a").state == "finished")
    done = pool.view("a").run
    pool.submit("a", replace(TINY, steps=10), start=done)
    wait_for(lambda: pool.view("a").state == "finished")
    more = pool.view("a")
    assert more.run.step == 40 and len(more.history) == 40 and more.steps == 40
