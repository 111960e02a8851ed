"""Thread-safe capture of, and intervention on, the Transformer's intermediates.

Every MultiHeadAttention and PositionalEncoding owns ``Probe``s: identity modules its intermediates pass through
(attention probabilities, per-head queries, keys, values and outputs, the positional encoding added). Every box of
the paper's Figure 1 has its hook points too (``ACTIVATION_POINTS``: the residual stream between sublayers, each
sublayer's and layer norm's output, the feed-forward hidden units, the embeddings, the logits). Forward hooks are
registered on the probes once, when the model is built (``attach_probes``). A hook reads what is active in the
*current context* (``contextvars.ContextVar``s): an edit may replace the value (``intervene``) and a capture records
it (``capture_attention``). One model object shared by many threads (Streamlit sessions) therefore gives each thread
exactly its own results and its own experiments, and nothing per-request is ever stored on the model.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from model.config import TransformerConfig

# An edit receives (owning module name, probe kind, value) and returns the value to use instead.
Edit = Callable[[str, str, torch.Tensor], torch.Tensor]

# Probe kinds. "attention": (B, H, Tq, Tk) probabilities; "positional": (T, d) encoding added;
# "query"/"key"/"value": (B, H, T, dk) per-head projections (keys/values include cached positions);
# "head_output": (B, H, Tq, dk) each head's weighted sum of values, before the heads are merged.
INTERNAL_KINDS = ("query", "key", "value", "head_output")
# "activation": a hook point of ACTIVATION_POINTS, (B, T, features); recorded under the probe's own path.
ACTIVATION = "activation"

# Every activation hook point, by where it sits (TransformerLens's names where they apply, on our module paths), in
# the order of a pre-norm layer (a post-norm layer reaches each normN after its sublayer, not before). A stack's
# points are "{stack}.<point>", a layer's "{stack}.layers.{layer}.<point>", the model's are bare. "<module>.hook_out"
# is that module's output (before the dropout a residual sublayer adds in training); the hook_resid_* points are the
# residual stream itself: before the layer, after its attention sublayer(s) (post-norm: after their Add & Norm) and
# after the layer.
ACTIVATION_POINTS: dict[str, tuple[str, ...]] = {
    # the scaled token embeddings (3.4), then their sum with the positional encoding: the first layer's input (unless
    # the model normalises it: embedding_norm)
    "stack": ("hook_embed", "hook_embed_pos"),
    "encoder_layer": (
        "hook_resid_pre",
        "norm1.hook_out",  # pre-norm: before self-attention; post-norm: after its Add & Norm
        "self_attn.hook_out",
        "hook_resid_mid",
        "norm2.hook_out",
        "feed_forward.hook_hidden",  # the activation function's output, (B, T, d_ff)
        "feed_forward.hook_out",
        "hook_resid_post",
    ),
    "decoder_layer": (
        "hook_resid_pre",
        "norm1.hook_out",
        "self_attn.hook_out",
        "hook_resid_mid",
        "norm2.hook_out",
        "cross_attn.hook_out",
        "hook_resid_mid_cross",
        "norm3.hook_out",
        "feed_forward.hook_hidden",
        "feed_forward.hook_out",
        "hook_resid_post",
    ),
    # the embedding sum normalised: the first layer's input in models with an embedding norm (mBART's)
    "embedding_norm": ("embedding_norm.hook_out",),
    "final_norm": ("norm.hook_out",),  # a stack's last LayerNorm, in models that have one (final_norm)
    "model": ("hook_logits",),  # (B, T, V): the output projection plus any final logits bias
}

# The captures active here, outermost first: each records the probes of its own model (every model's, when it was
# opened without one), so two models run in one block fill two captures and never overwrite each other's results.
_ACTIVE: contextvars.ContextVar[tuple[Capture, ...]] = contextvars.ContextVar("attention_captures", default=())
_EDIT: contextvars.ContextVar[Edit | None] = contextvars.ContextVar("intervention", default=None)


class Probe(nn.Identity):
    """Named identity hook point (TransformerLens style): observing it never changes the maths."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.owner_name = ""  # set by attach_probes from named_modules()
        self.path = ""  # the probe's own name (an activation is recorded under it), set by attach_probes
        self.model_token: object | None = None  # set by attach_probes: which model the probe belongs to


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
    activations: dict[str, torch.Tensor] = field(default_factory=dict)
    record_internals: bool = False
    record_activations: bool = False
    model_token: object | None = None  # the observed model's (attach_probes); None: every model's probes

    def observes(self, probe: Probe) -> bool:
        return self.model_token is None or probe.model_token is self.model_token

    def record(self, probe: Probe, value: torch.Tensor) -> None:
        if probe.kind == ACTIVATION:
            if self.record_activations:  # a copy: the model's code may go on to change its tensor in place
                self.activations[probe.path] = value.detach().to("cpu", copy=True)
            return
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
    return bool(_ACTIVE.get()) or _EDIT.get() is not None


def observes_internals() -> bool:
    """True when per-head queries, keys, values and outputs must pass through their probes here.

    That is when an edit is active (it may replace any of them) or the capture records them.
    A plain ``capture_attention`` block skips those four probes: nothing would read them, and
    each probe call is a hooked module call.
    """
    if _EDIT.get() is not None:
        return True
    return any(capture.record_internals for capture in _ACTIVE.get())


def observes_activations() -> bool:
    """True when the activation hook points must be called here: a capture records them.

    An edit never sees them (edits replace attention, the per-head values and the positional encoding), so a plain
    forward and an edited one skip every activation probe.
    """
    return any(capture.record_activations for capture in _ACTIVE.get())


def activation_names(config: TransformerConfig) -> list[str]:
    """Every hook point a capture with ``activations=True`` records for a model of ``config``, in forward order:
    the encoder's, then the decoder's, then the logits."""
    names = []
    for stack, layer_count in (("encoder", config.n_encoder_layers), ("decoder", config.n_decoder_layers)):
        names += [f"{stack}.{point}" for point in ACTIVATION_POINTS["stack"]]
        if config.embedding_norm:
            names += [f"{stack}.{point}" for point in ACTIVATION_POINTS["embedding_norm"]]
        for layer in range(layer_count):
            names += [f"{stack}.layers.{layer}.{point}" for point in ACTIVATION_POINTS[f"{stack}_layer"]]
        if config.final_norm:
            names += [f"{stack}.{point}" for point in ACTIVATION_POINTS["final_norm"]]
    return names + list(ACTIVATION_POINTS["model"])


def _probe_hook(module: Probe, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
    edit = _EDIT.get()
    if edit is not None and module.kind != ACTIVATION:
        output = edit(module.owner_name, module.kind, output)
    for capture in _ACTIVE.get():
        if capture.observes(module):
            capture.record(module, output)
    return output


def attach_probes(model: nn.Module) -> None:
    """Name every probe after its owning module, mark it as the model's and register the hook, once."""
    token = object()  # what a capture of this model compares its probes with
    # capture_token and probes_attached are plain attributes: nn.Module keeps any value, though torch annotates its
    # __setattr__ for tensors and modules only
    model.capture_token = token  # type: ignore[assignment]
    for name, module in model.named_modules():
        if isinstance(module, Probe) and not module.owner_name:
            module.owner_name = name.rpartition(".")[0]
            module.path = name
            module.model_token = token
            module.register_forward_hook(_probe_hook)
    model.probes_attached = True  # type: ignore[assignment]


def _require_probes(model: nn.Module | None) -> None:
    if model is not None and not getattr(model, "probes_attached", False):
        raise ValueError("this model has no attached probes; build it with model.Transformer")


@contextmanager
def capture_attention(
    model: nn.Module | None = None, internals: bool = False, activations: bool = False
) -> Iterator[Capture]:
    """Record attention and positional encodings of ``model``'s forward passes inside the block (of every model's,
    with ``model=None``).

    ``internals=True`` also records each head's queries, keys, values and outputs; ``activations=True`` every hook
    point of ``activation_names`` (``cap.activations``). Another model run in the block
    records nothing here, so captures of two models, nested, each hold their own model's results (a comparison, an
    import check). Hooks were attached when the model was built, so nothing is added to or removed from the model
    here.
    """
    _require_probes(model)
    capture = Capture(
        record_internals=internals, record_activations=activations, model_token=getattr(model, "capture_token", None)
    )
    token = _ACTIVE.set((*_ACTIVE.get(), capture))
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
