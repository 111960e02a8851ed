"""From-scratch encoder-decoder Transformer with hookable, thread-safe attention capture.

The layout and the rules between the packages: docs/architecture.md.
"""

from model.capture import Capture, capture_attention, intervene
from model.config import TransformerConfig
from model.transformer import Transformer

__all__ = ["Capture", "Transformer", "TransformerConfig", "capture_attention", "intervene", "load_checkpoint"]


def __getattr__(name: str):  # lazy: checkpoint loading pulls in sentencepiece and safetensors
    if name == "load_checkpoint":
        from model.checkpoint import load_checkpoint

        return load_checkpoint
    raise AttributeError(name)
