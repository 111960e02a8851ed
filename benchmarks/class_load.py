"""A class through nginx: a teacher's page and sixty students' pages on two replicas (``python -m deploy.launch``),
one SQLite class store between them, every page a real websocket session run as a browser runs it (ClassPage).

``class_follow_p95_ms``: each teacher move (a new sentence) until every student's page shows it, p95 over the moves;
students half on the teacher's replica, half on the other. Baseline: one page's own sentence edit, no class
connected. With it, ``single_edit_ratio`` in the params: a lone page's edit while the class is connected and still
against the same edit with no class (before it joined and after it left).

``class_answers_failover``: sixty students answer one question, half before and half after the replica holding half
of them is killed; those pages reconnect through nginx to the live replica (their URL keeps the class and seat, as
a browser's does) and answer if they had not. Value: answers counted; the target: all sixty, none twice.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from benchmarks.app_benchmarks import CLASSROOM_PIECES, app_checkpoints
from benchmarks.context import Context
from benchmarks.memory import PageClient
from benchmarks.proxy_load import hall_cpu_s, hall_env, need_nginx
from benchmarks.records import Check, Record
from benchmarks.server import lecture_hall
from benchmarks.subject import sentence_with_pieces
from benchmarks.timing import median, percentile

STUDENTS = 60
MOVES = 5
SETTLE_S = 4.0  # between two teacher moves: every page has followed the last before the next
RUN_LIMIT_S = 120.0
LONE_EDITS = 10


class ClassPage(PageClient):
    """PageClient's session as a class's page runs it: it keeps the query string the page writes, draws the runs the
    server starts by itself (``listen``), reruns a fragment that asks to be rerun every so often, presses a button by
    its key (in the button's fragment), and records when its sentence box showed each sentence."""

    def __init__(self, url: str, replica: str = "") -> None:
        super().__init__(url, replica)
        self.query = ""
        self.fragment = ""  # the class strip's fragment, once the page asked to be rerun every half second
        self.interval_s = 0.5
        self.widgets: dict[str, tuple[str, str]] = {}  # widget key (the end of its id) -> (id, its fragment id)
        self.first_seen: dict[str, float] = {}  # sentence -> when the sentence box first showed it
        self.showed_answer = False  # the strip said "Your answer: ..." (an answer this seat gave)

    def run(self, query: str | None = None, fragment: str = "", press: str = "", sentence: str | None = None) -> None:
        """One run (a fragment's with ``fragment``), pressing the button whose key is ``press`` or typing
        ``sentence``; returns once the page is drawn (a run the fragment turned into a page run included)."""
        from streamlit.proto.BackMsg_pb2 import BackMsg

        message = BackMsg()
        message.rerun_script.query_string = self.query if query is None else query
        if fragment:
            message.rerun_script.fragment_id = fragment
            message.rerun_script.is_auto_rerun = True
        if press:
            state = message.rerun_script.widget_states.widgets.add()
            state.id, state.trigger_value = self.widgets[press][0], True
            message.rerun_script.fragment_id = self.widgets[press][1]
        if sentence is not None:
            state = message.rerun_script.widget_states.widgets.add()
            state.id, state.string_value = self.widgets["sentence"][0], sentence
        self.connection.send(message.SerializeToString())
        deadline = time.monotonic() + RUN_LIMIT_S
        while not self.receive(max(1.0, deadline - time.monotonic())):
            pass

    def receive(self, timeout_s: float) -> bool:
        """Read one message (waiting up to ``timeout_s``); True when it ends a run."""
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        forward = ForwardMsg()
        forward.ParseFromString(self.connection.recv(timeout=timeout_s))
        kind = forward.WhichOneof("type")
        if kind == "page_info_changed":
            self.query = forward.page_info_changed.query_string
        elif kind == "auto_rerun":
            self.fragment, self.interval_s = forward.auto_rerun.fragment_id, forward.auto_rerun.interval
        elif kind == "delta" and forward.delta.WhichOneof("type") == "new_element":
            self._read(forward.delta.new_element, forward.delta.fragment_id)
        elif kind == "script_finished":
            if forward.script_finished == ForwardMsg.FINISHED_WITH_COMPILE_ERROR:
                raise RuntimeError("app.py failed to compile")
            return forward.script_finished in (
                ForwardMsg.FINISHED_SUCCESSFULLY,
                ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY,
            )
        return False

    def _read(self, element, fragment: str) -> None:
        kind = element.WhichOneof("type")
        if kind == "exception":
            raise RuntimeError(f"app.py raised: {element.exception.message}")
        if kind == "text_input" and element.text_input.label == "Source sentence":
            self.widgets["sentence"] = (element.text_input.id, fragment)
            self.first_seen.setdefault(element.text_input.value, time.monotonic())
        elif kind == "button":
            self.widgets[element.button.id.rsplit("-", 1)[-1]] = (element.button.id, fragment)
        elif kind == "markdown" and element.markdown.body.startswith("Your answer"):
            self.showed_answer = True

    def listen(self, until: Callable[[], bool], limit_s: float = RUN_LIMIT_S) -> None:
        """Draw what the server sends, rerunning an auto-rerun fragment at its interval as the browser does, until
        ``until()`` (checked between messages) or ``limit_s``."""
        from websockets.exceptions import ConnectionClosed

        deadline = time.monotonic() + limit_s
        next_look = time.monotonic() + self.interval_s
        while not until() and time.monotonic() < deadline:
            try:
                # a page with nothing to rerun waits longer between checks of ``until``: sixty listeners waking ten
                # times a second took the cores from the servers they measure
                self.receive(0.1 if self.fragment else 0.5)
            except TimeoutError:
                pass
            except ConnectionClosed:
                raise
            if self.fragment and time.monotonic() >= next_look:
                self.run(fragment=self.fragment)
                next_look = time.monotonic() + self.interval_s


def replicas_of(run_dir: Path) -> list[str]:
    return [f"127.0.0.1:{port}" for port in json.loads((run_dir / "replicas.json").read_text())]


def students_looking(pages: list[ClassPage], stop: threading.Event, errors: list[str]) -> list[threading.Thread]:
    """A thread per page that draws what its server sends (and reruns what asks to be) until ``stop``."""

    def keep_looking(page: ClassPage) -> None:
        try:
            page.listen(stop.is_set, limit_s=3600)
        except Exception as error:  # reported with the record
            errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=keep_looking, args=(page,), daemon=True) for page in pages]
    for thread in threads:
        thread.start()
    return threads


def cpu_over(run_dir: Path, seconds: float) -> tuple[float, float]:
    """CPU seconds the replicas and this process (the simulated browsers) use over ``seconds`` of waiting."""
    hall, clients = hall_cpu_s(run_dir), time.process_time()
    time.sleep(seconds)
    return hall_cpu_s(run_dir) - hall, time.process_time() - clients


def lone_edits(url: str, replica: str, sentences: list[str]) -> list[float]:
    page = ClassPage(url, replica)
    page.run(f"sentence={quote(sentences[0])}")
    times = []
    for sentence in sentences[1:]:
        began = time.perf_counter()
        page.run(sentence=sentence)
        times.append(time.perf_counter() - began)
    page.close()
    return times


def open_class(url: str, store: Path, replicas: list[str]) -> tuple[str, str, ClassPage, list[ClassPage]]:
    """A class made as ``python -m explorer.classes new`` makes one, the teacher's page on the first replica (on the
    decoding steps), and STUDENTS pages joined, alternately on each replica."""
    from explorer.classes.store import open_store

    made = open_store(f"sqlite:///{store}").create_class(hours=1)
    teacher = ClassPage(url, replicas[0])
    teacher.run(f"class={made.code}&teacher={made.teacher_key}&view=steps")
    students = [ClassPage(url, replicas[index % 2]) for index in range(STUDENTS)]
    for student in students:
        student.run(f"class={made.code}")
    return made.code, made.teacher_key, teacher, students


def class_follow_p95_ms(ctx: Context) -> list[Record]:
    need_nginx()
    translator = ctx.subject.translator
    sentences = [sentence_with_pieces(translator, CLASSROOM_PIECES, seed=7000 + i) for i in range(MOVES + 1)]
    lone = [sentence_with_pieces(translator, CLASSROOM_PIECES, seed=7100 + i) for i in range(3 * (LONE_EDITS + 1))]
    before, during_class, after = (lone[i * (LONE_EDITS + 1) : (i + 1) * (LONE_EDITS + 1)] for i in range(3))
    errors: list[str] = []
    stop = threading.Event()
    with app_checkpoints(ctx.subject.folder), tempfile.TemporaryDirectory(prefix="bench-class-") as root:
        run_dir = Path(root) / "hall"
        env = hall_env(ctx, ATTENTION_EXPLORER_CLASS_STORE=f"sqlite:///{Path(root) / 'classes.sqlite'}")
        with lecture_hall(2, run_dir, env) as url:
            replicas = replicas_of(run_dir)
            alone = lone_edits(url, replicas[0], before)
            _, _, teacher, students = open_class(url, Path(root) / "classes.sqlite", replicas)
            threads = students_looking(students, stop, errors)
            latencies: list[float] = []
            idle_s = cpu_over(run_dir, SETTLE_S)  # the class polling, nobody moving
            cpu_before, clients_before = hall_cpu_s(run_dir), time.process_time()
            for sentence in sentences[1:]:
                sent = time.monotonic()
                teacher.run(sentence=sentence)
                time.sleep(SETTLE_S)
                for student in students:
                    seen = student.first_seen.get(sentence)
                    latencies.append(float("inf") if seen is None else seen - sent)
            moves_cpu_s = hall_cpu_s(run_dir) - cpu_before - idle_s[0] * MOVES
            clients_cpu_s = time.process_time() - clients_before - idle_s[1] * MOVES
            during = lone_edits(url, replicas[0], during_class)  # the class connected, following, still
            stop.set()
            for thread in threads:
                thread.join(timeout=RUN_LIMIT_S)
            for page in (teacher, *students):
                page.close()
            alone += lone_edits(url, replicas[0], after)
    missed = sum(1 for latency in latencies if latency == float("inf"))
    seen = [latency for latency in latencies if latency != float("inf")]
    if not seen:
        raise RuntimeError(f"no student followed; errors: {errors[:3]}")
    return [
        Record(
            "class_follow_p95_ms",
            percentile(latencies, 95) * 1000 if not missed else float("inf"),
            "ms",
            median(alone) * 1000,
            (Check("value", "<=", 1500.0), Check("errors", "<=", 0), Check("missed", "<=", 0)),
            {
                "case": f"a teacher and {STUDENTS} students following, 2 replicas behind nginx, one SQLite store",
                "baseline_is": "one page's own sentence edit with no class, before it opened and after it closed "
                "(median)",
                "moves": MOVES,
                "statistic": "p95 over every student and move, from the teacher's edit sent to the student's page "
                "showing the sentence",
                "missed": float(missed),
                "errors": float(len(errors)),
                "error_samples": errors[:5],
                "p50_ms": median(seen) * 1000,
                "max_ms": max(seen) * 1000,
                "single_edit_ms_while_following": median(during) * 1000,
                "single_edit_ratio": median(during) / median(alone),
                # CPU seconds per move beyond the polling's, and the polling's per second
                "replicas_cpu_ms_per_student_follow": moves_cpu_s * 1000 / (MOVES * STUDENTS),
                "clients_cpu_ms_per_student_follow": clients_cpu_s * 1000 / (MOVES * STUDENTS),
                "replicas_cpu_share_polling": idle_s[0] / SETTLE_S,
                "clients_cpu_share_still": idle_s[1] / SETTLE_S,
                "value_samples": sorted(latency * 1000 for latency in seen),
            },
        )
    ]


def class_answers_failover(ctx: Context) -> list[Record]:
    from explorer.classes.store import open_store

    need_nginx()
    translator = ctx.subject.translator
    sentence = sentence_with_pieces(translator, CLASSROOM_PIECES, seed=7200)
    errors: list[str] = []
    lock = threading.Lock()
    with app_checkpoints(ctx.subject.folder), tempfile.TemporaryDirectory(prefix="bench-answers-") as root:
        run_dir = Path(root) / "hall"
        store = Path(root) / "classes.sqlite"
        with lecture_hall(2, run_dir, hall_env(ctx, ATTENTION_EXPLORER_CLASS_STORE=f"sqlite:///{store}")) as url:
            replicas = replicas_of(run_dir)
            code, key, teacher, students = open_class(url, store, replicas)
            teacher.run(sentence=sentence)
            teacher.run(press="class_ask")
            asked = open_store(f"sqlite:///{store}").info(code).question
            if asked is None:
                raise RuntimeError("the teacher's Ask did not ask")
            choices = len(asked.question.choices)

            def answer(index: int, page: ClassPage) -> None:
                """Answer as the student would: once the page shows the question, press its choice, unless the page
                shows its answer already (an answer given before a reconnection)."""
                button = f"class_choice_{asked.id}_{index % choices}"
                page.listen(lambda: button in page.widgets or page.showed_answer, limit_s=30)
                if button in page.widgets:
                    page.run(press=button)

            first_half = list(range(0, STUDENTS, 2)) + list(range(1, STUDENTS // 2, 2))
            for index in first_half:
                answer(index, students[index])
            victim = replicas[1]
            pids = json.loads((run_dir / "replicas.json").read_text())
            os.kill(pids[victim.rsplit(":", 1)[1]], signal.SIGKILL)

            def rest(index: int) -> None:
                page = students[index]
                try:
                    if index % 2 == 1:  # on the killed replica: the browser reconnects through nginx, same URL
                        page.close()
                        deadline = time.monotonic() + 60
                        while True:
                            try:
                                page = ClassPage(url, victim)
                                page.run(page.query or students[index].query)
                                break
                            except Exception:
                                if time.monotonic() > deadline:
                                    raise
                                time.sleep(0.5)
                    answer(index, page)  # answered before the kill: the page shows its answer, no choice to press
                except Exception as error:
                    with lock:
                        errors.append(f"{type(error).__name__}: {error}")

            threads = [threading.Thread(target=rest, args=(index,)) for index in range(STUDENTS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=RUN_LIMIT_S)
            counts = open_store(f"sqlite:///{store}").counts(asked.id)
            rows = open_store(f"sqlite:///{store}").count_rows()["answers"]
    return [
        Record(
            "class_answers_failover",
            float(sum(counts)),
            "answers",
            float(STUDENTS),
            (Check("value", ">=", STUDENTS), Check("ratio", "<=", 1.0), Check("errors", "<=", 0)),
            {
                "case": f"{STUDENTS} students on 2 replicas answer one question; {len(first_half)} answer, then the "
                "replica holding half of them is killed, and every page answers (again)",
                "baseline_is": "the number of students",
                "answer_rows": rows,
                "counts": counts,
                "errors": float(len(errors)),
                "error_samples": errors[:5],
                "killed": victim,
            },
        )
    ]
