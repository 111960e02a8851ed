"""TransformerConfig: every hyper-parameter needed to rebuild a model, saved inside checkpoints."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

ACTIVATIONS = ("relu", "gelu", "swish")
# where the sines and cosines sit: interleaved (the paper), all sines then all cosines (MarianMT), or sines then
# cosines with fairseq's frequencies exp(-i ln 10000 / (d/2 - 1)) (M2M100 and NLLB; the paper's are 10000^(-2i/d))
POSITIONAL_LAYOUTS = ("interleaved", "marian", "fairseq")
# What each stack adds to its embeddings: the paper's fixed sinusoids, nothing (the model then sees a bag of tokens:
# the exercise of the Train view), or a learned vector per position (Gehring et al. 2017; section 3.5 compares them).
POSITIONAL_ENCODINGS = ("sinusoidal", "none", "learned")
# Options written to config.json only when they differ from their default, so older configs match.
OPTIONAL_FIELDS = (
    "positional_encoding",
    "positional_layout",
    "scale_embedding",
    "final_logits_bias",
    "decoder_start_id",
    "source_pad_id",
    "attention_dropout",
    "activation_dropout",
    "position_offset",
    "positions_skip_padding",
    "embedding_norm",
)


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of the encoder-decoder Transformer (Vaswani et al. 2017, section 3).

    Token ids for padding, start and end follow the tokenizer: the defaults match the
    SentencePiece models trained by ``model.tokenizer.train_sentencepiece``. The options after
    ``eos_id`` describe imported models (MarianMT, mBART-50, M2M100 and NLLB: ``model.interop``); their defaults
    are the paper's behaviour, so a config.json without them builds the same model; so are those of the
    attention and activation dropout (training options).
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    activation: str = "relu"  # "relu" (the paper), "gelu" or "swish" (SiLU, MarianMT)
    norm_first: bool = False  # False: post-norm as in the paper; True: pre-norm
    final_norm: bool = False  # LayerNorm after each stack (torch.nn.Transformer has one)
    layer_norm_eps: float = 1e-5
    max_len: int = 256  # longest sequence the positional encoding covers
    share_embeddings: bool = False  # one embedding for source and target (joint vocabulary)
    tie_output: bool = False  # output projection reuses the target embedding (section 3.4)
    output_bias: bool = True
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int | None = 2  # None: the vocabulary has no <s> (MarianMT); decoder_start_id then starts decoding
    eos_id: int = 3
    positional_encoding: str = "sinusoidal"  # "sinusoidal" (3.5), "none" or "learned"
    positional_layout: str = "interleaved"  # sin/cos in even/odd dims (the paper), or "marian": sines then cosines
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model) (section 3.4)
    final_logits_bias: bool = False  # a fixed (1, V) buffer added to the logits (MarianMT's final_logits_bias)
    decoder_start_id: int | None = None  # first decoder input; None: bos_id. May equal pad_id: it is never masked
    # the id that pads sources and marks the source keys attention hides. Given only when the source vocabulary is not
    # the target's (a MarianMT model with separate vocabularies puts <pad> last in each, so two sizes give two pad
    # ids). Left out (None), __post_init__ makes it pad_id, so it is always an int to read; config.json leaves it out
    # then, as older configs do
    source_pad_id: int = None  # type: ignore[assignment]  # None is only "not given": never read as None
    # dropout on the attention probabilities and inside the feed-forward network (after its activation); None:
    # ``dropout`` (also what a config.json without them means). fairseq's transformer recipes set both to 0.
    attention_dropout: float | None = None
    activation_dropout: float | None = None
    # the positional table's row of position 0: mBART's learned table starts at row 2, M2M100's and NLLB's sinusoids
    # at padding id + 1 (both from fairseq, which keeps the rows below for padding)
    position_offset: int = 0
    # padding gets no position (a zero vector), as M2M100 and NLLB number real tokens only; with padding at the end,
    # as the tokenizers pad, every real token reads the position it reads alone
    positions_skip_padding: bool = False
    # a LayerNorm on the embedding sum (tokens plus positions) before the first layer: mBART's layernorm_embedding
    embedding_norm: bool = False

    def __post_init__(self) -> None:
        if self.source_pad_id is None:
            object.__setattr__(self, "source_pad_id", self.pad_id)
        problems = [
            *self._architecture_problems(),
            *self._vocabulary_problems(),
            *self._range_problems(),
            *self._special_id_problems(),
        ]
        if problems:
            raise ValueError("invalid TransformerConfig: " + "; ".join(problems))

    def _architecture_problems(self) -> list[str]:
        """Heads that do not divide d_model, and options outside their choices."""
        problems = []
        if self.d_model % self.n_heads:
            problems.append(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        for name, choices in (
            ("activation", ACTIVATIONS),
            ("positional_encoding", POSITIONAL_ENCODINGS),
            ("positional_layout", POSITIONAL_LAYOUTS),
        ):
            value = getattr(self, name)
            if value not in choices:
                problems.append(f"{name} must be one of {', '.join(choices)}, not {value!r}")
        return problems

    def _vocabulary_problems(self) -> list[str]:
        """A shared embedding over two vocabularies, and a source pad outside the source vocabulary."""
        problems = []
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            problems.append("share_embeddings needs src_vocab_size == tgt_vocab_size")
        if self.share_embeddings and self.source_pad_id != self.pad_id:
            problems.append("share_embeddings needs source_pad_id == pad_id (one vocabulary)")
        if not 0 <= self.source_pad_id < self.src_vocab_size:
            problems.append(f"source_pad_id={self.source_pad_id} is outside the source vocabulary")
        return problems

    def _range_problems(self) -> list[str]:
        """Sizes that are not positive, dropout probabilities outside [0, 1)."""
        problems = []
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive")
        if self.position_offset < 0:
            problems.append("position_offset must be 0 or more")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                problems.append(f"{name} must be in [0, 1)")
        return problems

    def _special_id_problems(self) -> list[str]:
        """No token to start decoding with, and special ids outside either vocabulary."""
        problems = []
        if self.bos_id is None and self.decoder_start_id is None:
            problems.append("bos_id=None needs a decoder_start_id")
        special = {
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "decoder_start_id": self.decoder_start_id,
        }
        for name, value in special.items():
            if value is not None and not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                problems.append(f"{name}={value} is outside the vocabulary")
        return problems

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def attention_dropout_p(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def activation_dropout_p(self) -> float:
        return self.dropout if self.activation_dropout is None else self.activation_dropout

    @property
    def start_id(self) -> int:
        """The token every decoder input begins with: decoder_start_id, else bos_id."""
        start = self.decoder_start_id if self.decoder_start_id is not None else self.bos_id
        assert start is not None, "__post_init__ refuses bos_id=None without a decoder_start_id"
        return start

    @property
    def max_sequence_tokens(self) -> int:
        """Tokens one sequence may hold besides its BOS or EOS, which takes the last position."""
        return self.max_len - 1

    @property
    def never_generated(self) -> list[int]:
        """Ids the decoder may not produce: padding and the start token (the same id for MarianMT), unless the start
        token is EOS (mBART, M2M100 and NLLB start decoding from </s>, which must still end it)."""
        return sorted({self.pad_id, self.start_id} - {self.eos_id})

    def to_dict(self) -> dict[str, Any]:
        """Every field, except the imported-model options left at their default (older configs match)."""
        data = dataclasses.asdict(self)
        defaults = {f.name: f.default for f in dataclasses.fields(self)} | {"source_pad_id": self.pad_id}
        return {k: v for k, v in data.items() if k not in OPTIONAL_FIELDS or v != defaults[k]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransformerConfig:
        """Build from a dict (e.g. config.json); unknown or missing keys raise a clear error. ``src_pad_id`` is the
        name configs written before it was renamed give ``source_pad_id``."""
        if "src_pad_id" in data:
            data = {("source_pad_id" if key == "src_pad_id" else key): value for key, value in data.items()}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as error:
            raise ValueError(f"incomplete config: {error}") from error
