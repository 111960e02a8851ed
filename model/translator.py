"""Translator: a loaded model with its tokenizer, translating text and tracing attention."""

from __future__ import annotations

import copy
import logging
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch

from model.decoding import beam_search, default_max_len, forced_pass, greedy_decode
from model.tokenizer import Tokenizer
from model.trace import Trace
from model.transformer import Transformer

Result = TypeVar("Result")
OOM_NOTICE = "The GPU ran out of memory, so this request ran on the CPU instead (slower, same result)."


def clean_text(text: str) -> str:
    """Make any user string safe for SentencePiece: lone surrogates and control characters become spaces."""
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    return "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)


@dataclass
class SourceIds:
    ids: list[int]  # pieces + EOS
    truncated: bool  # True when the text had more pieces than the model's max_len allows
    original_length: int


@dataclass
class Translator:
    """A model shared read-only by every caller: nothing here mutates it at request time."""

    model: Transformer
    tokenizer: Tokenizer
    device: torch.device
    name: str = ""
    card: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)  # e.g. "CUDA requested but not available: using CPU"
    _cpu_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _cpu_copy: Transformer | None = field(default=None, repr=False, compare=False)

    @property
    def config(self):
        return self.model.config

    def source_ids(self, text: str) -> SourceIds:
        pieces = self.tokenizer.encode(clean_text(text), "source")
        limit = self.config.max_len - 1  # keep room for EOS
        return SourceIds(pieces[:limit] + [self.config.eos_id], len(pieces) > limit, len(pieces))

    def target_ids(self, text: str, room: int) -> list[int]:
        return self.tokenizer.encode(clean_text(text), "target")[:room]

    def _run(self, work: Callable[[Transformer, torch.device], Result]) -> tuple[Result, str | None]:
        """Run work on the model's device; on a GPU out-of-memory error, retry on a CPU copy and say so."""
        try:
            return work(self.model, self.device), None
        except torch.OutOfMemoryError:
            if self.device.type == "cpu":
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            logging.getLogger(__name__).warning(OOM_NOTICE)
            return work(self._cpu_model(), torch.device("cpu")), OOM_NOTICE

    def _cpu_model(self) -> Transformer:
        """A CPU copy made once, on the first GPU out-of-memory error, and shared from then on."""
        with self._cpu_lock:
            if self._cpu_copy is None:
                self._cpu_copy = copy.deepcopy(self.model).to("cpu")
            return self._cpu_copy

    def _generate(
        self,
        model: Transformer,
        device: torch.device,
        sources: list[list[int]],
        beam_size: int,
        max_len: int | None,
        prefix: list[int] | None,
    ) -> list[list[int]]:
        width = max(len(ids) for ids in sources)
        src = torch.full((len(sources), width), self.config.pad_id, dtype=torch.long)
        for row, ids in enumerate(sources):
            src[row, : len(ids)] = torch.tensor(ids)
        src = src.to(device)
        if beam_size <= 1:
            return greedy_decode(model, src, max_len=max_len, prefix=prefix)
        return [hyps[0].tokens for hyps in beam_search(model, src, beam_size, max_len=max_len, prefix=prefix)]

    def translate(self, text: str, beam_size: int = 5, max_len: int | None = None) -> str:
        return self.translate_batch([text], beam_size=beam_size, max_len=max_len)[0]

    def translate_batch(
        self, texts: list[str], beam_size: int = 5, max_len: int | None = None, batch_size: int = 64
    ) -> list[str]:
        """Translate many sentences, batching similar lengths together."""
        sources = [self.source_ids(text).ids for text in texts]
        order = sorted(range(len(texts)), key=lambda i: len(sources[i]))
        results: list[str] = [""] * len(texts)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            chunk_sources = [sources[i] for i in chunk]
            outputs, _ = self._run(
                lambda m, d, batch=chunk_sources: self._generate(m, d, batch, beam_size, max_len, None)
            )
            for index, ids in zip(chunk, outputs, strict=True):
                results[index] = self.tokenizer.decode(ids, "target")
        return results

    def trace(
        self,
        text: str,
        beam_size: int = 5,
        max_len: int | None = None,
        top_k: int = 5,
        target: str | None = None,
        prefix: str | None = None,
    ) -> Trace:
        """Translate (or, with ``target``, teacher-force) one sentence and record every step.

        ``prefix``: force the first output tokens and let the model continue from there.
        """
        trace, notice = self._run(lambda m, d: self._trace_on(m, d, text, beam_size, max_len, top_k, target, prefix))
        if notice:
            trace.settings["notice"] = notice
        return trace

    def _trace_on(
        self,
        model: Transformer,
        device: torch.device,
        text: str,
        beam_size: int,
        max_len: int | None,
        top_k: int,
        target: str | None,
        prefix: str | None,
    ) -> Trace:
        config = self.config
        source = self.source_ids(text)
        room = config.max_len - 2  # BOS and EOS
        if target is not None:
            mode = "forced"
            output = self.target_ids(target, room) + [config.eos_id]
        else:
            prefix_ids = self.target_ids(prefix, room) if prefix else []
            mode = "greedy" if beam_size <= 1 else "beam"
            limit = max_len or default_max_len(model, len(source.ids), len(prefix_ids))
            limit = min(limit, config.max_len - 1 - len(prefix_ids))
            if limit > 0:
                output = self._generate(model, device, [source.ids], beam_size, limit, prefix_ids)[0]
            else:
                output = prefix_ids
        target_ids = [config.bos_id] + output
        result = forced_pass(model, source.ids, target_ids)
        k = min(top_k, result.probs.size(-1))
        top = result.probs.topk(k, dim=-1)
        chosen = torch.tensor(target_ids[1:])
        return Trace(
            source_text=text,
            source_ids=source.ids,
            source_pieces=self.tokenizer.pieces(source.ids, "source"),
            target_ids=target_ids,
            target_pieces=self.tokenizer.pieces(target_ids, "target"),
            translation=self.tokenizer.decode(target_ids, "target"),
            step_probs=result.probs.gather(1, chosen[:, None])[:, 0].numpy().astype(np.float32),
            topk_ids=top.indices.numpy(),
            topk_probs=top.values.numpy().astype(np.float32),
            topk_pieces=[self.tokenizer.pieces(row, "target") for row in top.indices.tolist()],
            attention={name: value.float().numpy() for name, value in result.attention.items()},
            positional={name: value.float().numpy() for name, value in result.positional.items()},
            embedding_norms={name: value.numpy() for name, value in result.embedding_norms.items()},
            settings={
                "mode": mode,
                "beam_size": beam_size,
                "max_len": max_len,
                "top_k": top_k,
                "target": target,
                "prefix": prefix,
                "truncated": source.truncated,
                "source_pieces_before_truncation": source.original_length,
            },
            model_info={
                "checkpoint": self.name,
                "d_model": config.d_model,
                "n_heads": config.n_heads,
                "n_encoder_layers": config.n_encoder_layers,
                "n_decoder_layers": config.n_decoder_layers,
                "special_pieces": self.tokenizer.pieces(
                    [config.pad_id, config.unk_id, config.bos_id, config.eos_id], "target"
                ),
            },
        )
