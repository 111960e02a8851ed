"""MarianMT (OPUS-MT) models with separate source and target vocabularies, as the tc-big models have them: imported,
they must compute what Hugging Face computes.

The marian_separate fixture (tests/conftest.py) builds a tiny random MarianMTModel with
``share_encoder_decoder_embeddings=False``, a vocab.json and a smaller target_vocab.json (so the two <pad> ids, each
last, differ) and a MarianTokenizer with ``separate_vocabs=True``, and imports it with ``python -m
model.import_marian``. Without transformers these tests skip with the reason, except in CI (CI=true), where they fail;
the tokenizer and config tests at the end need no transformers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from model import capture_attention, load_checkpoint
from model.checkpoint import CheckpointError, read_card, save_checkpoint
from model.config import TransformerConfig
from model.interop.huggingface import import_hf
from model.tokenizer import Tokenizer
from model.training.data import encode_examples
from model.training.validation import validation_loss
from tests.helpers import small_config, toy_sentences
from tests.marian_helpers import (
    assert_attention_equal,
    assert_validation_loss_is_per_sentence,
    german,
    logits_of_both,
    write_separate_tokenizer_files,
)

SENTENCES = ["a man rides a blue bike.", "two young dogs play in the snow.", ">>de<< the cat sits.", "Zürich ✓ park"]


def hugging_face_special_ids(hf_model) -> tuple[int, int]:
    """(pad, start) of the Hugging Face model: the target's <pad> both."""
    return hf_model.config.pad_token_id, hf_model.config.decoder_start_token_id


# --- the tokenizer ---


def test_source_and_target_ids_equal_marian_tokenizers(marian_separate):
    _, hf_tokenizer, _, out = marian_separate
    translator = load_checkpoint(out, device="cpu")
    tokenizer, eos = translator.tokenizer, translator.config.eos_id
    for text in SENTENCES:
        assert translator.source_ids(text).ids == hf_tokenizer(text).input_ids, text
        target = german(text)
        expected = hf_tokenizer(text_target=target).input_ids
        assert tokenizer.encode(target, "target") + [eos] == expected, target
        # the source side cuts and numbers the same text otherwise, so a side swapped anywhere would show
        assert tokenizer.encode(target, "source") + [eos] != expected
    assert hf_tokenizer(">>de<< a dog").input_ids[0] == tokenizer.vocab[">>de<<"]
    assert tokenizer.language_codes() == ["de", "fr"]  # source pieces: the code goes in front of the sentence


def test_target_ids_decode_and_name_their_pieces_as_marian_tokenizer_does(marian_separate):
    _, hf_tokenizer, _, out = marian_separate
    tokenizer = Tokenizer.load(out)
    unk, pad = tokenizer.target_vocab["<unk>"], tokenizer.target_vocab["<pad>"]
    for text in SENTENCES[:2]:
        ids = hf_tokenizer(text_target=german(text)).input_ids  # pieces, then </s>
        ids = [*ids[:2], unk, *ids[2:]]
        assert tokenizer.decode(ids) == hf_tokenizer.decode(ids, skip_special_tokens=True)
        assert tokenizer.pieces(ids, "target") == hf_tokenizer.convert_ids_to_tokens(ids)
        # the target's own <pad> (decoding's start token) is dropped too; MarianTokenizer keeps it as text, since
        # with separate vocabularies it skips the source's special ids
        assert tokenizer.decode([pad, *ids]) == tokenizer.decode(ids)
    source, target = tokenizer.special_ids("source"), tokenizer.special_ids("target")
    assert source["pad_id"] == len(tokenizer.vocab) - 1 != target["pad_id"] == len(tokenizer.target_vocab) - 1
    assert (source["eos_id"], source["unk_id"]) == (target["eos_id"], target["unk_id"]) == (0, 1)


# --- the model ---


def test_a_batch_padded_on_the_source_side_equals_hugging_faces(marian_separate):
    """Two sources of different lengths, padded with the source's <pad> as MarianTokenizer pads them: the padded keys
    are hidden as Hugging Face's attention_mask hides them (the target's <pad> is an ordinary source piece)."""
    hf_model, hf_tokenizer, _, out = marian_separate
    model = load_checkpoint(out, device="cpu").model
    pad, start = hugging_face_special_ids(hf_model)
    batch = hf_tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)
    source_pad = hf_tokenizer.vocab_size - 1
    assert (batch.input_ids == source_pad).any() and source_pad != pad
    target = hf_tokenizer(text_target=german(SENTENCES[1])).input_ids
    tgt = torch.tensor([[start, *target[:-1]]] * 2)
    with torch.no_grad():
        expected = hf_model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            decoder_input_ids=tgt,
            output_attentions=True,
        )
    with torch.inference_mode(), capture_attention(model) as capture:
        logits = model(batch.input_ids, tgt)
    torch.testing.assert_close(logits, expected.logits, atol=1e-4, rtol=0)
    assert_attention_equal(capture, expected)


def test_a_batch_of_sources_translates_as_hugging_faces_batched_generate(marian_separate):
    """The translator pads a batch's sources with the source's <pad>: each translation is Hugging Face's for the
    same padded batch (and its own alone)."""
    hf_model, hf_tokenizer, _, out = marian_separate
    translator = load_checkpoint(out, device="cpu")
    pad, _ = hugging_face_special_ids(hf_model)
    # much padding: the short sentence's translation changes when its padding is not hidden
    texts = ["a dog.", "two young dogs play in the snow while a man rides a blue bike and the cat sits on the wall."]
    batch = hf_tokenizer(texts, return_tensors="pt", padding=True)
    assert int(batch.attention_mask.sum(dim=1).min()) < batch.input_ids.size(1) // 3
    with torch.no_grad():
        generated = hf_model.generate(
            **batch, num_beams=1, do_sample=False, max_new_tokens=20, bad_words_ids=[[pad]], forced_eos_token_id=None
        ).tolist()
    expected = [hf_tokenizer.decode([t for t in row[1:] if t != pad], skip_special_tokens=True) for row in generated]
    assert translator.translate_batch(texts, beam_size=1, max_new_tokens=20) == expected
    assert [translator.translate(text, beam_size=1, max_new_tokens=20) for text in texts] == expected


# --- the checkpoint folder ---


def test_config_and_card_record_the_two_vocabularies(marian_separate):
    _, _, source, out = marian_separate
    vocab, target_vocab = (
        json.loads((source / name).read_text("utf-8")) for name in ("vocab.json", "target_vocab.json")
    )
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["share_embeddings"] is False and config["tie_output"] is False
    assert (config["src_vocab_size"], config["tgt_vocab_size"]) == (len(vocab), len(target_vocab))
    assert (config["source_pad_id"], config["pad_id"]) == (vocab["<pad>"], target_vocab["<pad>"])
    assert config["decoder_start_id"] == target_vocab["<pad>"] and config["bos_id"] is None
    conversion = read_card(out).extra["conversion"]
    assert conversion["vocabularies"] == (
        f"separate: vocab.json (source, {len(vocab)} pieces), target_vocab.json (target, {len(target_vocab)} pieces)"
    )
    assert conversion["output_projection"] == "lm_head.weight, its own matrix"
    assert sorted(p.name for p in out.iterdir()) == [
        "card.json",
        "config.json",
        "model.safetensors",
        "source.spm",
        "target.spm",
        "target_vocab.json",
        "vocab.json",
    ]
    model = load_checkpoint(out, "cpu").model
    assert model.encoder.embed.embedding.weight.shape[0] == len(vocab)
    assert model.decoder.embed.embedding.weight.shape[0] == model.final_logits_bias.shape[1] == len(target_vocab)


def test_a_saved_checkpoint_loads_back_the_same(marian_separate, tmp_path):
    _, hf_tokenizer, _, out = marian_separate
    imported = load_checkpoint(out, "cpu")
    again = load_checkpoint(save_checkpoint(tmp_path / "again", imported.model, imported.tokenizer, imported.card))
    assert (tmp_path / "again" / "target_vocab.json").is_file()
    assert again.config == imported.config
    assert (again.tokenizer.vocab, again.tokenizer.target_vocab) == (
        imported.tokenizer.vocab,
        imported.tokenizer.target_vocab,
    )
    src = torch.tensor([hf_tokenizer(SENTENCES[0]).input_ids])
    tgt = torch.tensor([[imported.config.start_id, 5, 6]])
    with torch.inference_mode():
        assert torch.equal(again.model(src, tgt), imported.model(src, tgt))


def test_a_checkpoint_whose_config_and_vocabularies_disagree_is_refused(marian_separate, tmp_path):
    folder = shutil.copytree(marian_separate[3], tmp_path / "checkpoint")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    source_pad = config["source_pad_id"]
    (folder / "config.json").write_text(json.dumps({**config, "source_pad_id": 5}), encoding="utf-8")
    with pytest.raises(
        CheckpointError, match=rf"config\.json: source_pad_id=5 but the source tokenizer uses {source_pad}"
    ):
        load_checkpoint(folder, "cpu")
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "target_vocab.json").unlink()  # the targets would be read with the source's vocabulary
    with pytest.raises(CheckpointError, match=r"target vocabulary has \d+ pieces but config\.json says"):
        load_checkpoint(folder, "cpu")


# --- what the importer refuses ---


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), **changes}), encoding="utf-8")


def swap_pieces(path: Path, first: str, second: str) -> None:
    vocab = json.loads(path.read_text(encoding="utf-8"))
    vocab[first], vocab[second] = vocab[second], vocab[first]
    path.write_text(json.dumps(vocab), encoding="utf-8")


def rename_piece(path: Path, piece: str, new_name: str) -> None:
    vocab = json.loads(path.read_text(encoding="utf-8"))
    vocab[new_name] = vocab.pop(piece)
    path.write_text(json.dumps(vocab), encoding="utf-8")


def drop_output_projection(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


BAD_FOLDERS = {
    "config shares one embedding": (
        lambda folder: edit_json(folder / "config.json", share_encoder_decoder_embeddings=True),
        r"config\.json: share_encoder_decoder_embeddings is true .* but the folder has a target_vocab\.json",
    ),
    "decoder_vocab_size off": (
        lambda folder: edit_json(folder / "config.json", decoder_vocab_size=62),
        r"target_vocab\.json: \d+ pieces but config\.json says decoder_vocab_size 62",
    ),
    "vocab_size off": (
        lambda folder: edit_json(folder / "config.json", vocab_size=200),
        r"vocab\.json: \d+ pieces but config\.json says vocab_size 200",
    ),
    "pad_token_id is the source's": (
        lambda folder: edit_json(folder / "config.json", pad_token_id=0),
        r"pad_token_id=0 but target_vocab\.json gives \d+",
    ),
    "tokenizer_config without separate_vocabs": (
        lambda folder: edit_json(folder / "tokenizer_config.json", separate_vocabs=False),
        r"tokenizer_config\.json: separate_vocabs is false but there is a target_vocab\.json",
    ),
    "no target_vocab.json": (
        lambda folder: (folder / "target_vocab.json").unlink(),
        r"tokenizer_config\.json: separate_vocabs is true but there is no target_vocab\.json",
    ),
    "another <unk> on the source side": (
        lambda folder: swap_pieces(folder / "vocab.json", "<unk>", ">>de<<"),
        r"vocab\.json: <unk> is \d+ but 1 in target_vocab\.json; this importer needs one <unk> id for both sides",
    ),
    "a target_vocab.json without <pad>": (
        lambda folder: rename_piece(folder / "target_vocab.json", "<pad>", "<padding>"),
        r"target_vocab\.json: target_vocab\.json lacks <pad>",
    ),
    "no lm_head.weight": (
        drop_output_projection,
        r"model\.safetensors: no lm_head\.weight, but share_encoder_decoder_embeddings is false",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_a_folder_whose_vocabularies_and_config_disagree_is_refused_naming_the_file(marian_separate, tmp_path, case):
    change, message = BAD_FOLDERS[case]
    folder = shutil.copytree(marian_separate[2], tmp_path / "source")
    change(folder)
    with pytest.raises(CheckpointError, match=message):
        import_hf(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- other layouts transformers reads ---


def test_an_output_projection_equal_to_the_decoders_embedding_is_tied_to_it(marian_separate, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(marian_separate[2], tmp_path / "source")
    tensors = load_file(folder / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.decoder.embed_tokens.weight"].clone()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    expected, logits = logits_of_both(folder, tmp_path / "out", SENTENCES[0])
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)
    assert load_checkpoint(tmp_path / "out", "cpu").config.tie_output
    conversion = read_card(tmp_path / "out").extra["conversion"]
    assert conversion["output_projection"] == "tied to the decoder's embedding (lm_head.weight equals it)"


def test_one_vocabulary_with_an_embedding_per_stack_is_imported(marian_separate, tmp_path):
    """share_encoder_decoder_embeddings false but no target_vocab.json: vocab.json serves both sides, and each stack
    still has its own embedding (decoder_vocab_size = vocab_size)."""
    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(marian_separate[2], tmp_path / "source")
    (folder / "target_vocab.json").unlink()
    edit_json(folder / "tokenizer_config.json", separate_vocabs=False)
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    size, pad = len(vocab), vocab["<pad>"]
    edit_json(folder / "config.json", decoder_vocab_size=size, pad_token_id=pad, decoder_start_token_id=pad)
    tensors = load_file(folder / "model.safetensors")
    generator = torch.Generator().manual_seed(2)
    for key in ("model.decoder.embed_tokens.weight", "lm_head.weight", "final_logits_bias"):
        rows, width = (1, size) if key == "final_logits_bias" else (size, tensors[key].shape[1])
        tensors[key] = torch.randn(rows, width, generator=generator)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    expected, logits = logits_of_both(folder, tmp_path / "out", SENTENCES[0])
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)
    config = json.loads((tmp_path / "out" / "config.json").read_text(encoding="utf-8"))
    assert config["share_embeddings"] is False and config["src_vocab_size"] == config["tgt_vocab_size"] == size
    assert "source_pad_id" not in config and not (tmp_path / "out" / "target_vocab.json").exists()


# --- training from it ---


def test_validation_loss_of_a_padded_batch_is_each_sentences_own(marian_separate):
    """Sources of different lengths in one batch are padded with the source's <pad>, which the model hides: the
    batched loss is the loss of each sentence alone."""
    translator = load_checkpoint(marian_separate[3], "cpu")
    sentences = toy_sentences(12, seed=3)
    pairs = [(sentence, german(sentence)) for sentence in sentences]
    examples = encode_examples(pairs, translator.tokenizer, translator.config)
    assert len({len(example.src) for example in examples}) > 1
    assert_validation_loss_is_per_sentence(translator, examples)


def train_from(checkpoint: Path, tmp_path: Path, *options: str) -> tuple[list[dict], list[tuple[str, str]]]:
    """``model.train --init-from checkpoint`` on 360 English -> German toy pairs: its metrics.jsonl records and the
    training pairs."""
    from model.train import main as train_main

    data = tmp_path / "data"
    data.mkdir()
    sentences = toy_sentences(400, seed=7)
    pairs = [(sentence, german(sentence)) for sentence in sentences]
    for split, part in (("train", pairs[:360]), ("val", pairs[360:])):
        (data / f"{split}.en").write_text("".join(source + "\n" for source, _ in part), encoding="utf-8")
        (data / f"{split}.de").write_text("".join(target + "\n" for _, target in part), encoding="utf-8")
    out = tmp_path / "run"
    settings = ["--data", str(data), "--out", str(out), "--init-from", str(checkpoint), "--src-lang", "en"]
    settings += ["--tgt-lang", "de", "--max-tokens", "400", "--warmup", "10", "--device", "cpu", "--threads", "1"]
    settings += ["--valid-bleu-limit", "10", "--snapshot-steps", "0", "--quiet", *options]
    train_main(settings)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()], pairs[:360]


def test_a_training_epoch_hides_the_sources_padding(marian_separate, tmp_path):
    """With --lr 0 the model stays as imported, so an epoch's training loss (no label smoothing) is the mean loss of
    its pairs each alone: sources padded with the target's <pad>, an ordinary source piece, would change it."""
    metrics, pairs = train_from(marian_separate[3], tmp_path, "--epochs", "1", "--lr", "0", "--label-smoothing", "0")
    imported = load_checkpoint(marian_separate[3], "cpu")
    examples = encode_examples(pairs, imported.tokenizer, imported.config)
    expected = validation_loss(imported.model, examples, imported.config, torch.device("cpu"))
    assert abs(metrics[0]["train_loss"] - expected) <= 1e-5 * expected


def test_init_from_it_fine_tunes_it_and_its_loss_falls(marian_separate, tmp_path):
    metrics, _ = train_from(marian_separate[3], tmp_path, "--epochs", "3", "--lr", "1e-3")
    losses = [epoch["valid_loss"] for epoch in metrics]
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0]
    tuned = load_checkpoint(tmp_path / "run" / "final", "cpu")
    imported = load_checkpoint(marian_separate[3], "cpu")
    assert tuned.config == imported.config  # still two vocabularies, two pad ids
    assert tuned.tokenizer.target_vocab == imported.tokenizer.target_vocab


# --- without transformers: the tokenizer and the config on their own ---


def test_a_separate_vocabulary_tokenizer_on_its_own(tmp_path):
    """Each side reads its own table: ids, pieces, special ids and sizes; saved as four files and loaded back."""
    vocab, target_vocab = write_separate_tokenizer_files(tmp_path)
    tokenizer = Tokenizer.load(tmp_path)
    assert tokenizer.separate_vocabularies and tokenizer.target_vocab == target_vocab
    assert (tokenizer.vocab_size("source"), tokenizer.vocab_size("target")) == (len(vocab), len(target_vocab))
    text = "der Hund"
    pieces = tokenizer.target.encode(text, out_type=str)
    ids = tokenizer.encode(text, "target")
    assert ids == [target_vocab.get(piece, target_vocab["<unk>"]) for piece in pieces]
    assert tokenizer.pieces(ids, "target") == pieces and tokenizer.decode(ids) == text
    assert tokenizer.decode([target_vocab["<pad>"], *ids, target_vocab["</s>"]]) == text
    assert tokenizer.special_ids("source")["pad_id"] == len(vocab) - 1
    assert tokenizer.special_ids("target")["pad_id"] == len(target_vocab) - 1
    assert tokenizer.language_codes() == ["de", "fr"]
    saved = tmp_path / "saved"
    saved.mkdir()
    assert tokenizer.save(saved) == tokenizer.files == ["source.spm", "target.spm", "vocab.json", "target_vocab.json"]
    loaded = Tokenizer.load(saved)
    assert (loaded.vocab, loaded.target_vocab) == (vocab, target_vocab)
    (saved / "target_vocab.json").write_text('{"</s>": 0,', encoding="utf-8")
    with pytest.raises(ValueError, match=r"target_vocab\.json: not valid JSON"):
        Tokenizer.load(saved)


def test_source_pad_id_is_optional_and_checked():
    config = small_config(40)
    assert "source_pad_id" not in config.to_dict() and config.source_pad_id == config.pad_id  # older configs unchanged
    apart = small_config(40, src_vocab_size=50, source_pad_id=49)
    assert apart.source_pad_id == 49 and TransformerConfig.from_dict(apart.to_dict()) == apart
    older = {
        **apart.to_dict(),
        "src_pad_id": apart.to_dict().pop("source_pad_id"),
    }  # a config.json of before the rename
    del older["source_pad_id"]
    assert TransformerConfig.from_dict(older) == apart
    with pytest.raises(ValueError, match="source_pad_id=50 is outside the source vocabulary"):
        small_config(40, src_vocab_size=50, source_pad_id=50)
    with pytest.raises(ValueError, match="share_embeddings needs source_pad_id == pad_id"):
        small_config(40, share_embeddings=True, source_pad_id=5)
