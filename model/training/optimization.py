"""Optimisation (sections 5.3 and 5.4 of the paper): the learning-rate schedule with an optional cool-down, one
training step with label smoothing and gradient clipping, and averaging the weights of the last epochs into the
final model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch.nn.attention import SDPBackend, sdpa_kernel

# Every attention backend but cuDNN's. Under bf16 autocast on Hopper GPUs PyTorch prefers cuDNN's attention, which
# builds a new cuDNN graph (milliseconds of CPU) for each new batch shape; token-bucketed batches are nearly all new
# shapes, so most of a GPU training step went into building graphs (benchmarks: train_epoch_s, docs/performance.md).
TRAINING_ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def inverse_sqrt(step: int, warmup: int) -> float:
    """Multiplier of the peak rate: linear warmup, then decay with 1/sqrt(step) (section 5.3)."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


def cooldown(epochs_done: float, epochs: int, cooldown_epochs: float) -> float:
    """Multiplier of the rate that falls linearly from 1 to 0 over the last ``cooldown_epochs`` of ``epochs``
    (1 before them, and always 1 when ``cooldown_epochs`` is 0): the decay phase of a warmup-stable-decay schedule
    (Hägele et al. 2024), which can be added to a run late, on --resume, once its quality has levelled off.
    ``epochs_done`` counts the epochs finished before this step, a fraction for the part of the current one."""
    if not cooldown_epochs:
        return 1.0
    return min(1.0, max(0.0, (epochs - epochs_done) / cooldown_epochs))


def make_optimizer(parameters: Iterable[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.AdamW:
    """Adam with betas (0.9, 0.98) and eps 1e-9 (section 5.3), decoupled weight decay; the fused implementation,
    one kernel for all the model's tensors instead of a dozen operations each: much faster on the CPU, the same
    update."""
    return torch.optim.AdamW(parameters, lr=lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay, fused=True)


def train_step(
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    parameters: Iterable[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    src: torch.Tensor,
    tgt: torch.Tensor,
    *,
    clip_norm: float,
    use_amp: bool,
    loss_divisor: float,
    weight: float = 1.0,
) -> torch.Tensor:
    """One optimisation step on a padded batch; returns the summed (label-smoothed) target loss, detached.

    ``loss(src, tgt)`` gives the loss summed over the batch's target tokens: a model.training.loss.TranslationLoss
    (or DistributedDataParallel around one), or any stand-in with the same contract (benchmarks step the tutorial
    nn.Transformer through model.training.loss.logits_loss). The sum times ``weight``, divided by ``loss_divisor``,
    is what backpropagates. Under ``use_amp`` the forward runs in bf16 autocast on the batch's device (CUDA, or
    the CPU with ``--cpu-bf16``) and the loss's softmax in fp32; the weights and the optimiser stay fp32. Attention
    never runs on cuDNN's backend here (TRAINING_ATTENTION_BACKENDS), and so its backward neither.
    """
    autocast = torch.autocast(src.device.type, dtype=torch.bfloat16, enabled=use_amp)
    with sdpa_kernel(TRAINING_ATTENTION_BACKENDS), autocast:
        loss_sum = loss(src, tgt) * weight
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


def mean_weights(states: Iterable[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The mean of weight dicts with the same names (summed in float64, returned as float32); taken one at a time,
    so only the running sum and one dict are in memory."""
    total: dict[str, torch.Tensor] = {}
    count = 0
    for state in states:
        for name, value in state.items():
            total[name] = total[name] + value.double() if name in total else value.double()
        count += 1
    return {name: (value / count).float() for name, value in total.items()}


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The mean of the weights saved in ``paths`` (the epoch files of a run)."""
    return mean_weights(load_file(str(path)) for path in paths)
