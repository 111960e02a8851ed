"""SentencePiece tokenizers for source and target (one joint model or two separate ones).

Marian mode (MarianMT / OPUS-MT, ``model.interop.marian``): source.spm cuts sources,
target.spm cuts targets, and vocab.json maps piece strings (not SentencePiece ids) to
model ids, ``<unk>`` for the rest. A model with separate vocabularies (the tc-big ones) has a
target_vocab.json beside it for the target side, with special ids of its own. ``>>xx<<``
language codes are looked up whole.
"""

from __future__ import annotations

import io
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

import sentencepiece as spm

from model.decoding.languages import LanguagePair

# Special ids fixed at training time so that TransformerConfig's defaults match.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
WORD_START = "\u2581"  # SentencePiece's "▁" marks a piece that begins a word
MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")
MARIAN_TARGET_VOCAB = "target_vocab.json"  # a Marian model's target vocabulary, when it is not vocab.json
# a many-language model's codes (mBART-50, M2M100, NLLB): where the source's code goes and each code's piece
LANGUAGES_FILE = "languages.json"
# where a many-language model reads the source's language code: before the pieces ([code] pieces </s>: mBART-50,
# M2M100, NLLB) or after them (pieces </s> [code]: NLLB's legacy_behaviour)
SOURCE_CODE_PLACES = ("prefix", "suffix")
LANGUAGE_CODE = re.compile(r">>[A-Za-z0-9_]+<<")  # a multi-target MarianMT model's ">>fr<<" piece


SpecialName = Literal["pad_id", "unk_id", "bos_id", "eos_id"]  # the keys of SpecialIds


class SpecialIds(TypedDict):
    """A vocabulary's special ids, named as TransformerConfig's fields; bos_id None when it has no <s> (MarianMT)."""

    pad_id: int
    unk_id: int
    bos_id: int | None
    eos_id: int


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


class VocabularyError(ValueError):
    """A Marian vocabulary table that cannot be used; ``file`` names it (vocab.json or target_vocab.json)."""

    def __init__(self, file: str, problem: str) -> None:
        super().__init__(f"{file} {problem}")
        self.file = file


def piece_table(vocab: dict[str, int], file: str) -> dict[int, str]:
    """id -> piece of a Marian vocabulary, which must hold </s>, <unk> and <pad> and number its pieces 0..N-1."""
    missing = [piece for piece in ("</s>", "<unk>", "<pad>") if piece not in vocab]
    if missing:
        raise VocabularyError(file, f"lacks {', '.join(missing)}")
    pieces = {index: piece for piece, index in vocab.items()}
    if sorted(pieces) != list(range(len(vocab))):
        raise VocabularyError(file, "ids must be 0..N-1, each used once")
    return pieces


@dataclass(frozen=True)
class Languages:
    """A many-language model's language codes: each code's piece (``"en"`` -> ``"__en__"`` in M2M100, the code itself
    in mBART-50 and NLLB) in id order, and where the source's code goes (SOURCE_CODE_PLACES). The target's code is
    the first output token, forced as generate's ``forced_bos_token_id`` forces it."""

    pieces: dict[str, str]
    source_code: str = "prefix"

    def __post_init__(self) -> None:
        if self.source_code not in SOURCE_CODE_PLACES:
            raise ValueError(f"source_code must be one of {', '.join(SOURCE_CODE_PLACES)}, not {self.source_code!r}")
        if not self.pieces:
            raise ValueError("a many-language model needs at least one language code")

    @classmethod
    def read(cls, path: Path) -> Languages:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            pieces = {str(code): str(piece) for code, piece in data["pieces"].items()}
            return cls(pieces, str(data.get("source_code", "prefix")))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, AttributeError, TypeError) as error:
            raise ValueError(f"{path}: not a language table ({error})") from error

    def framed(self, pieces: list[int], code: int, eos_id: int) -> list[int]:
        """A source's ids with its language code and </s>, where the model reads them."""
        return [code, *pieces, eos_id] if self.source_code == "prefix" else [*pieces, eos_id, code]


@dataclass
class Tokenizer:
    """Source and target SentencePiece processors; ``joint`` when both sides share one model.

    With ``vocab`` (Marian mode) ids come from that piece -> id table, not from SentencePiece; with
    ``target_vocab`` too, ``vocab`` is the source side's and ``target_vocab`` the target side's.
    """

    source: spm.SentencePieceProcessor
    target: spm.SentencePieceProcessor
    vocab: dict[str, int] | None = None
    target_vocab: dict[str, int] | None = None
    languages: Languages | None = None  # a many-language model's codes, on both sides (not Marian's >>xx<<)
    _pieces: dict[str, dict[int, str]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _language_codes: list[str] = field(default_factory=list, init=False, repr=False, compare=False)
    _code_ids: frozenset[int] = field(default=frozenset(), init=False, repr=False, compare=False)  # languages' ids

    def __post_init__(self) -> None:
        if self.target_vocab is not None and self.vocab is None:
            raise ValueError("a target_vocab needs a source vocab (Marian mode)")
        if self.vocab is not None:
            # read once: a page asks on every run, and an OPUS-MT vocabulary has tens of thousands of pieces
            # (the codes are source pieces: a multi-target model reads ">>fr<<" in front of the sentence)
            if self.languages is None:
                self._language_codes = [piece[2:-2] for piece in self.vocab if LANGUAGE_CODE.fullmatch(piece)]
            else:
                missing = [piece for piece in self.languages.pieces.values() if piece not in self.vocab]
                if missing:
                    raise VocabularyError(LANGUAGES_FILE, f"names pieces vocab.json lacks: {', '.join(missing[:5])}")
                self._language_codes = list(self.languages.pieces)
                self._code_ids = frozenset(self.vocab[piece] for piece in self.languages.pieces.values())
            source = piece_table(self.vocab, "vocab.json")
            target = source if self.target_vocab is None else piece_table(self.target_vocab, MARIAN_TARGET_VOCAB)
            self._pieces = {"source": source, "target": target}

    @property
    def joint(self) -> bool:
        return self.source is self.target

    @property
    def marian(self) -> bool:
        return self.vocab is not None

    @property
    def separate_vocabularies(self) -> bool:
        """Marian mode with a target vocabulary of its own (target_vocab.json)."""
        return self.target_vocab is not None

    @property
    def files(self) -> list[str]:
        """The file names this tokenizer is saved as."""
        if self.marian:
            extra = [MARIAN_TARGET_VOCAB] if self.separate_vocabularies else []
            return [*MARIAN_FILES, *extra, *([LANGUAGES_FILE] if self.languages is not None else [])]
        return ["tokenizer.model"] if self.joint else ["source.model", "target.model"]

    def processor(self, side: str) -> spm.SentencePieceProcessor:
        if side not in ("source", "target"):
            raise ValueError(f"side must be 'source' or 'target', not {side!r}")
        return self.source if side == "source" else self.target

    def side_vocab(self, side: str) -> dict[str, int]:
        """Marian mode: the piece -> id table of one side (the same table for both unless the vocabularies are
        separate)."""
        if self.vocab is None:
            raise ValueError("only a Marian tokenizer has piece -> id tables")
        self.processor(side)  # refuses a side other than "source" or "target"
        return self.target_vocab if side == "target" and self.target_vocab is not None else self.vocab

    def language_codes(self) -> list[str]:
        """The target-language codes a multi-target MarianMT model reads first (``>>fr<<`` -> "fr"), in vocabulary
        order, or a many-language model's codes (source and target: ``languages``); empty for a model with one
        target language."""
        return list(self._language_codes)

    def language_id(self, code: str) -> int:
        """A many-language model's id of a language code; a code it does not have is refused, naming a few it has."""
        if self.languages is None or self.vocab is None:
            raise ValueError("this model has no language codes to choose from")
        piece = self.languages.pieces.get(code)
        if piece is None:
            known = ", ".join(list(self.languages.pieces)[:8])
            raise ValueError(f"unknown language code {code!r}; this model's include {known}, ...")
        return self.vocab[piece]

    def language_pair(self, asked: LanguagePair, default: LanguagePair) -> LanguagePair:
        """The language codes a call uses: those ``asked`` for, else ``default``'s (a model card's), else the model's
        first and last; LanguagePair() for a model without codes, which refuses any asked for."""
        if self.languages is None:
            if asked.source is not None or asked.target is not None:
                raise ValueError("this model has no language codes: give no source or target language")
            return LanguagePair()
        codes = self.language_codes()
        pair = LanguagePair(asked.source or default.source or codes[0], asked.target or default.target or codes[-1])
        for code in pair:
            self.language_id(code or "")  # refuses a code the model does not have
        return pair

    def forced_start(self, target: str | None, output: list[int]) -> list[int]:
        """What a many-language model's output starts with: ``target``'s code (generate's forced_bos_token_id),
        unless ``output`` starts with a language code already; nothing without a target code."""
        if target is None or self.languages is None or self.starts_with_language(output):
            return []
        return [self.language_id(target)]

    def starts_with_language(self, output: list[int]) -> bool:
        """Whether ``output`` (decoder ids after the start token) starts with a many-language model's code."""
        return bool(output) and output[0] in self._code_ids

    def framed_source(self, pieces: list[int], code: str | None, eos_id: int) -> list[int]:
        """A source's ids as the model reads them: its pieces, EOS, and a many-language model's code (``code``)."""
        if code is None or self.languages is None:
            return [*pieces, eos_id]
        return self.languages.framed(pieces, self.language_id(code), eos_id)

    def vocab_size(self, side: str) -> int:
        if self.vocab is not None:
            return len(self.side_vocab(side))
        return self.processor(side).get_piece_size()

    def encode(self, text: str, side: str = "source", sampling: float = 0.0) -> list[int]:
        """Piece ids of text, without BOS/EOS.

        ``sampling`` > 0 draws one of the text's segmentations instead of the best one (subword regularisation,
        for training): a BPE tokenizer skips each merge with this probability (BPE-dropout, Provilkov et al.
        2020), a unigram one samples with this smoothing (Kudo 2018). The draws are SentencePiece's and differ
        from process to process.
        """
        options: dict[str, Any] = {"enable_sampling": True, "alpha": sampling, "nbest_size": -1} if sampling > 0 else {}
        if self.vocab is None:
            return self.processor(side).encode(text, out_type=int, **options)
        code, text = split_language_code(text)
        pieces = code + self.processor(side).encode(text, out_type=str, **options)
        vocab = self.side_vocab(side)
        unk = vocab["<unk>"]
        return [vocab.get(piece, unk) for piece in pieces]

    def decode(self, ids: Iterable[int], side: str = "target") -> str:
        """Text of ids; special tokens (pad, bos, eos; Marian: also unk) are dropped."""
        special = self.special_ids(side)
        if self.vocab is not None:
            dropped: set[int | None] = {special["pad_id"], special["eos_id"], special["unk_id"]}
            if self.languages is not None:  # what transformers' skip_special_tokens drops too
                dropped |= {special["bos_id"], *self._code_ids}
            known = self._pieces[side]
            pieces = [known[i] for i in ids if i not in dropped and i in known]
            return self.processor(side).decode_pieces(pieces).replace(WORD_START, " ").strip()
        processor = self.processor(side)
        dropped = {special["pad_id"], special["bos_id"], special["eos_id"]}
        return processor.decode([i for i in ids if i not in dropped and 0 <= i < processor.get_piece_size()])

    def pieces(self, ids: Iterable[int], side: str = "source") -> list[str]:
        """Piece strings of ids; special tokens appear as <pad>, <s>, </s>, <unk>."""
        if self.vocab is not None:
            known = self._pieces[side]
            return [known.get(i, "<unk>") for i in ids]
        processor = self.processor(side)
        return [processor.id_to_piece(i) for i in ids]

    def special_ids(self, side: str = "target") -> SpecialIds:
        """pad, unk, bos and eos ids (bos None when the vocabulary has no <s>, as in MarianMT)."""
        if self.vocab is not None:
            vocab = self.side_vocab(side)
            return {
                "pad_id": vocab["<pad>"],
                "unk_id": vocab["<unk>"],
                "bos_id": vocab.get("<s>"),
                "eos_id": vocab["</s>"],
            }
        processor = self.processor(side)
        return {
            "pad_id": processor.pad_id(),
            "unk_id": processor.unk_id(),
            "bos_id": processor.bos_id(),
            "eos_id": processor.eos_id(),
        }

    def save(self, folder: Path) -> list[str]:
        """Write tokenizer.model (joint), source.model + target.model, or Marian's three files (four with a target
        vocabulary of its own); return the names."""
        folder = Path(folder)
        if self.vocab is not None:
            (folder / "source.spm").write_bytes(self.source.serialized_model_proto())
            (folder / "target.spm").write_bytes(self.target.serialized_model_proto())
            tables: dict[str, Any] = {"vocab.json": self.vocab, MARIAN_TARGET_VOCAB: self.target_vocab}
            if self.languages is not None:
                tables[LANGUAGES_FILE] = {"source_code": self.languages.source_code, "pieces": self.languages.pieces}
            for name, table in tables.items():
                if table is not None:
                    text = json.dumps(table, indent=2, ensure_ascii=False) + "\n"
                    (folder / name).write_text(text, encoding="utf-8")
            return self.files
        if self.joint:
            (folder / "tokenizer.model").write_bytes(self.source.serialized_model_proto())
            return ["tokenizer.model"]
        (folder / "source.model").write_bytes(self.source.serialized_model_proto())
        (folder / "target.model").write_bytes(self.target.serialized_model_proto())
        return ["source.model", "target.model"]

    @classmethod
    def load(cls, folder: Path) -> Tokenizer:
        folder = Path(folder)
        if (folder / "vocab.json").exists():
            return cls.load_marian(folder)
        if (folder / "tokenizer.model").exists():
            joint = load_sentencepiece(folder / "tokenizer.model")
            return cls(joint, joint)
        missing = [name for name in ("source.model", "target.model") if not (folder / name).exists()]
        if missing:
            raise FileNotFoundError(f"{folder}: no tokenizer.model and missing {', '.join(missing)}")
        return cls(load_sentencepiece(folder / "source.model"), load_sentencepiece(folder / "target.model"))

    @classmethod
    def load_marian(cls, folder: Path) -> Tokenizer:
        """source.spm + target.spm + vocab.json (+ target_vocab.json when the target side has a vocabulary of its
        own), as MarianTokenizer.save_pretrained writes them."""
        folder = Path(folder)
        missing = [name for name in MARIAN_FILES if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{folder}: Marian tokenizer files missing: {', '.join(missing)}")
        vocab = read_vocab(folder / "vocab.json")
        target_vocab = read_vocab(folder / MARIAN_TARGET_VOCAB) if (folder / MARIAN_TARGET_VOCAB).is_file() else None
        source, target = load_sentencepiece(folder / "source.spm"), load_sentencepiece(folder / "target.spm")
        languages = Languages.read(folder / LANGUAGES_FILE) if (folder / LANGUAGES_FILE).is_file() else None
        try:
            return cls(source, target, vocab, target_vocab, languages)
        except VocabularyError as error:
            raise ValueError(f"{folder / error.file}: {error}") from error

    @classmethod
    def from_model_bytes(cls, source: bytes, target: bytes | None = None) -> Tokenizer:
        source_processor = spm.SentencePieceProcessor(model_proto=source)
        if target is None:
            return cls(source_processor, source_processor)
        return cls(source_processor, spm.SentencePieceProcessor(model_proto=target))


def clean_text(text: str) -> str:
    """Make any user string safe for SentencePiece: lone surrogates and control characters become spaces."""
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    return "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)


def read_vocab(path: Path) -> dict[str, int]:
    """A Marian vocabulary file: a JSON object mapping piece strings to integer ids."""
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(vocab, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in vocab.items()
    ):
        raise ValueError(f"{path}: expected an object mapping piece strings to integer ids")
    return vocab


def starts_with_language_code(text: str) -> bool:
    """Whether ``text`` (leading spaces aside) begins with a ``>>xx<<`` target-language code."""
    return bool(split_language_code(text.lstrip())[0])


def with_language_code(text: str, code: str | None) -> str:
    """``text`` led by the target-language code ``>>code<<`` (as a multi-target MarianMT model reads it), unless
    ``code`` is None or the text already starts with a code."""
    if code is None or starts_with_language_code(text):
        return text
    return f">>{code}<< {text}"


def split_language_code(text: str) -> tuple[list[str], str]:
    """A leading ``>>xx<<`` target-language code as one piece, and the rest (MarianTokenizer's rule)."""
    end = text.find("<<") if text.startswith(">>") else -1
    if end == -1:
        return [], text
    return [text[: end + 2]], text[end + 2 :]


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
