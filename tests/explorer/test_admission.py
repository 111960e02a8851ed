"""explorer.admission: the first-come, first-served gate every page run passes, and the page waiting its turn."""

from __future__ import annotations

import os
import threading
import time

import pytest
from streamlit.testing.v1 import AppTest

from explorer.admission import FifoGate, available_cores, shared_gate
from tests.helpers import APP, CHECKPOINTS_ENV, REPO


def wait_until(condition, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the gate"
        time.sleep(0.001)


def test_fifo_gate_admits_in_arrival_order_even_against_a_releaser_asking_again():
    gate = FifoGate(1)
    admitted: list[str] = []
    release = {name: threading.Event() for name in "ABCD"}

    def visit(name: str, times: int = 1) -> None:
        for _ in range(times):
            with gate:
                admitted.append(name)
                release[name].wait()
                release[name].clear()

    first = threading.Thread(target=visit, args=("A", 2))
    first.start()
    wait_until(lambda: admitted == ["A"])
    waiters = []
    for count, name in enumerate("BCD", start=1):  # B, C, D ask in this order while A holds the gate
        waiters.append(threading.Thread(target=visit, args=(name,)))
        waiters[-1].start()
        wait_until(lambda count=count: len(gate._waiting) == count)
    release["A"].set()  # A leaves and at once asks again: it queues behind D
    wait_until(lambda: len(admitted) == 2)
    for name in "BCD":
        release[name].set()
    release["A"].set()
    for thread in [first, *waiters]:
        thread.join(timeout=10)
    assert admitted == ["A", "B", "C", "D", "A"]


def test_fifo_gate_never_holds_more_than_its_slots():
    gate = FifoGate(2)
    inside, peak, lock = [0], [0], threading.Lock()

    def visit() -> None:
        with gate:
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.002)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=visit) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert peak[0] == 2 and inside[0] == 0
    with pytest.raises(ValueError):
        FifoGate(0)


def test_fifo_gate_lets_a_holder_through_again_without_a_second_slot():
    gate = FifoGate(1)
    with gate:
        with gate:  # would wait forever for its own slot if the gate were not reentrant
            assert gate.holds()
        assert gate.holds() and gate.is_full()
    assert not gate.holds() and not gate.is_full()
    entered = threading.Event()

    def visit() -> None:
        with gate:
            entered.set()

    other = threading.Thread(target=visit)
    other.start()
    assert entered.wait(timeout=10)  # the nested exit left the slot free for another thread
    other.join(timeout=10)


def test_passing_the_turn_lets_the_waiters_go_first_then_carries_on():
    gate = FifoGate(1, turn_s=0.0)
    order: list[str] = []
    with pytest.raises(RuntimeError):
        gate.pass_turn()  # only a holder has a turn to pass
    with gate:
        gate.pass_turn()  # nobody waits: carries straight on
        order.append("long job, part 1")
        waiters = []
        for queued, name in enumerate(("B", "C"), start=1):

            def visit(name: str = name) -> None:
                with gate:
                    order.append(name)

            waiters.append(threading.Thread(target=visit))
            waiters[-1].start()
            wait_until(lambda queued=queued: gate.waiting() == queued)
        gate.pass_turn()
        order.append("long job, part 2")
        assert gate.holds()
    for waiter in waiters:
        waiter.join(timeout=10)
    assert order == ["long job, part 1", "B", "C", "long job, part 2"]
    assert not gate.is_full()


def test_a_turn_is_passed_only_once_it_has_lasted_turn_s():
    gate = FifoGate(1, turn_s=60.0)
    entered = threading.Event()

    def visit() -> None:
        with gate:
            entered.set()

    with gate:
        waiter = threading.Thread(target=visit)
        waiter.start()
        wait_until(lambda: gate.waiting() == 1)
        gate.pass_turn()  # a quick (e.g. cached) part: the waiter is not let in
        assert gate.waiting() == 1 and not entered.is_set()
        gate.turn_s = 0.0
        gate.pass_turn()  # now it has had its turn: the waiter goes first
        assert entered.is_set()
    waiter.join(timeout=10)


def test_the_shared_gate_has_one_slot_per_available_core():
    assert shared_gate() is shared_gate()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert shared_gate().slots == available_cores() == cores


def hold_every_slot(gate: FifoGate) -> tuple[threading.Event, list[threading.Thread]]:
    """Threads that sit inside ``gate`` until the returned event is set."""
    leave = threading.Event()
    inside = threading.Barrier(gate.slots + 1)

    def hold() -> None:
        with gate:
            inside.wait()
            leave.wait()

    holders = [threading.Thread(target=hold) for _ in range(gate.slots)]
    for holder in holders:
        holder.start()
    inside.wait(timeout=10)
    return leave, holders


def test_a_page_run_waits_for_its_turn_and_then_draws_the_page(monkeypatch, tiny_checkpoint):
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tiny_checkpoint.parent))
    app = AppTest.from_file(APP, default_timeout=60)
    gate = shared_gate()
    leave, holders = hold_every_slot(gate)
    run = threading.Thread(target=app.run)
    run.start()
    wait_until(lambda: gate.waiting() == 1)  # the page asked for a turn and is queued
    time.sleep(0.3)
    assert run.is_alive() and gate.waiting() == 1  # and stays queued while every slot is taken
    leave.set()
    for thread in [*holders, run]:
        thread.join(timeout=60)
    assert not run.is_alive() and not app.exception
    assert app.text_input(key="sentence").value  # the whole page was drawn once admitted
    assert not gate.is_full()


def test_the_server_runs_no_full_garbage_collection_after_each_page_run(monkeypatch):
    """Streamlit's default gc.collect(2) after every script run was most of a real server's CPU per edit, holding the
    interpreter lock against every other session (docs/performance.md); the app's configuration turns it off."""
    from streamlit import config

    monkeypatch.chdir(REPO)  # where `streamlit run app.py` starts, and reads .streamlit/config.toml
    config.get_config_options(force_reparse=True)
    assert config.get_option("runner.postScriptGC") is False
