"""Models from elsewhere: torch.nn.Transformer models, pickled PyTorch weights, MarianMT / OPUS-MT folders.

``import_torch``, ``export_torch`` and ``Seq2SeqTransformer`` are named here because they are
the public contract (``model.interop.import_torch``).

The layout and the rules between the packages: docs/architecture.md.
"""

from model.interop.torch_transformer import Seq2SeqTransformer, export_torch, import_torch

__all__ = ["Seq2SeqTransformer", "export_torch", "import_torch"]
