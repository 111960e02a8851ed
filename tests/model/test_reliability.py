"""Bad input through the Python API, concurrency on one shared Translator, memory, OOM fallback."""

from __future__ import annotations

import gc
import resource
import threading

import numpy as np
import pytest
import torch

from model.translator import Translator
from tests.helpers import BAD_INPUTS


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_translates_or_truncates_without_raising(translator, name):
    text = BAD_INPUTS[name]
    assert isinstance(translator.translate(text, beam_size=2), str)
    trace = translator.trace(text, beam_size=2)
    config = translator.config
    assert 1 <= len(trace.source_ids) <= config.max_len and trace.source_ids[-1] == config.eos_id
    assert len(trace.target_ids) <= config.max_len
    assert trace.outcome.truncated == (trace.outcome.source_pieces_before_truncation > config.max_len - 1)
    for weights in trace.attention.values():
        assert np.isfinite(weights).all()


def test_ten_thousand_characters_are_truncated_with_a_flag(translator):
    trace = translator.trace(BAD_INPUTS["10,000 characters"], beam_size=1)
    assert trace.outcome.truncated and trace.outcome.source_pieces_before_truncation > 1000


@pytest.mark.slow  # 300 traces on 30 threads
def test_thirty_threads_times_ten_traces_equal_serial_results(translator):
    sentences = [
        f"{a} {b} {c} in the park."
        for a in ("a", "two", "the")
        for b in ("man", "dog")
        for c in ("runs", "sits", "plays", "walks", "rides")
    ]
    assert len(sentences) == 30
    serial = {s: translator.trace(s, beam_size=2, max_new_tokens=8) for s in sentences}
    errors: list[BaseException] = []
    mismatches: list[str] = []

    def session(index: int) -> None:
        try:
            for repeat in range(10):
                sentence = sentences[(index + repeat) % len(sentences)]
                trace = translator.trace(sentence, beam_size=2, max_new_tokens=8)
                expected = serial[sentence]
                if trace.target_ids != expected.target_ids or any(
                    not np.array_equal(trace.attention[n], expected.attention[n]) for n in expected.attention
                ):
                    mismatches.append(sentence)
        except BaseException as error:  # noqa: BLE001 - any failure in a thread must fail the test
            errors.append(error)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and not mismatches
    assert not translator.model.training  # never toggled at request time
    assert not any(p.requires_grad for p in translator.model.parameters())


@pytest.mark.slow  # 1,000 traces
def test_thousand_traces_leave_memory_flat(translator):
    """Peak RSS may grow while allocator pools warm up, then must stay within a stated bound."""
    sentences = [f"a man rides a bike number {i}." for i in range(50)]
    for sentence in sentences:  # warm-up
        translator.trace(sentence, beam_size=1, max_new_tokens=8)
    gc.collect()
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i in range(1000):
        translator.trace(sentences[i % 50], beam_size=1, max_new_tokens=8)
    gc.collect()
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb) / 1024
    assert growth_mb < 50, f"peak memory grew by {growth_mb:.1f} MB over 1000 traces (bound: 50 MB)"


def test_gpu_out_of_memory_retries_on_cpu_and_says_so(translator, monkeypatch):
    """Simulate a CUDA OOM on the first attempt: the request reruns on a CPU copy with a notice."""
    pretend_gpu = Translator(translator.model, translator.tokenizer, torch.device("cuda"), name="pretend")
    calls = {"n": 0}
    original = Translator._trace_on

    def flaky(self, model, device, *args, **kwargs):
        calls["n"] += 1
        if device.type == "cuda":
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return original(self, model, device, *args, **kwargs)

    monkeypatch.setattr(Translator, "_trace_on", flaky)
    trace = pretend_gpu.trace("a man rides a bike.", beam_size=2)
    expected = translator.trace("a man rides a bike.", beam_size=2)
    assert trace.target_ids == expected.target_ids
    assert "out of memory" in trace.outcome.notice.lower() and "CPU" in trace.outcome.notice
    assert calls["n"] >= 2
