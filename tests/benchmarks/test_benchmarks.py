"""The benchmark harness itself, on the tiny random checkpoint: registry, CLI, JSON records, ratios.

No timing is asserted: only that the harness runs, emits one valid record per result, and
that every ratio is value / baseline with value (and baseline) the stated statistic of the
samples the record carries. The tests that run benchmarks are in the slow tier; the quick ones
check the registry, the records and the parts the benchmarks are built from.
"""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import subprocess
import sys

import pytest
import torch
from streamlit.testing.v1 import AppTest

from benchmarks import (
    app_benchmarks,
    browser_benchmarks,
    model_benchmarks,
    run,
    server,
    subject,
    train_worker,
    training_benchmarks,
    training_vs_torch,
)
from benchmarks.records import Check, Record, table
from benchmarks.timing import percentile
from model.checkpoint import read_config
from model.decoding.search import greedy_decode
from model.training.data import encode_examples, token_batches
from tests.helpers import CHECKPOINTS_ENV

EXPECTED = {
    "forward_vs_torch",
    "capture_overhead",
    "activation_capture_overhead",
    "kv_cache_speedup",
    "step_ms",
    "trace_ms",
    "opus_trace_ms",
    "sampled_trace_ms",
    "sample_again_ms",
    "figures_ms",
    "attribution_ms",
    "app_edit_ms",
    "app_step_ms",
    "classroom_p95_ms",
    "long_input_ms",
    "first_heatmap_ms",
    "edit_redraw_ms",
    "head_switch_ms",
    "view_switch_ms",
    "map_click_ms",
    "step_redraw_ms",
    "edit_overhead_ms",
    "opus_edit_overhead_ms",
    "train_tokens_vs_torch",
    "server_rss_mb",
    "model_budget_rss_mb",
    "train_epoch_s",
    "train_tokens_per_s",
    "train_tokens_per_s_1536",
    "train_tokens_per_s_bf16",
    "live_reverse_s",
    "live_browser_reverse_s",
    "live_refresh_s",
    "live_click_ms",
    "classroom_training_p95_ms",
    "training_rss_mb",
    "proxy_p95_ms",
    "proxy_failover_s",
    "class_follow_p95_ms",
    "hall_threads_p95_ms",
    "class_answers_failover",
}
FIELDS = {"name", "value", "unit", "baseline", "ratio", "target", "met", "params"}
# cheap on a tiny model; together they cover the ms, tokens/s and budget-baseline kinds of record
FAST = ("capture_overhead", "kv_cache_speedup", "step_ms", "sample_again_ms", "figures_ms")


def test_every_benchmark_is_registered_once():
    assert set(run.NAMES) == EXPECTED
    assert len(run.NAMES) == len(set(run.NAMES))


def test_unknown_name_is_refused():
    with pytest.raises(SystemExit, match="unknown benchmark"):
        run.selected("step_ms,no_such_benchmark")


def test_names_sharing_setup_run_together():
    plan = run.selected("app_step_ms,app_edit_ms,step_ms")
    assert [names for _, names in plan] == [("step_ms",), ("app_edit_ms", "app_step_ms")]


def test_record_ratio_target_and_met():
    record = Record("x", 3.0, "ms", 2.0, (Check("ratio", "<=", 1.3), Check("value", "<=", 10.0)))
    assert record.ratio == 1.5 and record.target == "ratio <= 1.3 and value <= 10 ms" and not record.met
    assert json.loads(record.to_json())["ratio"] == 1.5


def test_a_check_on_a_reported_number_decides_met_with_the_others():
    checks = (Check("value", "<=", 2500.0), Check("errors", "<=", 0))
    assert Record("x", 900.0, "ms", 800.0, checks, {"errors": 0.0}).met is True
    failed = Record("x", 900.0, "ms", 800.0, checks, {"errors": 2.0})  # fast, but sessions failed
    assert failed.met is False and failed.target == "value <= 2500 ms and errors <= 0"


def test_a_record_without_target_is_neither_met_nor_missed():
    record = Record("x", 3.0, "s", 2.0, ())
    assert record.met is None and record.target == "none (figure reported)"
    assert json.loads(record.to_json())["met"] is None
    assert table([record]).splitlines()[-1].rstrip().endswith("-")


def test_epoch_benchmark_runs_on_cuda_by_default_and_anywhere_when_named(tmp_path):
    (tmp_path / "train.en").write_text("a dog\n")
    plan = run.selected(None)
    kept, skipped = run.runnable(plan, named=False, device="cpu", data=tmp_path)
    assert "train_epoch_s" not in {name for _, names in kept for name in names}
    assert skipped == ["train_epoch_s: not run on cpu unless named in --only"]
    kept, skipped = run.runnable(plan, named=False, device="cuda", data=tmp_path)
    assert len(kept) == len(plan) - 1  # all but the CPU training throughput
    assert skipped == [
        "train_tokens_per_s, train_tokens_per_s_1536, train_tokens_per_s_bf16: not run on cuda unless named in --only"
    ]
    kept, skipped = run.runnable(run.selected("train_epoch_s"), named=True, device="cpu", data=tmp_path)
    assert [names for _, names in kept] == [("train_epoch_s",)] and not skipped


def test_epoch_benchmark_without_data_is_skipped_or_refused_when_named(tmp_path):
    kept, skipped = run.runnable(run.selected(None), named=False, device="cuda", data=tmp_path / "missing")
    assert "train_epoch_s" not in {name for _, names in kept for name in names}
    assert skipped == [
        f"{names}: no training data in {tmp_path / 'missing'} (--data)"
        for names in ("train_tokens_per_s, train_tokens_per_s_1536, train_tokens_per_s_bf16", "train_epoch_s")
    ]
    with pytest.raises(SystemExit, match="no training files"):
        run.runnable(run.selected("train_epoch_s"), named=True, device="cpu", data=tmp_path / "missing")


def test_percentile_matches_linear_interpolation():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 50) == 3.0 and percentile(values, 95) == pytest.approx(4.8)


def test_default_checkpoint_falls_back_to_the_newest_folder(monkeypatch, tmp_path, tiny_checkpoint):
    monkeypatch.setattr(subject, "DEFAULT_CHECKPOINT", tmp_path / "missing")
    monkeypatch.setattr(subject, "CHECKPOINTS", tiny_checkpoint.parent)
    chosen = subject.resolve_subject(None, "cpu")
    assert chosen.source == "newest checkpoint" and chosen.folder == tiny_checkpoint
    assert any("does not exist" in note for note in chosen.notes)


def test_random_stand_in_has_the_default_checkpoints_architecture():
    """The random model stands in for checkpoints/multi30k-en-de: when that model changes shape, so must it."""
    shipped = read_config(subject.DEFAULT_CHECKPOINT)
    assert {name: getattr(shipped, name) for name in subject.SHIPPED} == subject.SHIPPED
    assert shipped.src_vocab_size == shipped.tgt_vocab_size == subject.SHIPPED_VOCAB


def test_sentence_has_the_asked_number_of_pieces(tiny_checkpoint):
    translator = subject.load_checkpoint(tiny_checkpoint, device="cpu")
    for pieces in (15, 30):
        text = subject.sentence_with_pieces(translator, pieces, seed=pieces)
        assert len(translator.source_ids(text).ids) == pieces
    longest = subject.sentence_with_pieces(translator, 10_000)
    assert len(translator.source_ids(longest).ids) == translator.config.max_len


def test_the_kv_cache_baseline_writes_the_tokens_of_cached_greedy_decoding(tiny_checkpoint):
    """kv_cache_speedup compares greedy_decode with greedy_recompute, both run to the length asked (NeverEnds)."""
    model = subject.load_checkpoint(tiny_checkpoint, device="cpu").model
    never_ends = model_benchmarks.NeverEnds(model)
    src = model_benchmarks.random_ids(model, 2, 9, seed=5)
    config = model.config
    assert not {config.pad_id, config.unk_id, config.bos_id, config.eos_id} & set(src.flatten().tolist())
    cached = greedy_decode(never_ends, src, max_new_tokens=12)
    assert [len(tokens) for tokens in cached] == [12, 12]
    assert model_benchmarks.greedy_recompute(never_ends, src, 12) == cached


def test_the_figures_benchmark_draws_the_default_views_figures_as_the_page_sends_them(tiny_checkpoint):
    trace = subject.load_checkpoint(tiny_checkpoint, device="cpu").trace("a man rides a blue bike.", beam_size=1)
    figures = app_benchmarks.default_view_figures(trace)
    titles = ["Cross", "Probability of each output token", "Step 1"]
    assert [figure.layout.title.text for figure in figures] == titles
    sent = [app_benchmarks.serialise(figure) for figure in figures]
    assert [json.loads(text)["layout"]["title"]["text"] for text in sent] == titles
    assert app_benchmarks.draw(app_benchmarks.default_view_figures, trace) == sum(len(text) for text in sent)


def test_the_app_benchmarks_serve_only_the_subject_and_restore_the_checkpoints_variable(tiny_checkpoint, monkeypatch):
    assert app_benchmarks.CHECKPOINTS_ENV == CHECKPOINTS_ENV  # the variable app.py reads
    monkeypatch.setenv(CHECKPOINTS_ENV, "before")
    with app_benchmarks.app_checkpoints(tiny_checkpoint) as folder:
        assert os.environ[CHECKPOINTS_ENV] == str(folder)
        assert [path.name for path in folder.iterdir()] == [tiny_checkpoint.name]
    assert os.environ[CHECKPOINTS_ENV] == "before" and not folder.exists()


def test_the_browser_benchmarks_bare_page_draws_one_heatmap_of_the_words_typed():
    """The floor first_heatmap_ms and edit_redraw_ms are compared with, found by browser_benchmarks.SENTENCE_BOX."""
    app = AppTest.from_file(str(browser_benchmarks.BARE_PAGE), default_timeout=60).run()
    assert not app.exception
    (box,) = app.text_input
    assert f"input[aria-label='{box.label}']" in browser_benchmarks.SENTENCE_BOX
    box.input("a dog runs").run()
    (chart,) = app.get("plotly_chart")
    figure = json.loads(chart.proto.spec)
    assert [trace["type"] for trace in figure["data"]] == ["heatmap"]
    assert figure["layout"]["xaxis"]["ticktext"] == figure["layout"]["yaxis"]["ticktext"] == ["a", "dog", "runs"]
    (picker,) = app.selectbox  # the floor of a control's rerun (head_switch_ms and the others)
    assert picker.label == "Head" and figure["layout"]["title"]["text"] == "head 1"
    picker.set_value(2).run()
    (chart,) = app.get("plotly_chart")
    redrawn = json.loads(chart.proto.spec)
    assert redrawn["layout"]["title"]["text"] == "head 3" and redrawn["data"][0]["z"] != figure["data"][0]["z"]


def test_the_matmul_peak_is_a_rate_and_leaves_the_thread_count_as_it_was():
    threads = torch.get_num_threads()
    assert training_benchmarks.matmul_peak_flops(1, size=64, repeats=2) > 0
    assert torch.get_num_threads() == threads


def test_the_training_worker_times_the_default_batch_of_the_throughput_record():
    arguments = train_worker.build_parser().parse_args(["--tree", "t", "--checkpoint", "c", "--data", "d"])
    assert training_benchmarks.CASES["train_tokens_per_s"] == (arguments.max_tokens, arguments.cpu_bf16)
    with pytest.raises(SystemExit):
        train_worker.build_parser().parse_args(["--checkpoint", "c", "--data", "d"])  # --tree is required


def test_a_server_that_exits_before_it_answers_is_reported_with_its_log(tmp_path):
    port = server.free_port()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # free to listen on
    log = tmp_path / "streamlit.log"
    log.write_text("Traceback: the page could not start\n")
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    exited.wait()
    with pytest.raises(RuntimeError, match="exited with code 3") as error:
        server.wait_for_health(f"http://127.0.0.1:{port}", exited, log, limit_s=10)
    assert "the page could not start" in str(error.value)


@pytest.mark.slow
def test_quick_run_writes_one_valid_record_per_result(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "results.jsonl"
    argv = ["--quick", "--device", "cpu", "--checkpoint", str(tiny_checkpoint), "--only", ",".join(FAST)]
    assert run.main([*argv, "--out", str(out)]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert printed == written
    assert [r["name"] for r in written] == list(FAST)
    for record in written:
        assert set(record) == FIELDS, record["name"]
        assert record["value"] > 0 and record["baseline"] > 0
        assert math.isclose(record["ratio"], record["value"] / record["baseline"], rel_tol=1e-12)
        assert isinstance(record["met"], bool) and record["target"]
        params = record["params"]
        assert params["checkpoint"] == str(tiny_checkpoint) and params["quick"] is True
        assert params["baseline_is"]
        if "value_samples" in params:  # ms records: value and baseline are the medians of the samples
            assert math.isclose(record["value"], statistics.median(params["value_samples"]), rel_tol=1e-12)
        if "baseline_samples" in params:
            assert math.isclose(record["baseline"], statistics.median(params["baseline_samples"]), rel_tol=1e-12)
            assert len(params["value_samples"]) == len(params["baseline_samples"])  # timed in turns
    speedup = next(r for r in written if r["name"] == "kv_cache_speedup")
    tokens = 60
    assert speedup["params"]["same_tokens"] is True
    assert math.isclose(speedup["value"], tokens / statistics.median(speedup["params"]["value_samples_s"]))
    assert math.isclose(speedup["baseline"], tokens / statistics.median(speedup["params"]["baseline_samples_s"]))


@pytest.mark.slow
def test_epoch_benchmark_times_every_batch_of_one_epoch_on_both_models(tiny_checkpoint, tmp_path, capsys):
    data = tmp_path / "corpus"
    data.mkdir()
    english = [f"a dog runs {'fast ' * (i % 7)}in the park" for i in range(800)]
    german = [f"ein hund rennt {'schnell ' * (i % 5)}im park" for i in range(800)]
    (data / "train.en").write_text("\n".join(english) + "\n")
    (data / "train.de").write_text("\n".join(german) + "\n")
    out = tmp_path / "epoch.jsonl"
    argv = ["--device", "cpu", "--checkpoint", str(tiny_checkpoint), "--only", "train_epoch_s", "--data", str(data)]
    assert run.main([*argv, "--out", str(out)]) == 0
    assert "train_epoch_s: " in capsys.readouterr().err  # progress while the epoch runs
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert set(record) == FIELDS and record["name"] == "train_epoch_s" and record["met"] is None
    params = record["params"]
    translator = subject.load_checkpoint(tiny_checkpoint, device="cpu")
    examples = encode_examples(list(zip(english, german, strict=True)), translator.tokenizer, translator.config)
    batches = token_batches(examples, params["max_tokens"], seed=training_vs_torch.EPOCH_SEED)
    assert params["sentences"] == len(examples) and params["batches"] == len(batches) > 1
    # one timed step per batch and side: the value is the epoch's total, not a median
    assert len(params["value_samples_s"]) == len(params["baseline_samples_s"]) == len(batches)
    assert math.isclose(record["value"], sum(params["value_samples_s"]), rel_tol=1e-12)
    assert math.isclose(record["baseline"], sum(params["baseline_samples_s"]), rel_tol=1e-12)
    assert math.isclose(record["ratio"], record["value"] / record["baseline"], rel_tol=1e-12)
    assert params["target_tokens"] == sum(len(example.tgt) - 1 for example in examples)
    assert params["bf16_autocast"] is False


@pytest.mark.slow
def test_training_throughput_against_an_older_tree_and_the_matmul_peak(tiny_checkpoint, tmp_path, capsys):
    """train_tokens_per_s_bf16 (--max-tokens 1536, --cpu-bf16) on a tiny corpus, and only that case (the others,
    not named, are not run): a median of worker samples, the ratio against the --baseline-tree's fp32 samples (this
    tree again here), and model-FLOP utilisations in (0, 1), each against the peak of its own precision."""
    data = tmp_path / "corpus"
    data.mkdir()
    sentences = [" ".join(["a", "the", "man", "dog"][(i + j) % 4] for j in range(3 + i % 5)) for i in range(200)]
    (data / "train.en").write_text("\n".join(sentences) + "\n")
    (data / "train.de").write_text("\n".join(reversed(sentences)) + "\n")
    argv = ["--quick", "--device", "cpu", "--checkpoint", str(tiny_checkpoint), "--data", str(data)]
    argv += ["--only", "train_tokens_per_s_bf16", "--baseline-tree", str(subject.REPO)]
    assert run.main(argv) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["name"] for r in records] == ["train_tokens_per_s_bf16"]
    record = records[0]
    params = record["params"]
    assert record["unit"] == "tokens/s" and record["value"] > 0 and record["target"] == "ratio >= 1.5"
    assert math.isclose(record["value"], statistics.median(params["samples"]), rel_tol=1e-12)
    assert math.isclose(record["baseline"], statistics.median(params["baseline_samples"]), rel_tol=1e-12)
    assert len(params["samples"]) == len(params["baseline_samples"]) == 2  # --quick: two rounds in turns
    assert params["max_tokens"] == 1536 and params["cpu_bf16"] is True
    assert 0 < params["mfu"] < 1 and 0 < params["baseline_mfu"] < 1
    per_token = params["model_gflop_per_target_token"]
    assert math.isclose(params["mfu"], record["value"] * per_token / params["matmul_peak_gflops"])
    # its own steps against the bf16 peak, the baseline tree's (fp32) against the fp32 peak
    assert math.isclose(params["baseline_mfu"], record["baseline"] * per_token / params["baseline_matmul_peak_gflops"])
    assert params["matmul_peak_gflops"] != params["baseline_matmul_peak_gflops"]
