"""Resident memory of a real ``streamlit run app.py`` server.

server_rss_mb: while a client edits the sentence.

The client speaks Streamlit's own websocket protocol (what the browser does): it opens a
session on /_stcore/stream, asks for a run, learns the id of the "Source sentence" text
area from the page it gets back, and then sends a new sentence as that widget's value for
each interaction, waiting for ``script_finished`` every time. Each interaction is a new
trace (greedy, the page's default) plus the default view's figures, exactly as for a
person typing. The server's RSS is read from /proc after 10 and after the last interaction;
flat memory means the second is not much larger than the first (the trace cache holds at
most 256 traces, so some growth up to that is expected and bounded).

model_budget_rss_mb: while ten sessions open two models of opus-mt-en-de's shape in turns, on a server whose
model memory budget (ATTENTION_EXPLORER_MODEL_MEMORY_MB) holds one and a half of them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.app_benchmarks import CLASSROOM_PIECES, app_checkpoints
from benchmarks.context import Context
from benchmarks.records import Check, Record
from benchmarks.server import free_port, stop, wait_for_health
from benchmarks.subject import REPO, sentence_with_pieces
from deploy.launch import replica_command

START_LIMIT_S = 120
RUN_LIMIT_S = 120


def rss_mb(pid: int) -> float:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


class PageClient:
    """A minimal Streamlit browser: sends reruns over the websocket and reads the page until the run ends."""

    def __init__(self, url: str, replica: str = "") -> None:
        """A session on the server at ``url``; behind deploy.launch's nginx, on ``replica`` (its address) when given
        (nginx's explorer_replica cookie)."""
        from websockets.sync.client import connect

        self.connection = connect(
            url.replace("http://", "ws://") + "/_stcore/stream",
            subprotocols=["streamlit"],
            max_size=None,
            open_timeout=30,
            additional_headers={"Cookie": f"explorer_replica={replica}"} if replica else None,
        )
        self.sentence_widget_id: str | None = None
        self.tables: set[int] = set()  # tokenization tables seen (hashes): one per sentence means edits took effect

    def rerun(self, query_string: str = "", sentence: str | None = None) -> int:
        """One script run; returns the bytes received. Raises if the page shows an exception."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        message = BackMsg()
        message.rerun_script.query_string = query_string
        if sentence is not None:
            if self.sentence_widget_id is None:
                raise RuntimeError("the Source sentence text area was not seen on the page")
            state = message.rerun_script.widget_states.widgets.add()
            state.id = self.sentence_widget_id
            state.string_value = sentence
        self.connection.send(message.SerializeToString())
        received = 0
        deadline = time.monotonic() + RUN_LIMIT_S
        while True:
            data = self.connection.recv(timeout=max(1.0, deadline - time.monotonic()))
            received += len(data)
            forward = ForwardMsg()
            forward.ParseFromString(data)
            kind = forward.WhichOneof("type")
            if kind == "delta" and forward.delta.WhichOneof("type") == "new_element":
                element = forward.delta.new_element
                element_type = element.WhichOneof("type")
                if element_type == "exception":
                    raise RuntimeError(f"app.py raised: {element.exception.message}")
                if element_type == "dataframe":
                    self.tables.add(hash(element.dataframe.SerializeToString()))
                if element_type == "text_input" and element.text_input.label == "Source sentence":
                    self.sentence_widget_id = element.text_input.id
            if kind == "script_finished":
                if forward.script_finished == ForwardMsg.FINISHED_WITH_COMPILE_ERROR:
                    raise RuntimeError("app.py failed to compile")
                if forward.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
                    return received

    @property
    def replica(self) -> str:
        """Behind deploy.launch's nginx: the replica that took this connection (the explorer_replica cookie nginx
        set on the handshake's answer); "" elsewhere."""
        for header in self.connection.response.headers.get_all("Set-Cookie"):
            name, _, rest = header.partition("=")
            if name.strip() == "explorer_replica":
                return rest.split(";")[0]
        return ""

    def close(self) -> None:
        self.connection.close()


@contextmanager
def app_server(ctx: Context, log_dir: Path, **env: str) -> Iterator[tuple[str, int]]:
    """A real ``streamlit run app.py`` on a free port, with ``env`` added to this process's environment (and no
    CUDA unless the subject runs there); yields its URL and process id, stops it after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = replica_command(port)  # served as the lecture-hall launcher serves each replica
    environment = {**os.environ, **env}
    if ctx.subject.device.type != "cuda":
        environment["CUDA_VISIBLE_DEVICES"] = ""  # the page's "auto" device then means the CPU, as asked
    log = log_dir / "streamlit.log"
    with log.open("w") as output:
        server = subprocess.Popen(command, cwd=REPO, env=environment, stdout=output, stderr=subprocess.STDOUT)
        try:
            wait_for_health(url, server, log, START_LIMIT_S)
            yield url, server.pid
        finally:
            stop(server)


def server_rss_mb(ctx: Context) -> list[Record]:
    translator = ctx.subject.translator
    interactions = ctx.reps(50, 100)
    early = 10
    sentences = [sentence_with_pieces(translator, CLASSROOM_PIECES, seed=3000 + i) for i in range(interactions)]
    samples: dict[str, float] = {}
    timings: list[float] = []
    tables = 0
    with app_checkpoints(ctx.subject.folder), tempfile.TemporaryDirectory(prefix="bench-server-") as logs:
        with app_server(ctx, Path(logs)) as (url, pid):
            samples["idle"] = rss_mb(pid)
            client = PageClient(url)
            try:
                client.rerun()
                samples["first_page"] = rss_mb(pid)
                for index, sentence in enumerate(sentences, start=1):
                    began = time.perf_counter()
                    client.rerun(sentence=sentence)
                    timings.append(time.perf_counter() - began)
                    if index == early:
                        samples[f"after_{early}"] = rss_mb(pid)
                samples[f"after_{interactions}"] = rss_mb(pid)
            finally:
                tables = len(client.tables)
                client.close()
    value, baseline = samples[f"after_{interactions}"], samples[f"after_{early}"]
    return [
        Record(
            "server_rss_mb",
            value,
            "MB",
            baseline,
            (Check("value", "<=", 700.0), Check("ratio", "<=", 1.1)),
            {
                "case": f"{interactions} sentence edits over the websocket",
                "baseline_is": f"the same server's RSS after {early} edits (ratio = growth from {early} to "
                f"{interactions}; flat means close to 1)",
                "server": "streamlit run app.py --server.headless true (subprocess), driven over /_stcore/stream",
                "rss_mb": samples,
                "interaction": f"new {CLASSROOM_PIECES}-piece sentence, greedy (page default), default view",
                "median_interaction_ms": sorted(timings)[len(timings) // 2] * 1000,
                "distinct_tokenization_tables_shown": tables,
            },
        )
    ]


MODEL_SESSIONS = 10


def model_budget_rss_mb(ctx: Context) -> list[Record]:
    """Two random models of opus-mt-en-de's shape (about 300 MB of weights each) saved as checkpoints, a server
    whose budget holds one and a half, ten sessions asking for them in turns. The server's peak RSS is compared
    with its RSS after one page on the small subject model plus the budget: at most 1 means the budget bounds what
    the large models take."""
    import torch

    from benchmarks.model_benchmarks import opus_shaped_translator
    from explorer.open_models import MEMORY_ENV, weight_bytes
    from model.checkpoint import save_checkpoint

    opus = opus_shaped_translator(ctx.subject.translator.tokenizer, torch.device("cpu"))
    model_mb = weight_bytes(opus.model) / 2**20
    budget_mb = int(1.5 * model_mb)
    rounds = ctx.reps(2, 3)
    names = ("opus-shape-a", "opus-shape-b")
    sentence = "Two young men are playing football on a green field next to a river."
    samples: list[float] = []
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-models-") as root:
        for name in names:
            save_checkpoint(Path(root) / name, opus.model, opus.tokenizer, {"name": name, "domain": "random weights"})
        del opus
        shutil.copytree(ctx.subject.folder, Path(root) / ctx.subject.folder.name)  # the small model the page opens on
        budget = {"ATTENTION_EXPLORER_CHECKPOINTS": root, MEMORY_ENV: str(budget_mb)}
        with app_server(ctx, Path(root), **budget) as (url, pid):
            clients = [PageClient(url) for _ in range(MODEL_SESSIONS)]
            try:
                clients[0].rerun(query_string=f"checkpoint={ctx.subject.folder.name}")
                warm = rss_mb(pid)  # torch, the page and one small model: what any server holds
                for round_index in range(rounds):
                    for index, client in enumerate(clients):
                        name = names[(index + round_index) % 2]
                        # half the pages on the decoding steps, whose fragment keeps the page's context between runs
                        view = ("cross", "steps")[index % 2]
                        query = f"checkpoint={name}&view={view}&sentence={sentence.replace(' ', '+')}"
                        try:
                            client.rerun(query_string=query)
                        except Exception as error:  # a crash or an exception on the page is what this counts
                            errors.append(f"{name}: {error}")
                        samples.append(rss_mb(pid))
            finally:
                for client in clients:
                    client.close()
    if errors:  # nothing may crash: a page that failed is a failed benchmark, not a number
        raise RuntimeError(f"{len(errors)} of {len(samples)} page runs failed, first: {errors[0]}")
    peak = max(samples)
    return [
        Record(
            "model_budget_rss_mb",
            peak,
            "MB",
            warm + budget_mb,
            (Check("ratio", "<=", 1.0),),
            {
                "case": f"{MODEL_SESSIONS} sessions x {rounds} rounds, each opening the other of two models of "
                f"opus-mt-en-de's shape ({model_mb:.0f} MB of weights each), half on the decoding steps",
                "baseline_is": f"the server's RSS after one page on the small {ctx.subject.folder.name} "
                f"({warm:.0f} MB: torch, the page, that model) + the budget ({budget_mb} MB, one and a half models)",
                "rss_mb_samples": [round(sample) for sample in samples],
            },
        )
    ]
