"""From-scratch encoder-decoder Transformer with hookable, thread-safe attention capture.

The layout and the rules between the packages: docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import Any

# The public names, each loaded on first use: a notebook or viz reading a saved Trace (model.trace) then never loads
# torch, and loading a checkpoint (sentencepiece, safetensors) waits until one is loaded.
_PUBLIC = {
    "Capture": "model.capture",
    "capture_attention": "model.capture",
    "intervene": "model.capture",
    "TransformerConfig": "model.config",
    "Transformer": "model.transformer",
    "load_checkpoint": "model.checkpoint",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'model' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
