"""Which source pieces made each output token: attributions beyond the raw attention weights.

``attribute(translator, trace, method)`` gives, for every output step of a trace, a row over the source pieces (ALTI+
also one over the decoder's input pieces: the two rows together sum to 1; otherwise the source row does), computed
from the trace's own tokens read by the model teacher-forced, on the shared model without changing it. The methods
(``ATTRIBUTION_METHODS``): ``"attention"`` (the last decoder layer's cross-attention, mean over heads, with its
attention rollout through the encoder; Abnar & Zuidema 2020), ``"value_norm"`` (Kobayashi et al. 2020),
``"grad_attention"`` (Chefer, Gur & Wolf 2021) and ``"alti_plus"`` (Ferrando et al. 2022). ``attributions_json``
and ``attributions_npz`` save a trace with its attributions.

The package: record (the Attribution and how it is saved), weights (the attention baseline with its rollout, and
value norms), chefer (gradient-weighted attention relevancy), alti (ALTI+); this module dispatches to them.

Theory and references: docs/attribution.md
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from model.analysis.attribution.alti import alti_plus
from model.analysis.attribution.chefer import grad_attention
from model.analysis.attribution.record import (
    ATTRIBUTION_METHODS,
    Attribution,
    attributions_from_npz,
    attributions_json,
    attributions_npz,
)
from model.analysis.attribution.weights import attention_baseline, attention_rollout, value_norm
from model.trace import Trace
from model.transformer import Transformer

if TYPE_CHECKING:
    from model.translator import Translator

__all__ = [
    "ATTRIBUTION_METHODS",
    "Attribution",
    "alti_plus",
    "attention_baseline",
    "attention_rollout",
    "attribute",
    "attributions_from_npz",
    "attributions_json",
    "attributions_npz",
    "grad_attention",
    "model_attribution",
    "value_norm",
]


def attribute(translator: Translator, trace: Trace, method: str) -> Attribution:
    """Which source pieces made each output token of ``trace``, by ``method`` (one of ATTRIBUTION_METHODS), on the
    translator's shared model (``Translator.run``: a GPU out of memory falls back to the CPU)."""
    attribution, _ = translator.run(lambda model, device: model_attribution(model, trace, method))
    return attribution


def model_attribution(model: Transformer, trace: Trace, method: str) -> Attribution:
    """``attribute`` on a bare model: the ``method`` attribution of every output step of ``trace``."""
    if method == "attention":
        return attention_baseline(trace)
    if method == "value_norm":
        return value_norm(model, trace.source_ids, trace.target_ids)
    if method == "grad_attention":
        return grad_attention(model, trace.source_ids, trace.target_ids)
    if method == "alti_plus":
        return alti_plus(model, trace.source_ids, trace.target_ids)
    raise ValueError(f"method must be one of {ATTRIBUTION_METHODS}, not {method!r}")
