"""Which attention is this: the three kinds of attention, their module names, labels and heads, defined once.

The network uses attention three ways (section 3.2.3 of the paper): encoder self-attention,
decoder self-attention (causal) and cross-attention (decoder queries, encoder keys). The
code names these kinds "encoder_self", "decoder_self" and "cross", and keeps "encoder" and
"decoder" for the two stacks of layers (``STACKS``). Each layer's module is found under the
name ``named_modules()`` gives it, e.g. "decoder.layers.1.cross_attn", which is also the key
of ``Capture.attention`` and ``Trace.attention``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from model.config import TransformerConfig

STACKS = ("encoder", "decoder")  # the two stacks of layers; each has its own embedding and positional encoding
ATTENTION_KINDS = ("encoder_self", "decoder_self", "cross")
# Kind -> (stack, attribute of the stack's layers): the module is "{stack}.layers.{layer}.{attribute}".
_MODULES = {
    "encoder_self": ("encoder", "self_attn"),
    "decoder_self": ("decoder", "self_attn"),
    "cross": ("decoder", "cross_attn"),
}
KIND_LABELS = {"encoder_self": "encoder self", "decoder_self": "decoder self", "cross": "cross"}  # tables, pickers
KIND_TITLES = {
    "encoder_self": "Encoder self-attention",
    "decoder_self": "Decoder self-attention",
    "cross": "Cross-attention",
}
_MODULE_NAME = re.compile(r"(encoder|decoder)\.layers\.(\d+)\.(self_attn|cross_attn)")
_KIND_OF_MODULE = {module: kind for kind, module in _MODULES.items()}


def layer_label(layer: int) -> str:
    """A layer as people count it, from 1: layer_label(0) -> "layer 1". Code, module names and links count from 0;
    everything a person reads counts from 1, as the decoding steps do."""
    return f"layer {layer + 1}"


def head_label(head: int) -> str:
    """A head as people count it, from 1: head_label(0) -> "head 1" (see layer_label)."""
    return f"head {head + 1}"


def short_head_label(layer: int, head: int) -> str:
    """A head where space is short, counted from 1: short_head_label(0, 2) -> "L1 H3"."""
    return f"L{layer + 1} H{head + 1}"


def head_title(kind: str, layer: int, head: int | None = None) -> str:
    """A head (or a layer's attention of one kind) in plain words, as a student reads it in a title, counted from 1:
    head_title("cross", 2, 1) -> "Decoder layer 3 – cross-attention – head 2"."""
    stack = stack_of(kind)
    what = "cross-attention" if kind == "cross" else "self-attention"
    words = f"{stack.capitalize()} {layer_label(layer)} – {what}"
    return words if head is None else f"{words} – {head_label(head)}"


def check_kind(kind: str) -> str:
    """``kind`` itself when it is "encoder_self", "decoder_self" or "cross"; a ValueError otherwise."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind must be one of {ATTENTION_KINDS}, not {kind!r}")
    return kind


def stack_of(kind: str) -> str:
    """The stack whose layers hold the attention of ``kind``: stack_of("cross") -> "decoder"."""
    return _MODULES[check_kind(kind)][0]


def module_name(kind: str, layer: int) -> str:
    """The attention module of ``kind`` in ``layer``: module_name("cross", 1) -> "decoder.layers.1.cross_attn"."""
    stack, attribute = _MODULES[check_kind(kind)]
    return f"{stack}.layers.{layer}.{attribute}"


def _parse(name: str) -> tuple[str, int] | None:
    """(kind, layer) of an attention module name, None for any other name."""
    match = _MODULE_NAME.fullmatch(name)
    if match is None:
        return None
    kind = _KIND_OF_MODULE.get((match[1], match[3]))
    return None if kind is None else (kind, int(match[2]))


def parse_module_name(name: str) -> tuple[str, int]:
    """Kind and layer of an attention module name: "decoder.layers.1.cross_attn" -> ("cross", 1)."""
    parsed = _parse(name)
    if parsed is None:
        raise ValueError(
            f"{name!r} is not an attention module name such as 'decoder.layers.0.cross_attn' "
            "(encoder or decoder self_attn, decoder cross_attn)"
        )
    return parsed


def module_kind(name: str) -> str:
    """The kind of an attention module name: "encoder.layers.0.self_attn" -> "encoder_self"."""
    return parse_module_name(name)[0]


def attention_modules(names: Iterable[str], kind: str) -> list[str]:
    """The attention modules of ``kind`` among ``names``, in layer order (other names are left out)."""
    check_kind(kind)
    layers = {parsed[1]: name for name in names if (parsed := _parse(name)) is not None and parsed[0] == kind}
    return [layers[layer] for layer in sorted(layers)]


def layer_count(config: TransformerConfig, kind: str) -> int:
    """Layers that have attention of ``kind``."""
    return config.n_encoder_layers if stack_of(kind) == "encoder" else config.n_decoder_layers


@dataclass(frozen=True)
class HeadRef:
    """One attention head: its kind ("encoder_self", "decoder_self" or "cross"), layer and head."""

    kind: str
    layer: int
    head: int

    def __post_init__(self) -> None:
        check_kind(self.kind)
        for name in ("layer", "head"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, not {value!r}")

    @property
    def module_name(self) -> str:
        """The attention module the head belongs to, e.g. "decoder.layers.1.cross_attn"."""
        return module_name(self.kind, self.layer)

    @property
    def label(self) -> str:
        """Plain text for a picker or a table, counted from 1: HeadRef("cross", 0, 1).label -> "cross L1 H2"."""
        return f"{KIND_LABELS[self.kind]} {short_head_label(self.layer, self.head)}"


def all_heads(config: TransformerConfig, kinds: Sequence[str] = ATTENTION_KINDS) -> list[HeadRef]:
    """Every head of the given kinds, in kind, layer, head order."""
    return [
        HeadRef(kind, layer, head)
        for kind in kinds
        for layer in range(layer_count(config, kind))
        for head in range(config.n_heads)
    ]


def check_heads(config: TransformerConfig, heads: Sequence[HeadRef]) -> list[HeadRef]:
    """The heads, in order and without repeats; a head this model does not have is refused."""
    checked: list[HeadRef] = []
    for ref in heads:
        if not isinstance(ref, HeadRef):
            raise ValueError(f"heads must be HeadRef values, not {ref!r}")
        if ref.layer >= layer_count(config, ref.kind) or ref.head >= config.n_heads:
            raise ValueError(
                f"{ref.label} is not in this model ({layer_count(config, ref.kind)} {ref.kind} layers, "
                f"{config.n_heads} heads)"
            )
        if ref not in checked:
            checked.append(ref)
    return checked
