"""SentencePiece tokenizers for source and target (one joint model or two separate ones)."""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

# Special ids fixed at training time so that TransformerConfig's defaults match.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
WORD_START = "\u2581"  # SentencePiece's "▁" marks a piece that begins a word


def train_sentencepiece(
    sentences: Iterable[str],
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    max_sentences: int = 2_000_000,
    normalization: str = "nmt_nfkc",
) -> bytes:
    """Train a SentencePiece model on an iterable of sentences and return the model bytes.

    ``normalization="identity"`` leaves out the ~240 KB NFKC table: for tiny checkpoints of
    text that NFKC would leave unchanged anyway (plain ASCII).
    """
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=buffer,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        normalization_rule_name=normalization,
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        hard_vocab_limit=False,  # tiny corpora (tests, toy tasks) may not reach vocab_size
        minloglevel=2,
    )
    return buffer.getvalue()


def load_sentencepiece(path: Path) -> spm.SentencePieceProcessor:
    """Load a .model file, naming the file in the error when it is not a SentencePiece model."""
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(Path(path).read_bytes())
    except (RuntimeError, OSError) as error:
        raise ValueError(f"{path}: not a valid SentencePiece model ({error})") from error
    return processor


@dataclass
class Tokenizer:
    """Source and target SentencePiece processors; ``joint`` when both sides share one model."""

    source: spm.SentencePieceProcessor
    target: spm.SentencePieceProcessor

    @property
    def joint(self) -> bool:
        return self.source is self.target

    def processor(self, side: str) -> spm.SentencePieceProcessor:
        if side not in ("source", "target"):
            raise ValueError(f"side must be 'source' or 'target', not {side!r}")
        return self.source if side == "source" else self.target

    def vocab_size(self, side: str) -> int:
        return self.processor(side).get_piece_size()

    def encode(self, text: str, side: str = "source") -> list[int]:
        """Piece ids of text, without BOS/EOS."""
        return self.processor(side).encode(text, out_type=int)

    def decode(self, ids: Iterable[int], side: str = "target") -> str:
        """Text of ids; special tokens (pad, bos, eos) are dropped."""
        processor = self.processor(side)
        return processor.decode(
            [i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID) and i < processor.get_piece_size()]
        )

    def pieces(self, ids: Iterable[int], side: str = "source") -> list[str]:
        """Piece strings of ids; special tokens appear as <pad>, <s>, </s>, <unk>."""
        processor = self.processor(side)
        return [processor.id_to_piece(i) for i in ids]

    def special_ids(self) -> dict[str, int]:
        return {"pad_id": PAD_ID, "unk_id": UNK_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}

    def save(self, folder: Path) -> list[str]:
        """Write tokenizer.model (joint) or source.model + target.model; return the file names."""
        folder = Path(folder)
        if self.joint:
            (folder / "tokenizer.model").write_bytes(self.source.serialized_model_proto())
            return ["tokenizer.model"]
        (folder / "source.model").write_bytes(self.source.serialized_model_proto())
        (folder / "target.model").write_bytes(self.target.serialized_model_proto())
        return ["source.model", "target.model"]

    @classmethod
    def load(cls, folder: Path) -> Tokenizer:
        folder = Path(folder)
        if (folder / "tokenizer.model").exists():
            joint = load_sentencepiece(folder / "tokenizer.model")
            return cls(joint, joint)
        missing = [name for name in ("source.model", "target.model") if not (folder / name).exists()]
        if missing:
            raise FileNotFoundError(f"{folder}: no tokenizer.model and missing {', '.join(missing)}")
        return cls(load_sentencepiece(folder / "source.model"), load_sentencepiece(folder / "target.model"))

    @classmethod
    def from_model_bytes(cls, source: bytes, target: bytes | None = None) -> Tokenizer:
        source_processor = spm.SentencePieceProcessor(model_proto=source)
        if target is None:
            return cls(source_processor, source_processor)
        return cls(source_processor, spm.SentencePieceProcessor(model_proto=target))


def word_index(pieces: list[str], special: Iterable[str] = ("<s>", "</s>", "<pad>")) -> list[int]:
    """Word number of each piece: a piece starting with "▁" (or a special token) starts a new word.

    Views that merge subwords into words sum attention over a word's key pieces and average
    it over its query pieces using this grouping.
    """
    special = set(special)
    groups: list[int] = []
    current = -1
    previous_special = True
    for piece in pieces:
        starts_word = piece in special or piece.startswith(WORD_START) or previous_special
        if starts_word:
            current += 1
        groups.append(current)
        previous_special = piece in special
    return groups
