"""Thread-safe capture of attention probabilities and positional encodings.

Every MultiHeadAttention and PositionalEncoding owns a ``Probe``: an identity module its
intermediate passes through. Forward hooks are registered on the probes once, when the
model is built (``attach_probes``). A hook writes into the capture that is active in the
*current context* (a ``contextvars.ContextVar``), so one model object shared by many
threads (Streamlit sessions) gives each thread exactly its own results, and nothing
per-request is ever stored on the model.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

_ACTIVE: contextvars.ContextVar[Capture | None] = contextvars.ContextVar("attention_capture", default=None)


class Probe(nn.Identity):
    """Named identity hook point (TransformerLens style): observing it never changes the maths."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind  # "attention" or "positional"
        self.owner_name = ""  # set by attach_probes from named_modules()


@dataclass
class Capture:
    """What one ``capture_attention`` block recorded.

    ``attention[name]``: [batch, heads, query, key] probabilities (CPU) of the latest call of
    that module; ``positional[name]``: [positions, d_model] encoding added by that module.
    ``calls[name]`` keeps every call in order (incremental decoding calls a module per step).
    """

    attention: dict[str, torch.Tensor] = field(default_factory=dict)
    positional: dict[str, torch.Tensor] = field(default_factory=dict)
    calls: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    def record(self, probe: Probe, value: torch.Tensor) -> None:
        # Attention probabilities are fresh tensors and are kept as they are; the positional encoding is a
        # slice of the model's buffer and is copied, so that nothing a caller does can reach the model.
        value = value.detach().to("cpu", copy=probe.kind == "positional")
        target = self.attention if probe.kind == "attention" else self.positional
        target[probe.owner_name] = value
        self.calls.setdefault(probe.owner_name, []).append(value)


def is_capturing() -> bool:
    """True inside ``capture_attention`` in this thread/context: attention takes the explicit path."""
    return _ACTIVE.get() is not None


def _probe_hook(module: Probe, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
    capture = _ACTIVE.get()
    if capture is not None:
        capture.record(module, output)


def attach_probes(model: nn.Module) -> None:
    """Name every probe after its owning module and register the capture hook, once."""
    for name, module in model.named_modules():
        if isinstance(module, Probe) and not module.owner_name:
            module.owner_name = name.removesuffix(".probe")
            module.register_forward_hook(_probe_hook)
    model.probes_attached = True


@contextmanager
def capture_attention(model: nn.Module | None = None) -> Iterator[Capture]:
    """Record attention and positional encodings of every forward pass inside the block.

    The model argument documents which model is observed; hooks are already attached when
    it was built, so nothing is added to or removed from the model here.
    """
    if model is not None and not getattr(model, "probes_attached", False):
        raise ValueError("this model has no attached probes; build it with model.Transformer")
    capture = Capture()
    token = _ACTIVE.set(capture)
    try:
        yield capture
    finally:
        _ACTIVE.reset(token)
