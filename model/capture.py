"""Thread-safe capture of, and intervention on, the Transformer's intermediates.

Every MultiHeadAttention and PositionalEncoding owns ``Probe``s: identity modules its
intermediates pass through (attention probabilities, per-head queries, keys, values and
outputs, the positional encoding added). Forward hooks are registered on the probes once,
when the model is built (``attach_probes``). A hook reads what is active in the *current
context* (``contextvars.ContextVar``s): an edit may replace the value (``intervene``) and a
capture records it (``capture_attention``). One model object shared by many threads
(Streamlit sessions) therefore gives each thread exactly its own results and its own
experiments, and nothing per-request is ever stored on the model.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

# An edit receives (owning module name, probe kind, value) and returns the value to use instead.
Edit = Callable[[str, str, torch.Tensor], torch.Tensor]

# Probe kinds. "attention": (B, H, Tq, Tk) probabilities; "positional": (T, d) encoding added;
# "query"/"key"/"value": (B, H, T, dk) per-head projections (keys/values include cached positions);
# "head_output": (B, H, Tq, dk) each head's weighted sum of values, before the heads are merged.
INTERNAL_KINDS = ("query", "key", "value", "head_output")

_ACTIVE: contextvars.ContextVar[Capture | None] = contextvars.ContextVar("attention_capture", default=None)
_EDIT: contextvars.ContextVar[Edit | None] = contextvars.ContextVar("intervention", default=None)


class Probe(nn.Identity):
    """Named identity hook point (TransformerLens style): observing it never changes the maths."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.owner_name = ""  # set by attach_probes from named_modules()


@dataclass
class Capture:
    """What one ``capture_attention`` block recorded.

    ``attention[name]``: [batch, heads, query, key] probabilities (CPU) of the latest call of
    that module; ``positional[name]``: [positions, d_model] encoding added by that module.
    ``calls[name]`` keeps every call in order (incremental decoding calls a module per step).
    ``internals[name][kind]`` (only with ``internals=True``): the latest per-head query, key,
    value and head output of each attention module, [batch, heads, positions, d_k].
    """

    attention: dict[str, torch.Tensor] = field(default_factory=dict)
    positional: dict[str, torch.Tensor] = field(default_factory=dict)
    calls: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    internals: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    record_internals: bool = False

    def record(self, probe: Probe, value: torch.Tensor) -> None:
        if probe.kind in INTERNAL_KINDS:
            if self.record_internals:
                self.internals.setdefault(probe.owner_name, {})[probe.kind] = value.detach().to("cpu")
            return
        # Attention probabilities are fresh tensors and are kept as they are; the positional encoding is a
        # slice of the model's buffer and is copied, so that nothing a caller does can reach the model.
        value = value.detach().to("cpu", copy=probe.kind == "positional")
        target = self.attention if probe.kind == "attention" else self.positional
        target[probe.owner_name] = value
        self.calls.setdefault(probe.owner_name, []).append(value)


def is_observed() -> bool:
    """True when a capture or an edit is active here: attention must take the explicit path and call its probes."""
    return _ACTIVE.get() is not None or _EDIT.get() is not None


def observes_internals() -> bool:
    """True when per-head queries, keys, values and outputs must pass through their probes here.

    That is when an edit is active (it may replace any of them) or the capture records them.
    A plain ``capture_attention`` block skips those four probes: nothing would read them, and
    each probe call is a hooked module call.
    """
    if _EDIT.get() is not None:
        return True
    capture = _ACTIVE.get()
    return capture is not None and capture.record_internals


def _probe_hook(module: Probe, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
    edit = _EDIT.get()
    if edit is not None:
        output = edit(module.owner_name, module.kind, output)
    capture = _ACTIVE.get()
    if capture is not None:
        capture.record(module, output)
    return output


def attach_probes(model: nn.Module) -> None:
    """Name every probe after its owning module and register the hook, once."""
    for name, module in model.named_modules():
        if isinstance(module, Probe) and not module.owner_name:
            module.owner_name = name.rpartition(".")[0]
            module.register_forward_hook(_probe_hook)
    model.probes_attached = True


def _require_probes(model: nn.Module | None) -> None:
    if model is not None and not getattr(model, "probes_attached", False):
        raise ValueError("this model has no attached probes; build it with model.Transformer")


@contextmanager
def capture_attention(model: nn.Module | None = None, internals: bool = False) -> Iterator[Capture]:
    """Record attention and positional encodings of every forward pass inside the block.

    ``internals=True`` also records each head's queries, keys, values and outputs. The model
    argument documents which model is observed; hooks were attached when it was built, so
    nothing is added to or removed from the model here.
    """
    _require_probes(model)
    capture = Capture(record_internals=internals)
    token = _ACTIVE.set(capture)
    try:
        yield capture
    finally:
        _ACTIVE.reset(token)


@contextmanager
def intervene(model: nn.Module | None, edit: Edit) -> Iterator[None]:
    """Replace probed values by ``edit(name, kind, value)`` in every forward pass inside the block.

    Only this thread/context sees the edit. Nested blocks compose: the outer edit runs first.
    An edit must return a tensor of the same shape; returning ``value`` unchanged is a no-op.
    """
    _require_probes(model)
    outer = _EDIT.get()
    combined = edit if outer is None else (lambda name, kind, value: edit(name, kind, outer(name, kind, value)))
    token = _EDIT.set(combined)
    try:
        yield
    finally:
        _EDIT.reset(token)
