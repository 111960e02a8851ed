"""The training loss: the fused, chunked output projection + label-smoothed cross-entropy must be the plain one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model.training import loss as loss_module
from model.training.loss import TranslationLoss, linear_cross_entropy, logits_loss
from model.transformer import Transformer
from tests.helpers import small_config


def gradients(loss: torch.Tensor, *tensors: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, tensors))


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_cross_entropy_equals_projecting_then_cross_entropy(monkeypatch, label_smoothing, with_bias):
    # 37 rows in chunks of 8 (a vocabulary of 50 and 400 logit elements a chunk): four full chunks and a ragged one
    monkeypatch.setattr(loss_module, "CHUNK_ELEMENTS", 400)
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(50, dtype=torch.float64, requires_grad=True) if with_bias else None
    targets = torch.randint(0, 50, (37,))
    inputs = (hidden, weight, bias) if with_bias else (hidden, weight)

    expected = F.cross_entropy(
        F.linear(hidden, weight, bias), targets, label_smoothing=label_smoothing, reduction="sum"
    )
    fused = linear_cross_entropy(hidden, weight, bias, targets, label_smoothing)
    torch.testing.assert_close(fused, expected)
    # scaled on the way back, as train_step divides the sum by the token count
    for got, want in zip(gradients(fused / 7, *inputs), gradients(expected / 7, *inputs), strict=True):
        torch.testing.assert_close(got, want)


def test_linear_cross_entropy_of_no_rows_is_zero_with_zero_gradients():
    weight = torch.randn(50, 16, requires_grad=True)
    hidden = torch.zeros(0, 16, requires_grad=True)
    fused = linear_cross_entropy(hidden, weight, None, torch.zeros(0, dtype=torch.long), 0.1)
    assert float(fused.detach()) == 0.0
    (grad_weight,) = gradients(fused, weight)
    assert torch.equal(grad_weight, torch.zeros_like(weight))


@pytest.mark.parametrize(("output_bias", "final_logits_bias"), [(False, False), (True, False), (True, True)])
def test_translation_loss_equals_the_cross_entropy_of_the_models_logits_and_its_gradients(
    output_bias, final_logits_bias
):
    """Tied embeddings (one table: source, target and output projection) get the same gradient either way, padded
    targets count nothing, a model with an output bias trains it, and MarianMT's constant final_logits_bias is
    added as the model's logits add it."""
    torch.manual_seed(0)
    config = small_config(40, output_bias=output_bias, final_logits_bias=final_logits_bias, dropout=0.1)
    model = Transformer(config).train()
    if final_logits_bias:
        model.final_logits_bias.normal_()
    pad = model.config.pad_id
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, pad]])
    tgt = torch.tensor([[2, 7, 6, 5, 3], [2, 9, 8, 3, pad]])
    parameters = [p for p in model.parameters() if p.requires_grad]

    torch.manual_seed(1)  # the same dropout masks for both passes
    fused = TranslationLoss(model, pad, label_smoothing=0.1)(src, tgt)
    fused_grads = gradients(fused, *parameters)
    torch.manual_seed(1)
    plain = logits_loss(model, pad, label_smoothing=0.1)(src, tgt)
    plain_grads = gradients(plain, *parameters)

    torch.testing.assert_close(fused, plain)
    for got, want in zip(fused_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert output_bias == any(got.shape == (40,) and bool(got.abs().sum()) for got in fused_grads)


@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_cross_entropy_with_bf16_products_stays_within_bf16_precision_of_the_exact_one(monkeypatch, with_bias):
    """--cpu-bf16: the three products with the vocabulary in bf16 (8 bits of mantissa), the softmax, sums and
    gradients in fp32. Against float64: the loss within 0.5%, each gradient within 2% of its norm; and the bf16
    products are really used (the result is not the fp32 one)."""
    monkeypatch.setattr(loss_module, "CHUNK_ELEMENTS", 400)
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    bias = torch.randn(50, requires_grad=True) if with_bias else None
    targets = torch.randint(0, 50, (37,))
    inputs = (hidden, weight, bias) if with_bias else (hidden, weight)
    exact_inputs = [t.detach().double().requires_grad_() for t in inputs]
    exact_bias = exact_inputs[2] if with_bias else None
    exact = linear_cross_entropy(exact_inputs[0], exact_inputs[1], exact_bias, targets, 0.1)
    fp32 = linear_cross_entropy(hidden, weight, bias, targets, 0.1)
    bf16 = linear_cross_entropy(hidden, weight, bias, targets, 0.1, matmul_dtype=torch.bfloat16)

    assert bf16.dtype == torch.float32 and float(bf16.detach()) != float(fp32.detach())
    torch.testing.assert_close(bf16.double(), exact, rtol=5e-3, atol=0)
    for got, want in zip(gradients(bf16 / 7, *inputs), gradients(exact / 7, *exact_inputs), strict=True):
        assert got.dtype == torch.float32
        assert float((got.double() - want).norm() / want.norm()) < 0.02
