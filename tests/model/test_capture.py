"""capture_attention and intervene: what a capture hands back, and which models they accept."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from model.capture import capture_attention, intervene, observes_internals
from tests.helpers import random_model

SOURCE = torch.tensor([[5, 6, 7, 8, 3]])


@pytest.fixture(scope="module")
def model():
    return random_model(40, seed=0)


def test_editing_a_captured_positional_encoding_leaves_the_model_as_it_was(model):
    """The captured encoding is a copy: zeroing it in place must not reach the model's buffer."""
    with torch.no_grad():
        before, _ = model.encode(SOURCE)
        with capture_attention(model) as capture:
            model.encode(SOURCE)
        capture.positional["encoder.positional"].zero_()
        after, _ = model.encode(SOURCE)
    assert torch.equal(before, after)
    assert model.encoder.positional.encoding.abs().sum() > 0


def test_calls_keep_every_call_in_order_the_latest_as_attention(model):
    with torch.no_grad(), capture_attention(model) as capture:
        model.encode(SOURCE)
        model.encode(SOURCE[:, :3])
    name = "encoder.layers.0.self_attn"
    shapes = [tuple(call.shape) for call in capture.calls[name]]
    assert shapes == [(1, 4, 5, 5), (1, 4, 3, 3)]
    assert capture.calls[name][-1] is capture.attention[name]
    assert capture.calls["encoder.positional"][-1] is capture.positional["encoder.positional"]


def test_only_an_edit_or_an_internals_capture_sends_values_through_the_internal_probes(model):
    assert not observes_internals()
    with capture_attention(model):
        assert not observes_internals()  # a plain capture skips the per-head query/key/value/output probes
    with capture_attention(model, internals=True):
        assert observes_internals()
    with intervene(model, lambda name, kind, value: value):
        assert observes_internals()


def test_a_model_without_attached_probes_is_refused_and_no_model_is_fine():
    message = r"^this model has no attached probes; build it with model\.Transformer$"
    with pytest.raises(ValueError, match=message), capture_attention(nn.Linear(2, 2)):
        pass
    with pytest.raises(ValueError, match=message), intervene(nn.Linear(2, 2), lambda name, kind, value: value):
        pass
    with capture_attention() as capture, intervene(None, lambda name, kind, value: value):
        assert capture.attention == {}


def test_a_capture_records_only_its_own_model_and_two_captures_nest():
    first, second = random_model(40, seed=1), random_model(40, seed=2)
    source, target = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    with torch.inference_mode():
        with capture_attention(first) as alone:
            first(source, target)
        with capture_attention(first) as of_first, capture_attention(second) as of_second:
            first(source, target)
            second(source, target)  # same module names: it must not overwrite the first model's
        with capture_attention() as of_every_model:
            first(source, target)
            second(source, target)
        with capture_attention(first) as of_first_only:
            second(source, target)
    name = "decoder.layers.0.cross_attn"
    assert torch.equal(of_first.attention[name], alone.attention[name])
    assert not torch.equal(of_second.attention[name], of_first.attention[name])
    assert [len(calls) for calls in (of_first.calls[name], of_second.calls[name])] == [1, 1]
    assert len(of_every_model.calls[name]) == 2  # no model named: every model's calls, in order
    assert torch.equal(of_every_model.calls[name][0], alone.attention[name])
    assert of_first_only.attention == {} and of_first_only.positional == {}


def test_a_copied_model_is_a_model_of_its_own_to_capture():
    model = random_model(40, seed=1)
    copied = copy.deepcopy(model)
    source, target = torch.tensor([[5, 6, 2]]), torch.tensor([[1, 8]])
    with torch.inference_mode(), capture_attention(copied) as capture:
        model(source, target)
        copied(source, target)
    assert [len(calls) for calls in capture.calls.values()] == [1] * len(capture.calls)
