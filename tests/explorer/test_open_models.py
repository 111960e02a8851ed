"""The server's open models (explorer.open_models): least recently used out first, within a byte budget."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from explorer.open_models import DEFAULT_MEMORY_MB, MEMORY_ENV, OpenModels, memory_budget_bytes, weight_bytes
from model import Transformer
from tests.helpers import small_config

MB = 2**20


def models(budget_mb: int, sizes_mb: dict[str, int], load_s: float = 0.0) -> tuple[OpenModels, list[str]]:
    """An OpenModels whose "models" are their names, of the given sizes, each load taking ``load_s``; and the list
    of loads it made."""
    loads: list[str] = []

    def load(key: str) -> str:
        loads.append(key)
        time.sleep(load_s)
        return key

    return OpenModels(budget_mb * MB, load, lambda name: sizes_mb[name] * MB), loads


def test_the_least_recently_used_model_is_closed_first_to_stay_within_the_budget():
    cache, loads = models(700, {"a": 300, "b": 300, "c": 300})
    assert [cache.get(key) for key in ("a", "b", "a")] == ["a", "b", "a"]
    assert loads == ["a", "b"]  # a third request of "a" loads nothing
    cache.get("c")  # a, b and c do not fit: b, used longest ago, is closed
    assert cache.keys() == ["a", "c"] and cache.total_bytes() == 600 * MB
    cache.get("b")
    assert cache.keys() == ["c", "b"] and loads == ["a", "b", "c", "b"]


def test_a_model_larger_than_the_budget_is_opened_alone(caplog):
    cache, _ = models(500, {"small": 100, "huge": 900})
    cache.get("small")
    assert cache.get("huge") == "huge"
    assert cache.keys() == ["huge"]
    assert "needs 900 MB, more than ATTENTION_EXPLORER_MODEL_MEMORY_MB allows (500 MB)" in caplog.text


def test_sessions_asking_at_once_load_each_model_once():
    cache, loads = models(1000, {"a": 100, "b": 100}, load_s=0.05)  # slow enough for requests to overlap
    threads = [threading.Thread(target=cache.get, args=("ab"[i % 2],)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(loads) == ["a", "b"]


def test_weight_bytes_counts_a_shared_embedding_once():
    tied = Transformer(small_config(40, share_embeddings=True, tie_output=True))
    untied = Transformer(small_config(40, share_embeddings=False, tie_output=False))
    embedding = 40 * tied.config.d_model * 4
    assert weight_bytes(untied) - weight_bytes(tied) == 2 * embedding  # the decoder's and the output's own copies
    half = Transformer(small_config(40)).to(torch.float16)
    assert weight_bytes(half) == weight_bytes(Transformer(small_config(40))) // 2


@pytest.mark.parametrize("raw, megabytes", [("", DEFAULT_MEMORY_MB), ("512", 512), (" 64 ", 64)])
def test_the_budget_is_read_from_the_environment(raw, megabytes):
    assert memory_budget_bytes({MEMORY_ENV: raw}) == megabytes * MB


@pytest.mark.parametrize("raw", ["0", "-5", "1.5", "lots"])
def test_a_bad_budget_is_refused_by_name(raw):
    with pytest.raises(ValueError, match=f"{MEMORY_ENV} must be a whole number of megabytes, 1 or more, not"):
        memory_budget_bytes({MEMORY_ENV: raw})


def test_with_an_estimate_others_are_closed_before_the_load_so_the_budget_is_never_exceeded():
    held_at_each_load: list[int] = []
    sizes = {"a": 300, "b": 300, "c": 300}

    def load(key: str) -> str:
        held_at_each_load.append(cache.total_bytes() // MB)  # what the server holds while this model loads
        return key

    cache = OpenModels(700 * MB, load, lambda name: sizes[name] * MB, estimate=lambda name: sizes[name] * MB)
    for key in ("a", "b", "c", "a"):
        cache.get(key)
    assert held_at_each_load == [0, 300, 300, 300]  # never 600 + 300 > 700
    assert cache.keys() == ["c", "a"]


def test_the_page_estimates_a_checkpoints_size_exactly_before_loading_it(tiny_checkpoint):
    from explorer.compute import meta_model
    from model import load_checkpoint

    assert weight_bytes(meta_model(str(tiny_checkpoint))) == weight_bytes(load_checkpoint(tiny_checkpoint, "cpu").model)
