"""Optimisation (sections 5.3 and 5.4 of the paper): the learning-rate schedule, one training step with label
smoothing and gradient clipping, and averaging the weights of the last epochs into the final model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


def inverse_sqrt(step: int, warmup: int) -> float:
    """Multiplier of the peak rate: linear warmup, then decay with 1/sqrt(step) (section 5.3)."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


def train_step(
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    parameters: Iterable[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    src: torch.Tensor,
    tgt: torch.Tensor,
    pad_id: int,
    *,
    label_smoothing: float,
    clip_norm: float,
    use_amp: bool,
    loss_divisor: float,
    weight: float = 1.0,
) -> torch.Tensor:
    """One optimisation step on a padded batch; returns the summed (label-smoothed) target loss, detached.

    ``forward(src, tgt_in)`` gives logits (B, T-1, V) for ``tgt_in = tgt[:, :-1]``: the model itself, or any
    stand-in with the same contract (benchmarks time nn.Transformer with this very step). The loss is summed
    over target tokens, times ``weight``, and ``sum / loss_divisor`` is what backpropagates. Under ``use_amp``
    the forward runs in bf16 autocast on CUDA and the loss in fp32.
    """
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
        logits = forward(src, tgt[:, :-1])
    loss_sum = (
        F.cross_entropy(
            logits.flatten(0, 1).float(),
            tgt[:, 1:].flatten(),
            ignore_index=pad_id,
            label_smoothing=label_smoothing,
            reduction="sum",
        )
        * weight
    )
    (loss_sum / loss_divisor).backward()
    if clip_norm:
        torch.nn.utils.clip_grad_norm_(parameters, clip_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum.detach()


def weights_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict without tied duplicates, on CPU, for epoch files and averaging."""
    seen: set[int] = set()
    weights = {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        weights[name] = tensor.detach().cpu().clone()
    return weights


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The mean of the weights saved in ``paths`` (computed in float64, returned as float32)."""
    total = {k: v.double() for k, v in load_file(str(paths[0])).items()}
    for path in paths[1:]:
        for k, v in load_file(str(path)).items():
            total[k] += v.double()
    return {k: (v / len(paths)).float() for k, v in total.items()}
