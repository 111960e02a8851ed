"""Decoding: greedy search, sampling and beam search with a key/value cache (the passes a Trace is built from:
model/decoding/passes.py; what sampling does to each distribution: model/decoding/sampling.py).

The source is encoded once per sentence. Decoder self-attention keeps a per-layer cache of
keys/values; cross-attention keys/values are computed from the encoder output on the first
step and reused. Every function here runs under ``torch.inference_mode`` and never changes
the model's train/eval mode, so one model can serve many threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from model.decoding.beam_tree import BeamNode, BeamTree, Hypothesis
from model.decoding.sampling import Sampling, draw, sampling_scores
from model.decoding.scoring import GNMT_SCORING, Scoring
from model.transformer import DecoderCache, Transformer

# model.encode's result: memory (B, S, d) and the source key mask. Decoding given one skips its own encoder pass.
Encoded = tuple[torch.Tensor, torch.Tensor | None]


def default_max_new_tokens(model: Transformer, source_length: int, prefix_length: int = 0) -> int:
    """Generated tokens allowed: 1.5x the source plus 10, within the positional encoding's range."""
    return max(1, min(model.config.max_sequence_tokens - prefix_length, int(1.5 * source_length) + 10))


def row_limits(model: Transformer, src_ids: torch.Tensor, prefix_length: int, max_new_tokens: int | None) -> list[int]:
    """Generated-token limit of each sentence: ``max_new_tokens``, or (None or 0) from the sentence's own length
    (never from its batch neighbours). A negative ``max_new_tokens`` is refused: a search with no step has nothing to
    return."""
    if max_new_tokens is not None and max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be at least 1, or 0 or None for the default; got {max_new_tokens}")
    if max_new_tokens:
        return [max_new_tokens] * src_ids.size(0)
    lengths = (src_ids != model.config.source_pad_id).sum(dim=1).tolist()
    return [default_max_new_tokens(model, length, prefix_length) for length in lengths]


DEFAULT_BEAM_SIZE = 5  # beams of every search that is not given a size (the page's greedy default aside)


def next_token_log_probs(model: Transformer, logits: torch.Tensor, scoring: Scoring = GNMT_SCORING) -> torch.Tensor:
    """Log-probabilities of the next token; padding and the start token (BOS) can never be generated, nor
    ``scoring.banned``. Renormalised, their probability goes to the other tokens; otherwise it is lost, as in
    generate without ``renormalize_logits``."""
    never = sorted({*model.config.never_generated, *scoring.banned})
    logits = logits.float()
    if scoring.renormalize:
        logits = logits.clone()
        logits[..., never] = float("-inf")
        return torch.log_softmax(logits, dim=-1)
    log_probs = torch.log_softmax(logits, dim=-1)
    log_probs[..., never] = float("-inf")
    return log_probs


def force_eos(log_probs: torch.Tensor, rows: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Rows (a boolean mask) at their last allowed step can only write EOS, with log-probability 0 (generate's
    ForcedEOSTokenLogitsProcessor)."""
    forced = torch.full_like(log_probs, float("-inf"))
    forced[..., eos_id] = 0.0
    return torch.where(rows[:, None], forced, log_probs)


def _start_tokens(model: Transformer, rows: int, prefix: list[int] | None, device: torch.device) -> torch.Tensor:
    start = [model.config.start_id] + list(prefix or [])
    return torch.tensor(start, dtype=torch.long, device=device).repeat(rows, 1)  # (rows, P)


def _reorder_cache(cache: DecoderCache, order: torch.Tensor) -> None:
    """Beam search: follow each surviving beam's origin. Cross-attention caches are identical within a sentence."""
    for layer in cache:
        for key in ("k", "v"):
            layer["self"][key] = layer["self"][key].index_select(0, order)


@torch.inference_mode()
def greedy_decode(
    model: Transformer,
    src_ids: torch.Tensor,
    max_new_tokens: int | None = None,
    prefix: list[int] | None = None,
    encoded: Encoded | None = None,
    scoring: Scoring = GNMT_SCORING,
) -> list[list[int]]:
    """src_ids (B, S) -> per sentence the generated ids (prefix included, EOS last when reached), the most likely
    token at each step.

    ``encoded``: model.encode(src_ids), when the caller has it already (a trace encodes once). ``scoring``: its
    banned tokens and forced EOS apply (the rest only ranks beams).
    """
    return _token_by_token(
        model, src_ids, _most_likely, max_new_tokens, prefix=prefix, encoded=encoded, scoring=scoring
    )


@torch.inference_mode()
def sample_decode(
    model: Transformer,
    src_ids: torch.Tensor,
    sampling: Sampling,
    *,
    max_new_tokens: int | None = None,
    prefix: list[int] | None = None,
    encoded: Encoded | None = None,
    scoring: Scoring = GNMT_SCORING,
) -> list[list[int]]:
    """greedy_decode with each token drawn (model.decoding.sampling) instead of the most likely taken; the rows of
    a batch draw in turn from one stream seeded with ``sampling.seed``, so a batch of one sentence repeated N times
    gives N samples, and the same call gives the same samples."""
    generator = sampling.generator(src_ids.device)

    def drawn(log_probs: torch.Tensor) -> torch.Tensor:
        return draw(sampling_scores(log_probs, sampling), generator)

    return _token_by_token(model, src_ids, drawn, max_new_tokens, prefix=prefix, encoded=encoded, scoring=scoring)


def _most_likely(log_probs: torch.Tensor) -> torch.Tensor:
    return log_probs.argmax(dim=-1)


def _token_by_token(
    model: Transformer,
    src_ids: torch.Tensor,
    choose: Callable[[torch.Tensor], torch.Tensor],
    max_new_tokens: int | None,
    *,
    prefix: list[int] | None,
    encoded: Encoded | None,
    scoring: Scoring,
) -> list[list[int]]:
    """One token a step for every sentence, ``choose`` taking it from the next-token log-probabilities (B, V)."""
    config = model.config
    batch = src_ids.size(0)
    limits = torch.tensor(row_limits(model, src_ids, len(prefix or []), max_new_tokens), device=src_ids.device)
    memory, src_allowed = encoded if encoded is not None else model.encode(src_ids)
    cache = model.new_cache()
    tokens = _start_tokens(model, batch, prefix, src_ids.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src_ids.device)
    step_input = tokens
    for step in range(int(limits.max())):
        logits = model.decode(step_input, memory, src_allowed, cache=cache, start=tokens.size(1) - step_input.size(1))
        log_probs = next_token_log_probs(model, logits[:, -1], scoring)
        if scoring.force_eos:
            log_probs = force_eos(log_probs, limits == step + 1, config.eos_id)
        next_token = choose(log_probs)  # (B,)
        next_token = next_token.masked_fill(finished, config.pad_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= (next_token == config.eos_id) | (limits <= step + 1)
        if bool(finished.all()):
            break
        step_input = next_token[:, None]
    return [_strip(row[1:], config.eos_id, config.pad_id) for row in tokens.tolist()]


def _strip(ids: list[int], eos_id: int, pad_id: int) -> list[int]:
    """Cut after the first EOS and drop padding."""
    out = []
    for token in ids:
        if token == pad_id:
            continue
        out.append(token)
        if token == eos_id:
            break
    return out


class _TreeRecorder:
    """Builds one sentence's BeamTree while the search runs; only made when a tree is asked for."""

    records = True  # the search also walks the candidates it will not keep, to record them

    def __init__(self, bos_id: int, beams: int) -> None:
        self.nodes = [BeamNode(0, None, 0, bos_id, 0.0, 0.0, 0, "root")]
        self.beam_nodes = [0] + [-1] * (beams - 1)  # node of each live beam; only beam 0 is alive at first
        self.next_beam_nodes = [-1] * beams
        self.finished: list[tuple[Hypothesis, int]] = []
        self.stop = ""

    def add(self, step: int, beam: int, token: int, log_prob: float, score: float, rank: int) -> int:
        """A candidate extension of live beam ``beam``, pruned until kept or finished."""
        node = BeamNode(len(self.nodes), self.beam_nodes[beam], step, token, log_prob, score, rank, "pruned")
        self.nodes.append(node)
        return node.id

    def keep(self, node_id: int, slot: int) -> None:
        self.nodes[node_id].status = "kept"
        self.next_beam_nodes[slot] = node_id

    def finish(self, hypothesis: Hypothesis, node_id: int) -> None:
        self.nodes[node_id].status = "finished"
        self.finished.append((hypothesis, node_id))

    def finish_live(self, hypothesis: Hypothesis, slot: int) -> None:
        """The beam kept in ``slot`` this step ends at the length limit."""
        self.finish(hypothesis, self.next_beam_nodes[slot])

    def end(self, reason: str) -> None:
        self.stop = reason

    def next_step(self) -> None:
        self.beam_nodes, self.next_beam_nodes = self.next_beam_nodes, [-1] * len(self.next_beam_nodes)

    def tree(
        self, hypotheses: list[Hypothesis], prefix: list[int], beams: int, scoring: Scoring, limit: int
    ) -> BeamTree:
        for rank, hypothesis in enumerate(hypotheses):
            node_id = next(node for kept, node in self.finished if kept is hypothesis)
            self.nodes[node_id].final_rank = rank
        return BeamTree(self.nodes, hypotheses, list(prefix), beams, scoring, limit, self.stop)


class _NoRecorder:
    """What beam_search records: nothing. The search calls the same hooks as with a _TreeRecorder."""

    records = False

    def add(self, step: int, beam: int, token: int, log_prob: float, score: float, rank: int) -> int:
        return -1

    def keep(self, node_id: int, slot: int) -> None:
        pass

    def finish(self, hypothesis: Hypothesis, node_id: int) -> None:
        pass

    def finish_live(self, hypothesis: Hypothesis, slot: int) -> None:
        pass

    def end(self, reason: str) -> None:
        pass

    def next_step(self) -> None:
        pass


Recorder = _TreeRecorder | _NoRecorder


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src_ids: torch.Tensor,
    beam_size: int = DEFAULT_BEAM_SIZE,
    max_new_tokens: int | None = None,
    prefix: list[int] | None = None,
    encoded: Encoded | None = None,
    *,
    scoring: Scoring = GNMT_SCORING,
) -> list[list[Hypothesis]]:
    """Batched beam search: src_ids (B, S) -> per sentence up to beam_size hypotheses, best first.

    Candidates are the top 2*beam_size extensions of all beams; an EOS among the top
    beam_size finishes a hypothesis. A sentence stops once beam_size hypotheses are
    finished and no live beam can still beat the worst of them (scores only fall as tokens
    are added, and the length penalty is at most that of max_new_tokens), so with a beam as wide
    as the search space the result equals exhaustive search. ``encoded``: as for greedy_decode.
    ``scoring``: how to rank and stop: ours (GNMT's length penalty; ``Scoring(alpha=...)`` for another alpha) or
    Hugging Face generate's.
    """
    return _search(model, src_ids, beam_size, max_new_tokens, scoring, prefix, recorders=None, encoded=encoded)


@torch.inference_mode()
def beam_search_tree(
    model: Transformer,
    src_ids: torch.Tensor,
    beam_size: int = DEFAULT_BEAM_SIZE,
    max_new_tokens: int | None = None,
    prefix: list[int] | None = None,
    scoring: Scoring = GNMT_SCORING,
) -> list[BeamTree]:
    """beam_search, recording every candidate it examines: per sentence a BeamTree whose
    ``hypotheses`` are exactly beam_search's result (the same code runs, with a recorder)."""
    recorders = [_TreeRecorder(model.config.start_id, beam_size) for _ in range(src_ids.size(0))]
    results = _search(model, src_ids, beam_size, max_new_tokens, scoring, prefix, recorders=recorders)
    limits = row_limits(model, src_ids, len(prefix or []), max_new_tokens)
    return [
        recorder.tree(hypotheses, list(prefix or []), beam_size, scoring, limit)
        for recorder, hypotheses, limit in zip(recorders, results, limits, strict=True)
    ]


@dataclass
class _Step:
    """One search step's choices across the batch: what each of the B*K beam slots continues from and with."""

    number: int  # 1 = the first token after the prefix
    tokens: torch.Tensor  # (B*K, P + number - 1) every live beam's ids so far, start token first
    scores: torch.Tensor  # (B, K) log-probability of each kept beam; -inf for an empty slot
    origins: torch.Tensor  # (B*K,) the beam slot each kept beam extends
    next_tokens: torch.Tensor  # (B*K,) the token it adds (padding for an empty slot)
    penalty: float  # the length penalty of hypotheses ending at this step


def _choose(
    step: _Step,
    row: int,
    candidates: list[tuple[float, int]],
    vocab: int,
    eos_id: int,
    *,
    finished: list[Hypothesis],
    recorder: Recorder,
) -> int:
    """Fill sentence ``row``'s beam slots from its candidates (score, beam * vocab + token), best first: EOS among
    the top K finishes a hypothesis, any other token is kept until K are. Returns how many were kept."""
    beams = step.scores.size(1)
    kept = 0
    for rank, (score, index) in enumerate(candidates):
        if score == float("-inf") or (kept == beams and not recorder.records):
            break
        beam, token = index // vocab, index % vocab
        node = recorder.add(step.number, beam, token, score, score / step.penalty, rank)
        if kept == beams:  # only when recording: the remaining candidates stay pruned
            continue
        if token == eos_id:
            if rank < beams:
                sequence = step.tokens[row * beams + beam, 1:].tolist() + [token]
                finished.append(Hypothesis(sequence, score / step.penalty, score))
                recorder.finish(finished[-1], node)
            continue
        slot = row * beams + kept
        step.scores[row, kept] = score
        step.origins[slot] = row * beams + beam
        step.next_tokens[slot] = token
        recorder.keep(node, kept)
        kept += 1
    return kept


def _finish_live(step: _Step, row: int, kept: int, finished: list[Hypothesis], recorder: Recorder) -> None:
    """Sentence ``row`` reached its length limit: its kept beams end here without EOS. (generate ends its top K
    candidates instead: the same best K, since the kept beams that are not among them rank below all of them.)"""
    beams = step.scores.size(1)
    for k in range(kept):
        slot = row * beams + k
        sequence = step.tokens[step.origins[slot], 1:].tolist() + [int(step.next_tokens[slot])]
        score = float(step.scores[row, k])
        finished.append(Hypothesis(sequence, score / step.penalty, score))
        recorder.finish_live(finished[-1], k)


def _cannot_improve(
    scoring: Scoring, best_alive: float, worst_finished: float, number: int, limit: int, prefix: int
) -> bool:
    """Whether a sentence with beam_size finished hypotheses stops after step ``number``: ours when no live beam can
    beat the worst finished one even at the limit's penalty; generate's by its ``early_stopping``."""
    if best_alive == float("-inf") or (scoring.style == "transformers" and scoring.early_stopping is True):
        return True
    at_limit = scoring.style == "gnmt" or (scoring.early_stopping == "never" and scoring.alpha > 0)
    return best_alive / scoring.penalty(limit if at_limit else number, prefix) <= worst_finished


def _search(
    model: Transformer,
    src_ids: torch.Tensor,
    beam_size: int,
    max_new_tokens: int | None,
    scoring: Scoring,
    prefix: list[int] | None,
    *,
    recorders: list[_TreeRecorder] | None,
    encoded: Encoded | None = None,
) -> list[list[Hypothesis]]:
    """The one beam search implementation; ``recorders`` (one per sentence) also record the tree."""
    if beam_size < 1:
        raise ValueError("beam_size must be at least 1")
    config = model.config
    batch, beams, device = src_ids.size(0), beam_size, src_ids.device
    prefix = list(prefix or [])
    limits = row_limits(model, src_ids, len(prefix), max_new_tokens)
    beam_limits = torch.tensor(limits, device=device).repeat_interleave(beams)  # (B*K,) each beam's sentence's
    watchers: list[Recorder] = list(recorders) if recorders is not None else [_NoRecorder()] * batch
    memory, src_allowed = encoded if encoded is not None else model.encode(src_ids)
    memory = memory.repeat_interleave(beams, dim=0)  # (B*K, S, d)
    if src_allowed is not None:
        src_allowed = src_allowed.repeat_interleave(beams, dim=0)
    cache = model.new_cache()
    tokens = _start_tokens(model, batch * beams, prefix, device)  # (B*K, P)
    scores = torch.full((batch, beams), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: keep one alive
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    done = [False] * batch
    step_input = tokens
    for number in range(1, max(limits) + 1):
        logits = model.decode(step_input, memory, src_allowed, cache=cache, start=tokens.size(1) - step_input.size(1))
        log_probs = next_token_log_probs(model, logits[:, -1], scoring)  # (B*K, V)
        if scoring.force_eos:
            log_probs = force_eos(log_probs, beam_limits == number, config.eos_id)
        vocab = log_probs.size(-1)
        candidates = (scores.view(-1, 1) + log_probs).view(batch, beams * vocab)
        top_scores, top_index = candidates.topk(min(2 * beams, beams * vocab), dim=1)  # (B, 2K)
        step = _Step(
            number,
            tokens,
            scores=torch.full((batch, beams), float("-inf"), device=device),
            origins=torch.arange(batch, device=device).repeat_interleave(beams) * beams,
            next_tokens=torch.full((batch * beams,), config.pad_id, dtype=torch.long, device=device),
            penalty=scoring.penalty(number, len(prefix)),
        )
        for row, (row_scores, row_index) in enumerate(zip(top_scores.tolist(), top_index.tolist(), strict=True)):
            if done[row]:
                continue
            recorder = watchers[row]
            ranked = list(zip(row_scores, row_index, strict=True))
            kept = _choose(step, row, ranked, vocab, config.eos_id, finished=finished[row], recorder=recorder)
            if number == limits[row]:
                _finish_live(step, row, kept, finished[row], recorder)
                recorder.end("max_new_tokens")
                done[row] = True
            finished[row].sort(key=lambda h: h.score, reverse=True)
            del finished[row][beams:]
            if len(finished[row]) == beams and not done[row]:
                best_alive = float(step.scores[row].max())
                worst = finished[row][-1].score
                done[row] = _cannot_improve(scoring, best_alive, worst, number, limits[row], len(prefix))
                if done[row]:
                    recorder.end("no live beam" if best_alive == float("-inf") else "bound")
            recorder.next_step()
        if all(done):
            break
        tokens = torch.cat([tokens.index_select(0, step.origins), step.next_tokens[:, None]], dim=1)
        _reorder_cache(cache, step.origins)
        scores = step.scores
        step_input = step.next_tokens[:, None]
    return finished
