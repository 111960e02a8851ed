"""model/tokenizer.py on its own: train_sentencepiece's options, joint / separate / Marian tokenizers saved and
loaded under their file names, the errors that name the bad file, encoding with sampling, decoding without the
special tokens, and the piece helpers (split_language_code, word_index). All fast: tokenizers trained here on a
few hundred toy sentences in milliseconds."""

from __future__ import annotations

import io
import re
import shutil

import pytest
import sentencepiece as spm

from model.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    WORD_START,
    Tokenizer,
    split_language_code,
    train_sentencepiece,
    word_index,
)
from tests.helpers import toy_sentences
from tests.marian_helpers import german, write_tokenizer_files

ENGLISH = toy_sentences(400)
GERMAN_TEXT = "der Mann reitet ein Mädchen"


@pytest.fixture(scope="module")
def model_bytes() -> tuple[bytes, bytes]:
    """An English and a German SentencePiece model (different pieces, so a swapped side shows)."""
    return train_sentencepiece(ENGLISH, 80), train_sentencepiece([german(s) for s in ENGLISH], 90)


@pytest.fixture(scope="module")
def separate(model_bytes) -> Tokenizer:
    return Tokenizer.from_model_bytes(*model_bytes)


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian")
    return folder, write_tokenizer_files(folder)


@pytest.fixture
def marian_copy(marian_folder, tmp_path):
    """A copy of the Marian files that a test may break."""
    folder, vocab = marian_folder
    for name in ("source.spm", "target.spm", "vocab.json"):
        shutil.copy(folder / name, tmp_path / name)
    return tmp_path, vocab


# --- train_sentencepiece ---


def test_training_fixes_the_special_ids_and_reaches_the_vocab_size():
    processor = Tokenizer.from_model_bytes(train_sentencepiece(ENGLISH, 60)).source
    assert processor.get_piece_size() == 60
    assert [processor.id_to_piece(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)] == ["<pad>", "<unk>", "<s>", "</s>"]
    # a vocab_size the corpus cannot reach gives a smaller vocabulary, not an error
    assert 60 < Tokenizer.from_model_bytes(train_sentencepiece(ENGLISH, 8000)).vocab_size("source") < 8000


@pytest.mark.parametrize(
    "model_type, pieces",
    [
        ("char", ["▁", "a", "▁", "m", "a", "n", "."]),
        ("word", ["▁a", "▁man."]),
        ("bpe", ["▁a", "▁man", "."]),
    ],
)
def test_model_type_decides_how_text_is_cut(model_type, pieces):
    tokenizer = Tokenizer.from_model_bytes(train_sentencepiece(ENGLISH, 80, model_type))
    assert tokenizer.source.encode("a man.", out_type=str) == pieces


def test_a_character_seen_once_keeps_its_own_piece_unless_coverage_is_lowered():
    rare = "ß"  # once in about 12,000 characters: dropped by SentencePiece's default coverage of 0.9995
    sentences = [*ENGLISH, f"the {rare} dog."]
    full = Tokenizer.from_model_bytes(train_sentencepiece(sentences, 80)).source
    assert full.piece_to_id(rare) != UNK_ID
    assert full.decode(full.encode(f"a {rare}")) == f"a {rare}"
    lowered = Tokenizer.from_model_bytes(train_sentencepiece(sentences, 80, character_coverage=0.99)).source
    assert lowered.piece_to_id(rare) == UNK_ID


def test_max_sentences_trains_on_a_random_sample_of_that_many():
    # each sentence brings one character of its own: the known characters show which sentences were read
    characters = [chr(0x4E00 + i) for i in range(300)]
    sentences = [f"ab {character}" for character in characters]

    def known(**options) -> list[int]:
        processor = Tokenizer.from_model_bytes(train_sentencepiece(sentences, 400, **options)).source
        return [i for i, character in enumerate(characters) if processor.piece_to_id(character) != UNK_ID]

    assert len(known()) == 300
    sample = known(max_sentences=101)
    assert len(sample) == 101
    assert sample != list(range(101))  # shuffled: not just the corpus's first sentences


def test_nmt_nfkc_normalizes_text_and_identity_keeps_it():
    text = "ﬁne Ｂ"  # a ligature and a full-width letter, which NFKC rewrites as "fi" and "B"
    sentences = [*ENGLISH, text]
    nfkc = Tokenizer.from_model_bytes(train_sentencepiece(sentences, 80))
    identity = Tokenizer.from_model_bytes(train_sentencepiece(sentences, 80, normalization="identity"))
    assert nfkc.decode(nfkc.encode(text), "source") == "fine B"
    assert identity.decode(identity.encode(text), "source") == text


def test_training_is_silent(capfd):
    train_sentencepiece(ENGLISH[:200], 60)
    assert capfd.readouterr() == ("", "")


# --- encode, decode, pieces ---


@pytest.mark.parametrize("kind", ["joint", "marian"])
def test_sampling_draws_other_segmentations_and_zero_is_deterministic(kind, toy_tokenizer, marian_folder):
    tokenizer = toy_tokenizer if kind == "joint" else Tokenizer.load(marian_folder[0])
    text = ">>de<< two young women walks in the green street." if kind == "marian" else "two young women walks."
    best = tokenizer.encode(text)
    assert all(tokenizer.encode(text, sampling=0.0) == best for _ in range(5))
    draws = {tuple(tokenizer.encode(text, sampling=0.5)) for _ in range(30)}
    assert len(draws) > 1 and draws != {tuple(best)}


def test_an_unknown_side_is_refused_naming_it(toy_tokenizer):
    with pytest.raises(ValueError, match=re.escape("side must be 'source' or 'target', not 'src'")):
        toy_tokenizer.encode("a man", side="src")


def test_decode_drops_pad_bos_eos_and_ids_outside_the_vocabulary(toy_tokenizer):
    ids = toy_tokenizer.encode("a man rides a bike.")
    size = toy_tokenizer.vocab_size("target")
    assert toy_tokenizer.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID, -1, size, 10**6]) == "a man rides a bike."


def test_decode_keeps_unk_of_a_model_trained_elsewhere():
    """SentencePiece's own defaults put <unk> at id 0 and no <pad>: id 0 must show as ⁇, not vanish."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(ENGLISH), model_writer=buffer, vocab_size=50, minloglevel=2)
    tokenizer = Tokenizer.from_model_bytes(buffer.getvalue())
    assert tokenizer.special_ids() == {"pad_id": -1, "unk_id": 0, "bos_id": 1, "eos_id": 2}
    assert tokenizer.decode([1, 0, *tokenizer.encode("a man"), 2]) == " ⁇  a man"


def test_marian_decode_turns_word_starts_of_the_other_side_into_spaces(marian_folder):
    """vocab.json is joint: a source piece decoded on the target side is unknown to target.spm, and
    SentencePiece leaves its "▁" in place."""
    tokenizer = Tokenizer.load(marian_folder[0])
    vocab = tokenizer.vocab
    assert tokenizer.target.piece_to_id(f"{WORD_START}rides") == tokenizer.target.unk_id()
    ids = [vocab[">>de<<"], vocab[f"{WORD_START}man"], vocab[f"{WORD_START}rides"], vocab["</s>"]]
    assert tokenizer.decode(ids) == ">>de<< man rides"


def test_marian_pieces_name_ids_outside_the_vocabulary_unk(marian_folder):
    folder, vocab = marian_folder
    tokenizer = Tokenizer.load(folder)
    assert tokenizer.pieces([vocab["</s>"], len(vocab), 10**6]) == ["</s>", "<unk>", "<unk>"]


def test_special_ids_of_separate_and_marian_tokenizers(separate, marian_copy):
    expected = {"pad_id": PAD_ID, "unk_id": UNK_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}
    assert separate.special_ids("source") == separate.special_ids("target") == expected
    folder, vocab = marian_copy
    with_bos = {**vocab, "<s>": len(vocab)}
    tokenizer = Tokenizer(Tokenizer.load(folder).source, Tokenizer.load(folder).target, with_bos)
    assert tokenizer.special_ids() == {"pad_id": vocab["<pad>"], "unk_id": 1, "bos_id": len(vocab), "eos_id": 0}


# --- save and load ---


def test_joint_tokenizer_saves_as_one_file_and_loads_joint(toy_tokenizer, tmp_path):
    assert toy_tokenizer.save(tmp_path) == toy_tokenizer.files == ["tokenizer.model"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tokenizer.model"]
    loaded = Tokenizer.load(tmp_path)
    assert loaded.joint and not loaded.marian
    assert loaded.encode("a man rides.") == toy_tokenizer.encode("a man rides.")


def test_separate_tokenizers_save_as_two_files_and_load_each_on_its_side(separate, model_bytes, tmp_path):
    english, german_only = (Tokenizer.from_model_bytes(data) for data in model_bytes)
    assert not separate.joint
    assert separate.encode(GERMAN_TEXT, "target") == german_only.encode(GERMAN_TEXT)
    assert separate.encode(GERMAN_TEXT, "source") == english.encode(GERMAN_TEXT)
    assert english.encode(GERMAN_TEXT) != german_only.encode(GERMAN_TEXT)  # so a swapped side would show

    assert separate.save(tmp_path) == separate.files == ["source.model", "target.model"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["source.model", "target.model"]
    loaded = Tokenizer.load(tmp_path)
    assert not loaded.joint and not loaded.marian
    for side in ("source", "target"):
        assert loaded.encode(GERMAN_TEXT, side) == separate.encode(GERMAN_TEXT, side)
        assert loaded.vocab_size(side) == separate.vocab_size(side)


@pytest.mark.parametrize(
    "present, missing",
    [(["source.model"], "target.model"), (["target.model"], "source.model"), ([], "source.model, target.model")],
)
def test_load_names_the_missing_model_files(separate, tmp_path, present, missing):
    separate.save(tmp_path)
    for name in {"source.model", "target.model"} - set(present):
        (tmp_path / name).unlink()
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"{tmp_path}: no tokenizer.model and missing {missing}") + "$"
    ):
        Tokenizer.load(tmp_path)


def test_marian_vocab_is_saved_readable_one_piece_a_line(marian_folder, tmp_path):
    tokenizer = Tokenizer.load(marian_folder[0])
    tokenizer.save(tmp_path)
    text = (tmp_path / "vocab.json").read_bytes().decode("utf-8")
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and text.endswith("}\n")
    assert len(lines) == len(tokenizer.vocab) + 2
    assert all(re.fullmatch(r'  "[^ ].*": \d+,?', line) for line in lines[1:-1])
    assert f'"{WORD_START}man"' in text and '"ä"' in text and "\\u" not in text  # UTF-8, not \u escapes
    assert Tokenizer.load(tmp_path).vocab == tokenizer.vocab


def test_load_marian_names_the_missing_files(marian_copy):
    folder, _ = marian_copy
    (folder / "source.spm").unlink()
    (folder / "target.spm").unlink()
    message = f"{folder}: Marian tokenizer files missing: source.spm, target.spm"
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        Tokenizer.load(folder)


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"</s>": 0,', "not valid JSON"),
        ('["</s>", "<unk>", "<pad>"]', "expected an object mapping piece strings to integer ids"),
        ('{"</s>": 0, "<unk>": "1", "<pad>": 2}', "expected an object mapping piece strings to integer ids"),
        ('{"</s>": 0, "<unk>": true, "<pad>": 2}', "expected an object mapping piece strings to integer ids"),
        ('{"</s>": 0, "<unk>": 1}', "vocab.json lacks <pad>"),
        ('{"</s>": 0, "<unk>": 1, "<pad>": 3}', "vocab.json ids must be 0..N-1, each used once"),
    ],
)
def test_a_bad_vocab_json_is_refused_naming_it(marian_copy, content, message):
    folder, _ = marian_copy
    (folder / "vocab.json").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{folder / 'vocab.json'}: {message}")):
        Tokenizer.load(folder)


@pytest.mark.parametrize(
    "vocab, message",
    [
        ({"</s>": 0, "<pad>": 1}, "vocab.json lacks <unk>"),
        ({"</s>": 0}, "vocab.json lacks <unk>, <pad>"),
        ({"</s>": 0, "<unk>": 1, "<pad>": 1, "a": 2}, "vocab.json ids must be 0..N-1, each used once"),
    ],
)
def test_a_vocab_without_the_specials_or_with_gaps_is_refused(toy_tokenizer, vocab, message):
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        Tokenizer(toy_tokenizer.source, toy_tokenizer.target, vocab)


# --- piece helpers ---


@pytest.mark.parametrize(
    "text, expected",
    [
        (">>de<< the dog", ([">>de<<"], " the dog")),
        (">>de<<the", ([">>de<<"], "the")),
        (">>de<< a << b", ([">>de<<"], " a << b")),
        ("a << b", ([], "a << b")),
        (">>de the dog", ([], ">>de the dog")),
    ],
)
def test_split_language_code(text, expected):
    assert split_language_code(text) == expected


@pytest.mark.parametrize(
    "pieces, expected",
    [
        (["ab", f"{WORD_START}c"], [0, 1]),  # the first piece starts a word even without "▁"
        (["<s>", "ab", "c", f"{WORD_START}d", "</s>"], [0, 1, 1, 2, 3]),  # so does a piece after a special one
        (["<pad>", "x", "<pad>", "y"], [0, 1, 2, 3]),
    ],
)
def test_word_index(pieces, expected):
    assert word_index(pieces) == expected


def test_a_language_code_leads_the_sentence_once():
    from model.tokenizer import with_language_code

    assert with_language_code("the dog.", "fr") == ">>fr<< the dog."
    assert with_language_code("the dog.", None) == "the dog."
    assert with_language_code(">>es<< the dog.", "fr") == ">>es<< the dog."  # the sentence's own code wins
    assert with_language_code("  >>es<< the dog.", "fr") == "  >>es<< the dog."


def test_language_codes_are_the_vocabularys_code_pieces_in_order(tmp_path):
    from tests.marian_helpers import write_tokenizer_files

    write_tokenizer_files(tmp_path)
    assert Tokenizer.load_marian(tmp_path).language_codes() == ["de", "fr"]
    joint = Tokenizer.from_model_bytes((tmp_path / "source.spm").read_bytes())
    assert joint.language_codes() == []  # a model trained here reads no codes
