"""The accelerator check (python -m benchmarks.device_check) runs, finds no difference between the CPU and itself,
and reports a model that computes something else."""

from __future__ import annotations

import copy

import pytest
import torch

from benchmarks import device_check
from model import load_checkpoint
from model.translator import Translator
from tests.helpers import SENTENCE


def test_the_command_compares_every_kind_of_work_and_passes_on_the_cpu_against_itself(tiny_checkpoint, capsys):
    code = device_check.main(["--device", "cpu", "--checkpoint", str(tiny_checkpoint), "--sentences", "2",
                              "--steps", "2"])  # fmt: skip
    shown = capsys.readouterr().out
    assert code == 0, shown
    for check in ("trace, beam 1", "trace, beam 5", "forward under capture", "2 training steps"):
        assert check in shown
    assert shown.count(" yes") == 4


def test_a_model_that_computes_something_else_is_reported(tiny_checkpoint):
    cpu = load_checkpoint(tiny_checkpoint, "cpu")
    other = copy.deepcopy(cpu.model)
    with torch.no_grad():
        other.decoder.layers[0].cross_attn.q_proj.weight.mul_(1.01)  # a slightly different attention
    changed = Translator(other, cpu.tokenizer, torch.device("cpu"), name="changed", card=cpu.card)
    assert not device_check.compare_capture(changed, cpu, [SENTENCE]).matches
    assert not device_check.compare_traces(changed, cpu, [SENTENCE], beam_size=1).matches
    assert device_check.compare_traces(cpu, cpu, [SENTENCE], beam_size=1).matches


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_a_missing_device_is_a_clear_error(capsys):
    assert device_check.main(["--device", "cuda"]) == 2
    assert "no CUDA device here" in capsys.readouterr().err
