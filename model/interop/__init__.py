"""Models from elsewhere: torch.nn.Transformer import/export (torch_transformer), pickled weights (convert),
MarianMT / OPUS-MT folders (marian, ``python -m model.import_marian``).

``import_torch``, ``export_torch`` and ``Seq2SeqTransformer`` are named here because they are
the public contract (``model.interop.import_torch``).
"""

from model.interop.torch_transformer import Seq2SeqTransformer, export_torch, import_torch

__all__ = ["Seq2SeqTransformer", "export_torch", "import_torch"]
