"""The training loss: label-smoothed cross-entropy (section 5.4) of the next target token, summed over the target
tokens that are not padding.

On the CPU the output projection and the loss are one fused, chunked computation (``linear_cross_entropy``): the
(tokens x vocabulary) logits of a batch are large, and materialising them, their log-softmax, its gradient and the
label-smoothing terms costs a large share of a training step, most of it memory traffic rather than arithmetic
(benchmarks: train_tokens_per_s). Here the logits are computed a few hundred rows at a time and the gradient is
formed in the forward pass, since the loss is the last thing computed. Padded positions are dropped before the
projection.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from model.transformer import Transformer

# Logit elements per chunk (16 MB of float32; rows per chunk = this / vocabulary size): much smaller chunks make the
# matrix products slower, larger ones are no faster.
CHUNK_ELEMENTS = 1 << 22


class _LinearCrossEntropy(torch.autograd.Function):
    """sum_i [(1 - eps) * -log p_i(target_i) + eps * mean_v -log p_i(v)], p_i = softmax(hidden_i W^T + b).

    The gradient of that sum with respect to the logits is ``softmax - (1 - eps) * onehot - eps / V``. With
    ``e = exp(logits - max)`` and ``z`` its row sum, softmax = e / z, so the products with W and hidden are taken
    on ``e`` and divided by ``z`` per row, and the constant terms are added from W's mean row and the targets'
    rows: only four passes over each chunk's logits (max, subtract, exp, sum) besides the three matrix products.
    """

    @staticmethod
    def forward(  # noqa: PLR0917 - autograd.Function.apply passes its arguments on positionally
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        label_smoothing: float,
        matmul_dtype: torch.dtype | None,
    ) -> torch.Tensor:
        vocab = weight.size(0)
        low = matmul_dtype or hidden.dtype  # the three (R, V) products' precision; everything else: the inputs'
        weight_low = weight.to(low)  # no copy when it is the weight's own dtype
        smooth, sharp = label_smoothing, 1.0 - label_smoothing
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight)
        grad_bias = torch.zeros_like(bias) if bias is not None else None
        mean_row = weight.mean(dim=0)  # the mean logit of a row is hidden @ mean_row (+ mean bias)
        total = hidden.new_zeros((), dtype=torch.float64)
        rows = max(1, CHUNK_ELEMENTS // vocab)
        for first in range(0, hidden.size(0), rows):
            chunk, chunk_targets = hidden[first : first + rows], targets[first : first + rows]
            exps = (chunk.to(low) @ weight_low.t()).to(hidden.dtype)  # (R, V) logits, exp(logits - max) below
            if bias is not None:
                exps += bias
            row_max = exps.amax(dim=1, keepdim=True)
            exps.sub_(row_max).exp_()
            row_sum = exps.sum(dim=1, keepdim=True)
            log_normaliser = (row_max + row_sum.log()).squeeze(1)
            target_rows = weight[chunk_targets]  # (R, d)
            target_logit = (chunk * target_rows).sum(dim=1)
            mean_logit = chunk @ mean_row
            if bias is not None:
                target_logit = target_logit + bias[chunk_targets]
                mean_logit = mean_logit + bias.mean()
            total += (sharp * (log_normaliser - target_logit) + smooth * (log_normaliser - mean_logit)).sum().double()

            grad_chunk = grad_hidden[first : first + rows]
            if low == hidden.dtype:  # in place: no temporaries
                torch.mm(exps, weight, out=grad_chunk)
                grad_weight.addmm_(exps.t(), chunk / row_sum)
            else:  # the products in low precision, accumulated in the inputs' dtype
                exps_low = exps.to(low)
                grad_chunk.copy_(exps_low @ weight_low)
                grad_weight += exps_low.t() @ (chunk / row_sum).to(low)
            grad_chunk.div_(row_sum).sub_(mean_row, alpha=smooth).sub_(target_rows, alpha=sharp)
            grad_weight.sub_(chunk.sum(dim=0), alpha=smooth / vocab)
            grad_weight.index_add_(0, chunk_targets, chunk, alpha=-sharp)
            if grad_bias is not None:
                grad_bias += (exps / row_sum).sum(dim=0) - smooth * chunk.size(0) / vocab
                grad_bias.index_add_(0, chunk_targets, torch.full_like(chunk_targets, -sharp, dtype=grad_bias.dtype))
        # save_for_backward takes None for a missing tensor (its documentation), which its annotation leaves out
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)  # type: ignore[arg-type]
        return total.to(hidden.dtype)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_output: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        # at run time ctx is autograd's node, which has saved_tensors; torch annotates it as FunctionCtx, which lacks it
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors  # type: ignore[attr-defined]
        return (
            grad_hidden * grad_output,
            grad_weight * grad_output,
            grad_bias * grad_output if grad_bias is not None else None,
            None,
            None,
            None,
        )


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    label_smoothing: float,
    matmul_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """hidden (N, d), weight (V, d), bias (V,) or None, targets (N,) -> the summed label-smoothed cross-entropy
    of ``hidden @ weight.T + bias``, as ``F.cross_entropy(..., label_smoothing=, reduction="sum")`` computes it,
    without holding the (N, V) logits: fused and chunked (module docstring).

    ``matmul_dtype`` (e.g. torch.bfloat16, for --cpu-bf16): the three matrix products with the vocabulary in that
    precision, faster on CPUs with AVX512-BF16 or AMX; the softmax, the sums and the gradients stay in the inputs'."""
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, label_smoothing, matmul_dtype)


def logits_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, pad_id: int, label_smoothing: float
) -> torch.Tensor:
    """logits (B, T, V), targets (B, T) -> the summed label-smoothed cross-entropy over non-padded targets (fp32)."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        targets.flatten(),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
        reduction="sum",
    )


class TranslationLoss(nn.Module):
    """``loss(src, tgt)`` -> the summed label-smoothed cross-entropy of ``model`` predicting ``tgt[:, 1:]`` from
    ``tgt[:, :-1]``, over the target tokens that are not padding.

    A module, so that DistributedDataParallel can wrap it (its forward is the step's whole computation). On the
    CPU the output projection is fused with the loss (linear_cross_entropy); on CUDA the logits are computed as
    they are for translation (bf16 under autocast) and the loss in fp32.
    """

    def __init__(self, model: Transformer, pad_id: int, label_smoothing: float) -> None:
        super().__init__()
        self.model = model
        self.pad_id = pad_id
        self.label_smoothing = label_smoothing

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        memory, src_allowed = self.model.encode(src)
        hidden = self.model.decode_states(tgt[:, :-1], memory, src_allowed)  # (B, T, d)
        targets = tgt[:, 1:]
        if hidden.is_cuda:
            return logits_cross_entropy(self.model.logits(hidden), targets, self.pad_id, self.label_smoothing)
        real = targets != self.pad_id
        weight = self.model.generator.weight
        # under --cpu-bf16's autocast the loss sets its own precision: bf16 for its products with the vocabulary,
        # fp32 for the softmax and sums (autocast would take those to bf16 too)
        matmul_dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
        with torch.autocast("cpu", enabled=False):
            return linear_cross_entropy(
                hidden[real].to(weight.dtype),
                weight,
                self.output_bias(),
                targets[real],
                self.label_smoothing,
                matmul_dtype,
            )

    def output_bias(self) -> torch.Tensor | None:
        """The generator's bias plus MarianMT's constant final_logits_bias (1, V), whichever the model has."""
        bias, constant = self.model.generator.bias, self.model.final_logits_bias
        if constant is None:
            return bias
        return constant.reshape(-1) if bias is None else bias + constant.reshape(-1)


def logits_loss(
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], pad_id: int, label_smoothing: float
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss of any model given as ``forward(src, tgt_in) -> logits`` (B, T, V), with TranslationLoss's
    contract: what benchmarks use to step stand-ins such as the tutorial nn.Transformer."""

    def loss(src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return logits_cross_entropy(forward(src, tgt[:, :-1]), tgt[:, 1:], pad_id, label_smoothing)

    return loss
