"""One training step (model.training.optimization): train_step's summed loss and weighted update, the fused
optimiser against plain AdamW, and the CPU bf16 step against the fp32 one. Quick: no training loop runs here;
model.train end to end is tests/model/test_train.py (slow)."""

from __future__ import annotations

import torch

from model.training.loss import TranslationLoss
from model.training.optimization import make_optimizer, train_step
from model.transformer import Transformer
from tests.helpers import small_config


def test_train_step_returns_the_summed_loss_and_a_zero_weight_step_changes_nothing():
    torch.manual_seed(0)
    model = Transformer(small_config(12)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 7, 6, 5, 2], [1, 9, 8, 2, 0]])
    pad = model.config.pad_id
    assert pad == 0  # the padding written above
    options = {"clip_norm": 1.0, "use_amp": False, "loss_divisor": 7.0}
    before = {name: value.detach().clone() for name, value in model.state_dict().items()}
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(
            model(src, tgt[:, :-1]).flatten(0, 1),
            tgt[:, 1:].flatten(),
            ignore_index=pad,
            label_smoothing=0.1,
            reduction="sum",
        )
    loss = train_step(TranslationLoss(model, pad, 0.1), model.parameters(), optimizer, src, tgt, **options)
    torch.testing.assert_close(loss, expected)
    assert not loss.requires_grad
    assert any(not torch.equal(before[name], value) for name, value in model.state_dict().items())

    stand_in = Transformer(small_config(12)).train()
    stand_in_optimizer = torch.optim.AdamW(stand_in.parameters(), lr=1e-2, weight_decay=0.0)
    before = {name: value.detach().clone() for name, value in stand_in.state_dict().items()}
    stand_in_loss = TranslationLoss(stand_in, pad, 0.1)
    loss = train_step(stand_in_loss, stand_in.parameters(), stand_in_optimizer, src, tgt, **options, weight=0.0)
    assert float(loss) == 0.0
    assert all(torch.equal(before[name], value) for name, value in stand_in.state_dict().items())


def test_the_fused_optimiser_makes_the_same_update_as_plain_adamw():
    torch.manual_seed(0)
    fused_model = Transformer(small_config(12))
    plain_model = Transformer(small_config(12))
    plain_model.load_state_dict(fused_model.state_dict())
    fused = make_optimizer(fused_model.parameters(), lr=1e-2, weight_decay=0.01)
    plain = torch.optim.AdamW(plain_model.parameters(), lr=1e-2, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01)
    assert fused.defaults["fused"] and not plain.defaults["fused"]
    for _ in range(3):  # three steps: the moments and the bias correction move
        gradients = {name: torch.randn_like(p) for name, p in fused_model.named_parameters()}
        for model, optimizer in ((fused_model, fused), (plain_model, plain)):
            for name, parameter in model.named_parameters():
                parameter.grad = gradients[name].clone()
            optimizer.step()
    for (name, got), (_, want) in zip(fused_model.named_parameters(), plain_model.named_parameters(), strict=True):
        torch.testing.assert_close(got, want, msg=name)


def test_cpu_bf16_step_is_the_fp32_step_within_bf16_precision_with_attention_in_fp32(monkeypatch):
    """train_step(use_amp=True) on CPU tensors (--cpu-bf16): matrix products in bf16, attention itself in fp32 (the
    CPU flash-attention backward is slow in bf16), the weights fp32. The update is the fp32 one within a few percent
    of its size, and not the fp32 one (bf16 was really used)."""
    import model.layers

    attention_inputs: list[tuple[torch.dtype, bool]] = []
    sdpa = model.layers.F.scaled_dot_product_attention

    def recording_sdpa(q, k, v, **options):
        attention_inputs.append((q.dtype, torch.is_autocast_enabled("cpu")))
        return sdpa(q, k, v, **options)

    monkeypatch.setattr(model.layers.F, "scaled_dot_product_attention", recording_sdpa)
    torch.manual_seed(0)
    config = small_config(40, d_model=64, d_ff=128, norm_first=True, final_norm=True)
    models = {amp: Transformer(config).train() for amp in (False, True)}
    models[True].load_state_dict(models[False].state_dict())
    src = torch.randint(4, 40, (6, 9))
    tgt = torch.cat([torch.full((6, 1), config.bos_id), torch.randint(4, 40, (6, 8))], dim=1)
    losses, updates = {}, {}
    for amp, net in models.items():
        before = [p.detach().clone() for p in net.parameters()]
        optimizer = torch.optim.SGD(net.parameters(), lr=1.0)  # the update is minus the gradient
        options = {"clip_norm": 0.0, "use_amp": amp, "loss_divisor": 1.0}
        losses[amp] = train_step(
            TranslationLoss(net, config.pad_id, 0.1), net.parameters(), optimizer, src, tgt, **options
        )
        updates[amp] = torch.cat([(p.detach() - b).flatten() for p, b in zip(net.parameters(), before, strict=True)])
        assert all(p.dtype == torch.float32 for p in net.parameters())

    assert losses[True].dtype == torch.float32
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-2, atol=0)
    difference = float((updates[True] - updates[False]).norm() / updates[False].norm())
    assert 0 < difference < 0.05
    # every attention call of the bf16 step got fp32 inputs with autocast off; the fp32 step's were fp32 anyway
    assert attention_inputs and all(inputs == (torch.float32, False) for inputs in attention_inputs)


def test_a_training_step_keeps_attention_off_cudnn_and_gives_the_setting_back():
    """cuDNN's attention builds a graph for every new batch shape (most of a GPU step with token-bucketed
    batches), so train_step's forward runs with it switched off, and the setting is as it was afterwards."""
    torch.manual_seed(0)
    model = Transformer(small_config(12)).train()
    seen_during_forward = []
    attention = model.encoder.layers[0].self_attn
    attention.register_forward_pre_hook(lambda *_: seen_during_forward.append(torch.backends.cuda.cudnn_sdp_enabled()))
    src = torch.tensor([[5, 6, 7, 2]])
    tgt = torch.tensor([[1, 7, 6, 2]])
    assert torch.backends.cuda.cudnn_sdp_enabled()  # PyTorch's default, which the step must restore
    optimizer = make_optimizer(model.parameters(), lr=1e-3, weight_decay=0.0)
    options = {"clip_norm": 1.0, "loss_divisor": 3.0}
    for use_amp in (False, True):
        train_step(TranslationLoss(model, 0, 0.1), model.parameters(), optimizer, src, tgt, use_amp=use_amp, **options)
    assert seen_during_forward == [False, False]
    assert torch.backends.cuda.cudnn_sdp_enabled()
