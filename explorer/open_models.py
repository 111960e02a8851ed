"""The models a server keeps open, least recently used out first, within a memory budget.

A classroom may open several large models (an imported OPUS-MT model holds about 300 MB of weights): a fixed number
of cached models would run a server out of memory with large ones and waste room with small ones, so the cache
counts bytes. Sessions share each open model read-only; one that is evicted stays alive only while a run still
holds it, and is loaded again when asked for. Plain Python (no Streamlit): explorer.compute makes one per server.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import torch

MEMORY_ENV = "ATTENTION_EXPLORER_MODEL_MEMORY_MB"
DEFAULT_MEMORY_MB = 2048  # room for a few imported OPUS-MT models, or every shipped model many times over

Model = TypeVar("Model")


def memory_budget_bytes(environ: dict[str, str] | os._Environ = os.environ) -> int:
    """The budget from ATTENTION_EXPLORER_MODEL_MEMORY_MB (megabytes, a whole number of at least 1)."""
    raw = environ.get(MEMORY_ENV, "").strip()
    if not raw:
        return DEFAULT_MEMORY_MB * 2**20
    if not (raw.isdigit() and int(raw) >= 1):
        raise ValueError(f"{MEMORY_ENV} must be a whole number of megabytes, 1 or more, not {raw!r}")
    return int(raw) * 2**20


def weight_bytes(module: torch.nn.Module) -> int:
    """Bytes held by a model's parameters and buffers, a shared one (a tied embedding) counted once; a model on the
    "meta" device gives the size its weights will have."""
    tensors = (*module.parameters(), *module.buffers())  # each shared parameter listed once
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


class OpenModels(Generic[Model]):
    """Models by key, loaded on first use; a load that takes the total past ``budget`` bytes closes the least
    recently used others first. A model larger than the whole budget is still opened, alone (with a warning):
    refusing it would leave the page without a model."""

    def __init__(
        self,
        budget: int,
        load: Callable[[Hashable], Model],
        size: Callable[[Model], int],
        estimate: Callable[[Hashable], int] | None = None,
    ) -> None:
        """``size``: the bytes an open model holds; ``estimate``: what a key's model will hold, known before it is
        loaded, so that others are closed first and the server never holds more than the budget (without it, a load
        may hold one model more than the budget until it is done)."""
        self.budget = budget
        self._load = load
        self._size = size
        self._estimate = estimate
        self._open: OrderedDict[Hashable, tuple[Model, int]] = OrderedDict()
        self._lock = threading.Lock()  # one load at a time: two at once could both fit alone and not together

    def get(self, key: Hashable) -> Model:
        with self._lock:
            if key in self._open:
                self._open.move_to_end(key)
                return self._open[key][0]
            if self._estimate is not None:
                self._close_for(self._estimate(key))
            model = self._load(key)
            size = self._size(model)
            self._close_for(size)
            if size > self.budget:
                logging.getLogger(__name__).warning(
                    "%s needs %d MB, more than %s allows (%d MB): open alone",
                    key,
                    size // 2**20,
                    MEMORY_ENV,
                    self.budget // 2**20,
                )
            self._open[key] = (model, size)
            return model

    def _close_for(self, size: int) -> None:
        """Close the least recently used models until ``size`` more bytes fit (or none is left open)."""
        closed = []
        while self._open and self.total_bytes() + size > self.budget:
            closed.append(self._open.popitem(last=False)[0])
        if closed:
            gc.collect()  # a model's hooks may hold it in a reference cycle: free it now, not at the next collection
            logging.getLogger(__name__).info("closed %s to stay within %s", closed, MEMORY_ENV)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._open

    def keys(self) -> list[Hashable]:
        """Open keys, least recently used first."""
        with self._lock:
            return list(self._open)

    def total_bytes(self) -> int:
        return sum(size for _, size in self._open.values())
