"""Searching several sources at once: padded to the longest into one batch, one search (greedy, beam or sampling) for
all of them, and each source's output ids back (Translator.translate_batch and Translator.trace run it)."""

from __future__ import annotations

import torch

from model.decoding.sampling import Sampling
from model.decoding.scoring import GNMT_SCORING, Scoring
from model.decoding.search import Encoded, beam_search, greedy_decode, sample_decode
from model.transformer import Transformer


def search_batch(
    model: Transformer,
    device: torch.device,
    sources: list[list[int]],
    beam_size: int,
    max_new_tokens: int | None,
    prefix: list[int] | None,
    *,
    encoded: Encoded | None = None,
    scoring: Scoring | None = None,
    sampling: Sampling | None = None,
) -> list[list[int]]:
    """Each source's output ids (after the start token, the prefix first): sampled when ``sampling`` is given, else
    greedy (``beam_size`` 1) or beam search's best hypothesis; ``encoded``: the sources' encoder pass, when done."""
    width = max(len(ids) for ids in sources)
    src = torch.full((len(sources), width), model.config.source_pad_id, dtype=torch.long)
    for row, ids in enumerate(sources):
        src[row, : len(ids)] = torch.tensor(ids)
    src = src.to(device)
    scoring = scoring or GNMT_SCORING
    if sampling is not None:
        return sample_decode(
            model, src, sampling, max_new_tokens=max_new_tokens, prefix=prefix, encoded=encoded, scoring=scoring
        )
    if beam_size <= 1:
        return greedy_decode(model, src, max_new_tokens, prefix, encoded, scoring)
    hypotheses = beam_search(model, src, beam_size, max_new_tokens, prefix, encoded, scoring=scoring)
    return [hyps[0].tokens for hyps in hypotheses]
