"""Translator: a loaded model with its tokenizer, translating text and tracing attention."""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import numpy as np
import torch

from model.card import Card
from model.decoding.authors import AuthorsDecoding, authors_decoding
from model.decoding.batch import search_batch
from model.decoding.beam_tree import BeamTree
from model.decoding.languages import NO_LANGUAGES, LanguagePair, block_languages
from model.decoding.passes import encode_captured, forced_pass
from model.decoding.sampling import Sampling
from model.decoding.scoring import GNMT_SCORING, Scoring
from model.decoding.search import DEFAULT_BEAM_SIZE, beam_search_tree, default_max_new_tokens
from model.decoding.whatif import fork_prefix, resolve_choice
from model.tokenizer import Tokenizer, clean_text
from model.trace import DEFAULT_TOP_K, Fork, Trace, TraceOutcome, TraceSettings
from model.transformer import Transformer

Result = TypeVar("Result")
DEFAULT_BATCH_SIZE = 64  # sentences (or rows) one batched pass runs together
OOM_NOTICE = "The GPU ran out of memory, so this request ran on the CPU instead (slower, same result)."


def search_mode(beam_size: int, sampling: Sampling | None) -> str:
    """How an output is searched for: "sampling" when a Sampling is given, else "greedy" or "beam" by beam size."""
    return "sampling" if sampling is not None else "greedy" if beam_size <= 1 else "beam"


def forced_end(scoring: Scoring | None, output: list[int], prefix: list[int], limit: int) -> bool:
    """Whether the output's EOS may be one the scoring forced: it ends at the limit under ``force_eos``."""
    return scoring is not None and scoring.force_eos and len(output) - len(prefix) >= limit > 0


@dataclass
class SourceIds:
    ids: list[int]  # pieces + EOS
    truncated: bool  # True when the text had more pieces than the model's positions hold
    original_length: int


@dataclass
class Translator:
    """A model shared read-only by every caller: nothing here mutates it at request time."""

    model: Transformer
    tokenizer: Tokenizer
    device: torch.device
    name: str = ""
    card: Card = field(default_factory=Card)
    notices: list[str] = field(default_factory=list)  # e.g. "CUDA requested but not available: using CPU"
    _cpu_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _cpu_copy: Transformer | None = field(default=None, repr=False, compare=False)

    @property
    def config(self):
        return self.model.config

    @property
    def authors_limit(self) -> int | None:
        """Output tokens an imported model's authors allow by default (their generation settings' length, as
        ``authors_decoding`` reads it), or None for a model trained here (its default is ``default_max_new_tokens``)."""
        authors = self.authors_decoding
        return authors.max_new_tokens if authors else None

    @property
    def authors_decoding(self) -> AuthorsDecoding | None:
        """How an imported model's authors decode (their generate settings, read by model.decoding.authors), or
        None for a model without them (one trained here)."""
        defaults = self.card.extra.get("generation_defaults")
        return authors_decoding(defaults, self.config) if defaults else None

    def source_ids(self, text: str, language: str | None = None) -> SourceIds:
        """The source's ids: its pieces and EOS, and a many-language model's source language code where the model
        reads it (``language``, else the card's)."""
        pieces = self.tokenizer.encode(clean_text(text), "source")
        code = self.languages(language, None).source
        room = self.config.max_sequence_tokens - (code is not None)  # keep room for EOS and a language code
        framed = self.tokenizer.framed_source(pieces[:room], code, self.config.eos_id)
        return SourceIds(framed, len(pieces) > room, len(pieces))

    def languages(self, source: str | None, target: str | None) -> LanguagePair:
        """The codes a call uses: those asked for, else the block's (``using_languages``), else the card's."""
        block, card = block_languages(), self.card
        default = LanguagePair(block.source or card.source_language, block.target or card.target_language)
        return self.tokenizer.language_pair(LanguagePair(source, target), default)

    def language_prefix(self, target_language: str | None, output: list[int] | None = None) -> list[int]:
        """What the output starts with: a many-language model's target code, unless ``output`` has one."""
        return self.tokenizer.forced_start(self.languages(None, target_language).target, output or [])

    @staticmethod
    def after_code(max_new_tokens: int | None, code: list[int]) -> int | None:
        """An asked limit counts a forced language code (as generate counts it): the tokens left after it."""
        return max(1, max_new_tokens - len(code)) if code and max_new_tokens else max_new_tokens

    def target_ids(self, text: str, room: int) -> list[int]:
        return self.tokenizer.encode(clean_text(text), "target")[:room]

    def run(self, work: Callable[[Transformer, torch.device], Result]) -> tuple[Result, str | None]:
        """Run ``work(model, device)`` on the model's device; on a GPU out-of-memory error, again on a CPU copy.

        Returns the result and the notice to show (None when the first try succeeded). For
        computations outside this class (e.g. ``model.analysis.importance``) that need the same fallback.
        """
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

    def translate(
        self,
        text: str,
        beam_size: int = DEFAULT_BEAM_SIZE,
        max_new_tokens: int | None = None,
        scoring: Scoring | None = None,
        sampling: Sampling | None = None,
        *,
        languages: LanguagePair = NO_LANGUAGES,
    ) -> str:
        return self.translate_batch(
            [text],
            beam_size=beam_size,
            max_new_tokens=max_new_tokens,
            scoring=scoring,
            sampling=sampling,
            languages=languages,
        )[0]

    def translate_batch(
        self,
        texts: list[str],
        beam_size: int = DEFAULT_BEAM_SIZE,
        max_new_tokens: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        scoring: Scoring | None = None,
        sampling: Sampling | None = None,
        *,
        languages: LanguagePair = NO_LANGUAGES,
    ) -> list[str]:
        """Translate many sentences, batching similar lengths together; ``scoring``: how a search ranks and stops
        (None: ours; ``Scoring(alpha=...)`` another length penalty; ``authors_decoding.scoring`` the authors').
        ``sampling``: draw each token (model.decoding.Sampling) instead of searching; ``beam_size`` is then not
        used, and a batch's sentences draw in turn from the one seeded stream. ``languages``: a many-language model's
        source and target codes (None: the card's); the target's code is the first output token, forced, and counted
        in ``max_new_tokens`` as generate counts it."""
        sources = [self.source_ids(text, languages[0]).ids for text in texts]
        prefix = self.language_prefix(languages[1])
        if max_new_tokens is None and self.authors_limit is not None:  # else each sentence's own default (row_limits)
            max_new_tokens = min(self.authors_limit, self.config.max_sequence_tokens)
        max_new_tokens = self.after_code(max_new_tokens, prefix)
        order = sorted(range(len(texts)), key=lambda i: len(sources[i]))
        results: list[str] = [""] * len(texts)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            chunk_sources = [sources[i] for i in chunk]
            generate = partial(
                search_batch,
                sources=chunk_sources,
                beam_size=beam_size,
                max_new_tokens=max_new_tokens,
                prefix=prefix,
                scoring=scoring,
                sampling=sampling,
            )
            outputs, _ = self.run(generate)
            for index, ids in zip(chunk, outputs, strict=True):
                results[index] = self.tokenizer.decode(ids, "target")
        return results

    def trace(  # noqa: PLR0913 (keyword options of the public API, each with its default)
        self,
        text: str,
        beam_size: int = DEFAULT_BEAM_SIZE,
        max_new_tokens: int | None = None,
        top_k: int = DEFAULT_TOP_K,
        target: str | None = None,
        prefix: str | None = None,
        *,
        target_ids: list[int] | None = None,
        prefix_ids: list[int] | None = None,
        scoring: Scoring | None = None,
        sampling: Sampling | None = None,
        languages: LanguagePair = NO_LANGUAGES,
    ) -> Trace:
        """Translate (or, with ``target``, teacher-force) one sentence and record every step.

        ``prefix``: force the first output tokens and let the model continue from there
        (``max_new_tokens`` then counts the tokens after the prefix). ``target_ids`` and
        ``prefix_ids`` do the same with target token ids instead of text (BOS left out;
        ``target_ids`` is read exactly as given, so EOS only when it is there), e.g. a beam
        search hypothesis or a what-if fork. ``scoring``: how the search ranks, stops and ends (None: ours);
        ``authors_decoding`` gives an imported model's with its beam size and limit. ``sampling``: each token is
        drawn (model.decoding.Sampling; ``beam_size`` is then not used), the same seed giving the same trace.
        ``languages``: a many-language model's source and target codes (None: the card's); the output
        then starts with the target's code, forced as generate's ``forced_bos_token_id`` forces it (the first of
        ``settings.prefix_ids``, or of ``target_ids``), and counted in ``max_new_tokens`` as generate counts it.
        """
        if target is not None and target_ids is not None:
            raise ValueError("give target or target_ids, not both")
        if prefix is not None and prefix_ids is not None:
            raise ValueError("give prefix or prefix_ids, not both")
        room = self.config.max_sequence_tokens  # decoder positions: BOS and the output
        if target is not None:
            target_ids = self.target_ids(target, room - 1) + [self.config.eos_id]
        elif target_ids is not None:
            target_ids = self._checked_output(target_ids, "target_ids")
            if not target_ids:
                raise ValueError("target_ids is empty: give at least one token to force")
        if prefix_ids is not None:
            prefix_ids = self._checked_output(prefix_ids, "prefix_ids")
        else:
            prefix_ids = self.target_ids(prefix, room - 1) if prefix else []
        source_language, target_language = self.languages(*languages)
        if target_ids is not None:
            target_ids = self.language_prefix(target_language, target_ids) + target_ids
            sampling = None  # the output is given: nothing is drawn
        language = self.language_prefix(target_language, prefix_ids)
        max_new_tokens, prefix_ids = self.after_code(max_new_tokens, language), language + prefix_ids
        settings = TraceSettings(
            mode=search_mode(beam_size, sampling) if target_ids is None else "forced",
            beam_size=1 if sampling else beam_size,
            max_new_tokens=max_new_tokens or None,
            top_k=top_k,
            target=target,
            prefix=prefix,
            target_ids=target_ids,
            prefix_ids=prefix_ids,
            scoring=scoring,
            sampling=sampling,
            source_language=source_language,
            target_language=target_language,
        )
        trace, notice = self.run(lambda m, d: self._trace_on(m, d, text, settings))
        trace.outcome.notice = notice
        return trace

    def _checked_output(self, ids: list[int], name: str) -> list[int]:
        """Target ids the decoder could have produced: in the vocabulary, no padding or BOS, EOS only last."""
        config = self.config
        ids = [int(token) for token in ids]
        if len(ids) > config.max_sequence_tokens:
            raise ValueError(f"{name} has {len(ids)} tokens; the model reads at most {config.max_sequence_tokens}")
        for position, token in enumerate(ids):
            if not 0 <= token < config.tgt_vocab_size or token in config.never_generated:
                raise ValueError(f"{name}[{position}] = {token} is not a token the decoder can produce")
            if token == config.eos_id and position != len(ids) - 1:
                raise ValueError(f"{name}[{position}] is EOS but is not the last token")
        return ids

    def fork(self, original: Trace, step: int, token: int | str, top_k: int | None = None) -> Trace:
        """What-if decoding: ``original``'s output before ``step``, ``token`` at ``step``, then the model continues.

        ``token`` is a target token id (e.g. ``original.topk_ids[step][i]``; EOS ends the
        translation there) or typed text, encoded as a new word: when it is several pieces all
        are forced, one per step, and ``outcome.fork.notice`` says so. The rest is
        decoded as the original was: greedy, beam search with its beam size or sampling with its settings, within its
        output length limit (so forking with the token a greedy original took gives the
        original back). Steps before ``step`` read the same input as the original's, so their
        probabilities and attention rows are the original's. The returned Trace's
        ``outcome.fork`` holds the step, the forced ids and pieces and the original's ids.
        """
        choice = resolve_choice(self.tokenizer, self.config, token)
        prefix_ids = fork_prefix(original, step, choice, self.config)
        asked = original.settings
        original_prefix = asked.prefix_ids
        total = len(original_prefix) + self._output_limit(
            self.model, len(original.source_ids), asked.max_new_tokens, original_prefix
        )
        settings = TraceSettings(
            mode=search_mode(asked.beam_size, asked.sampling),
            beam_size=asked.beam_size,
            max_new_tokens=max(0, total - len(prefix_ids)),  # what is left of the original's limit after the choice
            top_k=top_k or asked.top_k,
            prefix_ids=prefix_ids,
            scoring=asked.scoring,
            sampling=asked.sampling,
            source_language=asked.source_language,
            target_language=asked.target_language,
        )
        forked, notice = self.run(lambda m, d: self._trace_on(m, d, original.source_text, settings))
        forked.outcome.notice = notice
        forked.outcome.fork = Fork(step, choice.ids, choice.pieces, choice.notice, list(original.target_ids))
        return forked

    def beam_tree(
        self,
        text: str,
        beam_size: int = DEFAULT_BEAM_SIZE,
        max_new_tokens: int | None = None,
        prefix_ids: list[int] | None = None,
        scoring: Scoring | None = None,
        languages: LanguagePair = NO_LANGUAGES,
    ) -> BeamTree:
        """The search behind ``trace(text, beam_size, max_new_tokens)``: every hypothesis it examined, as plain data.

        Each node has an id, its parent's id, its piece, cumulative log-probability,
        length-normalised score and status (kept / pruned / finished); ``tree.hypotheses`` is
        exactly beam search's result (the first one is the trace's translation). Draw it with
        ``viz.beam.beam_tree_figure``; see one node's attention with ``beam_node_trace``.
        """
        source = self.source_ids(text, languages[0])
        prefix_ids = self._checked_output(prefix_ids or [], "prefix_ids")
        language = self.language_prefix(languages[1], prefix_ids)
        max_new_tokens, prefix_ids = self.after_code(max_new_tokens, language), language + prefix_ids
        if prefix_ids[-1:] == [self.config.eos_id]:
            raise ValueError("prefix_ids ends with EOS: there is nothing left to search")
        scoring = scoring or GNMT_SCORING
        tree, _ = self.run(
            lambda m, d: self._beam_tree_on(m, d, source.ids, beam_size, max_new_tokens, scoring, prefix_ids=prefix_ids)
        )
        for node, piece in zip(tree.nodes, self.tokenizer.pieces([n.token for n in tree.nodes], "target"), strict=True):
            node.piece = piece
        tree.source_text = clean_text(text)  # as the model read it, and as JSON and plotly can carry it
        tree.source_ids = source.ids
        tree.source_pieces = self.tokenizer.pieces(source.ids, "source")
        tree.prefix_pieces = self.tokenizer.pieces(prefix_ids, "target")
        tree.source_language, tree.target_language = self.languages(*languages)
        return tree

    def _beam_tree_on(
        self,
        model: Transformer,
        device: torch.device,
        source: list[int],
        beam_size: int,
        max_new_tokens: int | None,
        scoring: Scoring,
        *,
        prefix_ids: list[int],
    ) -> BeamTree:
        limit = self._output_limit(model, len(source), max_new_tokens or None, prefix_ids)
        if limit < 1:
            raise ValueError(f"a prefix of {len(prefix_ids)} tokens leaves no room to search in this model")
        src = torch.tensor([source], dtype=torch.long, device=device)
        return beam_search_tree(model, src, beam_size, max_new_tokens=limit, prefix=prefix_ids, scoring=scoring)[0]

    def beam_node_trace(self, tree: BeamTree, node_id: int, top_k: int = DEFAULT_TOP_K) -> Trace:
        """The hypothesis ending at one beam-tree node, teacher-forced: its attention at every step.

        Row ``tree.trace_row(node_id)`` of each decoder attention matrix is the step that chose
        the node's token (what that beam looked at when it was extended).
        """
        if not 0 < node_id < len(tree.nodes):
            raise ValueError(f"node_id must be in 1..{len(tree.nodes) - 1} (0 is the root), not {node_id}")
        trace = self.trace(
            tree.source_text,
            beam_size=tree.beam_size,
            top_k=top_k,
            target_ids=tree.sequence(node_id),
            languages=LanguagePair(tree.source_language, tree.target_language),
        )
        trace.outcome.beam_node = node_id
        return trace

    def _output_limit(
        self, model: Transformer, source_length: int, max_new_tokens: int | None, prefix: list[int]
    ) -> int:
        """Tokens decoding may add after the prefix: ``max_new_tokens`` (None: the authors' limit, else the default;
        a forced language code counts in either, as generate counts it), within the model's positions."""
        if max_new_tokens is None:
            max_new_tokens = self.authors_limit or default_max_new_tokens(model, source_length, len(prefix))
            max_new_tokens -= self.tokenizer.starts_with_language(prefix)
        return min(max_new_tokens, self.config.max_sequence_tokens - len(prefix))

    def _trace_on(self, model: Transformer, device: torch.device, text: str, settings: TraceSettings) -> Trace:
        config, scoring, prefix_ids = self.config, settings.scoring, settings.prefix_ids
        source = self.source_ids(text, settings.source_language)
        encoder_pass = encode_captured(model, source.ids)  # the sentence's one encoder pass
        limit = 0  # tokens decoding could add: none when teacher-forced
        if settings.target_ids is not None:
            output = settings.target_ids
        else:
            limit = self._output_limit(model, len(source.ids), settings.max_new_tokens, prefix_ids)
            if limit > 0 and prefix_ids[-1:] != [config.eos_id]:
                encoded = encoder_pass.encoded
                output = search_batch(
                    model,
                    device,
                    [source.ids],
                    settings.beam_size,
                    limit,
                    prefix_ids,
                    encoded=encoded,
                    scoring=scoring,
                    sampling=settings.sampling,
                )[0]
            else:
                output = prefix_ids
        target_ids = [config.start_id] + output
        result = forced_pass(model, encoder_pass, target_ids, scoring.banned if scoring else ())
        k = min(settings.top_k, result.probs.size(-1))
        top = result.probs.topk(k, dim=-1)
        chosen = torch.tensor(target_ids[1:])
        return Trace(
            source_text=clean_text(text),  # as the model read it, and as JSON and plotly can carry it
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
            settings=settings,
            outcome=TraceOutcome(
                truncated=source.truncated,
                source_pieces_before_truncation=source.original_length,
                # decoding reached its output limit before the model wrote EOS (or was made to write it there, as
                # generate's forced_eos_token_id does): the translation may be unfinished
                cut_off=settings.mode != "forced"
                and (target_ids[-1] != config.eos_id or forced_end(scoring, output, prefix_ids, limit)),
            ),
            model_info={
                "checkpoint": self.name,
                "d_model": config.d_model,
                "n_heads": config.n_heads,
                "n_encoder_layers": config.n_encoder_layers,
                "n_decoder_layers": config.n_decoder_layers,
                "special_pieces": self.tokenizer.pieces(
                    [config.pad_id, config.unk_id, config.start_id, config.eos_id], "target"
                ),
            },
        )
