"""MarianMT (OPUS-MT) import: a tiny random Hugging Face model, converted, must compute what Hugging Face computes.

Everything is built offline by the marian fixture (tests/conftest.py): two SentencePiece models trained on
toy text, a joint vocab.json, a MarianTokenizer and a random MarianMTModel saved with save_pretrained, then
converted with ``python -m model.import_hf`` (the converter of every family). transformers is a test-only dependency:
without it these tests skip with the reason, except in CI (CI=true), where they fail. The imported
model on the page: tests/explorer/test_marian.py.
"""

from __future__ import annotations

import copy
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model import capture_attention, load_checkpoint
from model.checkpoint import CheckpointError, read_card
from model.decoding.search import greedy_decode
from model.interop.huggingface import import_hf
from model.tokenizer import Tokenizer
from tests.helpers import REPO
from tests.marian_helpers import assert_attention_equal, german, logits_of_both, run_importer, write_tokenizer_files
from tests.reference_forward import reference_points

SENTENCES = ["a man rides a blue bike.", "two young dogs play in the snow.", ">>de<< the cat sits.", "Zürich ✓ park"]


@pytest.fixture(params=["marian", "marian_separate"])
def either_marian(request):
    """Each tiny MarianMT model in turn: one vocabulary for both sides (marian), and one per side (marian_separate,
    whose own tests are in test_marian_separate_vocabs.py)."""
    return request.getfixturevalue(request.param)


def test_source_ids_equal_marian_tokenizers(either_marian):
    _, hf_tokenizer, _, out = either_marian
    translator = load_checkpoint(out, device="cpu")
    for text in SENTENCES:
        assert translator.source_ids(text).ids == hf_tokenizer(text).input_ids, text
    assert hf_tokenizer(">>de<< a dog").input_ids[0] == translator.tokenizer.vocab[">>de<<"]


def test_logits_and_every_heads_attention_equal_hugging_faces(either_marian):
    hf_model, hf_tokenizer, _, out = either_marian
    translator = load_checkpoint(out, device="cpu")
    model = translator.model
    assert model.config.bos_id is None and model.config.start_id == model.config.pad_id
    src = torch.tensor([hf_tokenizer(SENTENCES[1]).input_ids])
    target = hf_tokenizer(text_target=german(SENTENCES[1])).input_ids
    tgt = torch.tensor([[hf_model.config.decoder_start_token_id, *target[:-1]]])
    with torch.no_grad():
        expected = hf_model(input_ids=src, decoder_input_ids=tgt, output_attentions=True)
    with torch.inference_mode(), capture_attention(model) as capture:
        logits = model(src, tgt)
    assert logits.shape[-1] == hf_model.config.decoder_vocab_size  # the output covers the target vocabulary
    torch.testing.assert_close(logits, expected.logits, atol=1e-4, rtol=0)
    with torch.inference_mode():  # the fused path (nothing captured) agrees too
        torch.testing.assert_close(model(src, tgt), expected.logits, atol=1e-4, rtol=0)
    assert_attention_equal(capture, expected)  # 2 encoder and 3 decoder layers


def test_every_hook_point_equals_hugging_faces_hidden_states_and_the_reference(either_marian):
    """The imported model's activation points: each layer's output and the first layer's input equal Hugging Face's
    hidden states, and every point equals the independent forward pass (tests/reference_forward.py)."""
    hf_model, hf_tokenizer, _, out = either_marian
    model = load_checkpoint(out, device="cpu").model
    src = torch.tensor([hf_tokenizer(SENTENCES[0]).input_ids])
    target = hf_tokenizer(text_target=german(SENTENCES[0])).input_ids
    tgt = torch.tensor([[hf_model.config.decoder_start_token_id, *target[:-1]]])
    with torch.no_grad():
        expected = hf_model(input_ids=src, decoder_input_ids=tgt, output_hidden_states=True)
        reference = reference_points(model, src, tgt)
    with torch.inference_mode(), capture_attention(model, activations=True) as capture:
        model(src, tgt)
    points = capture.activations
    for stack, hidden_states in (
        ("encoder", expected.encoder_hidden_states),
        ("decoder", expected.decoder_hidden_states),
    ):
        names = [f"{stack}.hook_embed_pos"] + [
            f"{stack}.layers.{i}.hook_resid_post" for i in range(len(hidden_states) - 1)
        ]
        for name, hidden in zip(names, hidden_states, strict=True):
            torch.testing.assert_close(points[name], hidden, atol=1e-4, rtol=0, msg=name)
    torch.testing.assert_close(points["hook_logits"], expected.logits, atol=1e-4, rtol=0)
    assert sorted(points) == sorted(reference)
    for name, value in points.items():
        torch.testing.assert_close(value, reference[name], atol=1e-4, rtol=0, msg=name)


def test_greedy_translations_equal_generate(either_marian):
    hf_model, hf_tokenizer, _, out = either_marian
    translator = load_checkpoint(out, device="cpu")
    pad = hf_model.config.pad_token_id
    for text in SENTENCES:
        src = torch.tensor([hf_tokenizer(text).input_ids])
        with torch.no_grad():
            generated = hf_model.generate(
                src, num_beams=1, do_sample=False, max_new_tokens=30, bad_words_ids=[[pad]], forced_eos_token_id=None
            )[0].tolist()
        ids = greedy_decode(translator.model, src, max_new_tokens=30)[0]
        assert ids == [token for token in generated[1:] if token != pad], text
        expected = hf_tokenizer.decode(generated[1:], skip_special_tokens=True)  # after the start token
        assert translator.tokenizer.decode(ids) == expected
        assert translator.translate(text, beam_size=1, max_new_tokens=30) == expected


def test_card_and_config_record_the_source_and_its_generation_defaults(marian):
    hf_model, _, source, out = marian
    card = read_card(out)  # an imported model's card: its own keys kept beside the ones every card has
    assert card.extra["source_model"] == "opus-mt-tiny" and card.extra["licence"] == "cc-by-4.0"
    assert card.languages == ("en", "de") and card.domain == "broad (OPUS parallel data)"
    assert card.extra["conversion"]["dtype"] == "float32"
    defaults = card.extra["generation_defaults"]
    assert (defaults["num_beams"], defaults["max_length"]) == (4, 512)
    assert defaults["forced_eos_token_id"] == hf_model.config.eos_token_id
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["activation"] == "swish" and config["positional_layout"] == "marian"
    assert config["final_logits_bias"] is True and config["bos_id"] is None
    assert sorted(p.name for p in out.iterdir()) == [
        "card.json",
        "config.json",
        "model.safetensors",
        "source.spm",
        "target.spm",
        "vocab.json",
    ]


def test_fp16_output_is_half_the_size_and_close(marian, tmp_path):
    _, hf_tokenizer, source, out = marian
    half = import_hf(source, tmp_path / "half", fp16=True)
    assert (half / "model.safetensors").stat().st_size < 0.6 * (out / "model.safetensors").stat().st_size
    full_model = load_checkpoint(out, "cpu").model
    src = torch.tensor([hf_tokenizer(SENTENCES[0]).input_ids])
    tgt = torch.tensor([[full_model.config.start_id, 5, 6]])
    with torch.inference_mode():
        full = full_model(src, tgt)
        reduced = load_checkpoint(half, "cpu").model(src, tgt)
    torch.testing.assert_close(reduced, full, atol=0.05, rtol=0.05)


def test_marian_tokenizer_mode_decodes_like_marian(marian):
    _, hf_tokenizer, _, out = marian
    tokenizer = Tokenizer.load(out)
    vocab = tokenizer.vocab
    ids = [vocab[">>de<<"], *tokenizer.encode("der Hund", "target"), vocab["<unk>"], vocab["</s>"], vocab["<pad>"]]
    assert tokenizer.decode(ids) == hf_tokenizer.decode(ids, skip_special_tokens=True)
    assert tokenizer.decode(ids) == ">>de<< der Hund"
    assert tokenizer.special_ids() == {"pad_id": len(vocab) - 1, "unk_id": 1, "bos_id": None, "eos_id": 0}
    assert tokenizer.pieces([0, len(vocab) - 1]) == ["</s>", "<pad>"]


def test_only_a_pickle_is_refused_unread(marian, tmp_path):
    folder = shutil.copytree(marian[2], tmp_path / "source")
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": Payload()}))
    result = run_importer(folder, tmp_path / "out")
    assert result.returncode == 2 and "pytorch_model.bin" in result.stderr and "safetensors" in result.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_other_architectures_are_refused_naming_the_supported_one(marian, tmp_path):
    folder = shutil.copytree(marian[2], tmp_path / "source")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="bart", architectures=["BartForConditionalGeneration"])
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="'bart': BART's tokenizer is byte-level BPE.*supported: marian"):
        import_hf(folder, tmp_path / "out")
    config.update(model_type="marian", architectures=["MarianForCausalLM"])
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="MarianForCausalLM is not supported; supported: MarianMTModel"):
        import_hf(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_languages_are_refused_for_an_opus_mt_model(marian, tmp_path):
    with pytest.raises(CheckpointError, match="--source-language and --target-language are for mBART-50"):
        import_hf(marian[2], tmp_path / "out", languages=(None, "de"))
    assert not (tmp_path / "out").exists()


def test_the_old_command_name_still_converts(marian, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "model.import_marian", str(marian[2]), str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "2+3 layers" in result.stdout and (tmp_path / "out" / "model.safetensors").is_file()


@pytest.mark.parametrize("missing", ["source.spm", "target.spm", "vocab.json"])
def test_missing_tokenizer_files_are_refused(marian, tmp_path, missing):
    folder = shutil.copytree(marian[2], tmp_path / "source")
    (folder / missing).unlink()
    with pytest.raises(CheckpointError, match=f"tokenizer files missing: {missing}"):
        import_hf(folder, tmp_path / "out")


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(encoder_ffn_dim=128, decoder_ffn_dim=128), "shapes disagree with config.json: encoder.layers.0.feed"),
        (dict(decoder_layers=4), "missing tensor model.decoder.layers.3"),
        (dict(decoder_ffn_dim=128), "one d_ff for both stacks"),
        (
            dict(share_encoder_decoder_embeddings=False),
            "no lm_head.weight, but share_encoder_decoder_embeddings is false",
        ),
        (dict(activation_function="tanh"), "activation_function 'tanh'"),
    ],
)
def test_configs_the_weights_or_our_model_cannot_follow_are_refused(marian, tmp_path, change, message):
    folder = shutil.copytree(marian[2], tmp_path / "source")
    config = json.loads((folder / "config.json").read_text())
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        import_hf(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_existing_output_folder_is_not_overwritten(marian, tmp_path):
    (tmp_path / "out").mkdir()
    result = run_importer(marian[2], tmp_path / "out")
    assert result.returncode == 2 and "already exists" in result.stderr


def test_the_importer_never_imports_transformers(marian, tmp_path):
    code = (
        "import sys; from model.interop.huggingface import main; "
        f"main([{str(marian[2])!r}, {str(tmp_path / 'out')!r}]); "
        "assert 'transformers' not in sys.modules, 'transformers was imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_marian_tokenizer_mode_on_its_own(tmp_path):
    """No transformers needed: vocab.json ids, the language code whole, </s> <unk> <pad> dropped, saved as loaded."""
    vocab = write_tokenizer_files(tmp_path)
    tokenizer = Tokenizer.load(tmp_path)
    assert tokenizer.marian and tokenizer.vocab_size("source") == tokenizer.vocab_size("target") == len(vocab)
    ids = tokenizer.encode(">>de<< the dog", "source")
    pieces = tokenizer.source.encode(" the dog", out_type=str)
    assert ids == [vocab[">>de<<"], *(vocab.get(piece, vocab["<unk>"]) for piece in pieces)]
    assert tokenizer.pieces(ids) == [">>de<<", *pieces]
    assert tokenizer.encode("a ✓", "source")[-1] == vocab["<unk>"]  # a piece vocab.json lacks
    assert tokenizer.decode([*ids, vocab["<unk>"], vocab["</s>"], vocab["<pad>"]]) == ">>de<< the dog"
    saved = tmp_path / "saved"
    saved.mkdir()
    assert tokenizer.save(saved) == ["source.spm", "target.spm", "vocab.json"]
    assert Tokenizer.load(saved).vocab == vocab
    (saved / "target.spm").unlink()
    with pytest.raises(FileNotFoundError, match="target.spm"):
        Tokenizer.load(saved)


def test_sharded_safetensors_import_the_same_weights(marian, tmp_path):
    hf_model, hf_tokenizer, _, out = marian
    sharded = tmp_path / "sharded"
    hf_model.save_pretrained(sharded, max_shard_size="50KB")
    hf_tokenizer.save_pretrained(sharded)
    assert (sharded / "model.safetensors.index.json").is_file() and not (sharded / "model.safetensors").exists()
    imported = load_checkpoint(import_hf(sharded, tmp_path / "out"), "cpu").model.state_dict()
    expected = load_checkpoint(out, "cpu").model.state_dict()
    assert imported.keys() == expected.keys()
    assert all(torch.equal(imported[key], expected[key]) for key in expected)


@pytest.mark.parametrize("key", ["vocab_size", "d_model", "decoder_layers", "encoder_ffn_dim"])
def test_a_config_without_a_needed_key_is_refused_by_name(marian, tmp_path, key):
    folder = shutil.copytree(marian[2], tmp_path / "source")
    config = json.loads((folder / "config.json").read_text())
    del config[key]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=rf"config\.json: no {key}: a MarianConfig names every one of them"):
        import_hf(folder, tmp_path / "out")


def with_stored_positions(folder: Path, table: torch.Tensor) -> None:
    """Add the positional tables older transformers versions saved to the folder's weights file."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(path)
    for stack in ("encoder", "decoder"):
        tensors[f"model.{stack}.embed_positions.weight"] = table.clone()
    save_file(tensors, path, metadata={"format": "pt"})


def test_a_stored_positional_table_is_checked_against_the_computed_one(marian, tmp_path):
    hf_model = marian[0]
    hugging_faces = hf_model.model.encoder.embed_positions.weight.detach().float()  # what transformers computes
    folder = shutil.copytree(marian[2], tmp_path / "source")
    with_stored_positions(folder, hugging_faces)
    imported = load_checkpoint(import_hf(folder, tmp_path / "same"), "cpu").model.state_dict()
    expected = load_checkpoint(marian[3], "cpu").model.state_dict()
    assert all(torch.equal(imported[key], expected[key]) for key in expected)  # accepted, and nothing else changes

    learned = hugging_faces.clone()
    learned[3, 0] += 0.01  # a table that is not the sinusoids (e.g. learned positions)
    with_stored_positions(folder, learned)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: model\.encoder\.embed_positions\.weight differs"):
        import_hf(folder, tmp_path / "learned")
    with_stored_positions(folder, hugging_faces[:10])
    with pytest.raises(CheckpointError, match=r"embed_positions\.weight: shape \(10, 32\), but the config gives"):
        import_hf(folder, tmp_path / "short")


def test_every_dropout_of_the_config_is_mapped(marian, tmp_path):
    folder = shutil.copytree(marian[2], tmp_path / "source")
    config = json.loads((folder / "config.json").read_text())
    config.update(dropout=0.1, attention_dropout=0.05, activation_dropout=0.2)
    (folder / "config.json").write_text(json.dumps(config))
    imported = load_checkpoint(import_hf(folder, tmp_path / "out"), "cpu").config
    assert (imported.dropout, imported.attention_dropout_p, imported.activation_dropout_p) == (0.1, 0.05, 0.2)


def test_init_from_an_imported_model_fine_tunes_it_and_its_loss_falls(marian, tmp_path):
    """model.train --init-from an imported folder: targets start with Marian's start token (<pad>; it has no BOS),
    and a few epochs on a small English -> German corpus lower the loss from where the imported model starts."""
    from model.train import main as train_main
    from tests.helpers import toy_sentences

    data = tmp_path / "data"
    data.mkdir()
    sentences = toy_sentences(400, seed=7)
    for split, part in (("train", sentences[:360]), ("val", sentences[360:])):
        (data / f"{split}.en").write_text("".join(s + "\n" for s in part), encoding="utf-8")
        (data / f"{split}.de").write_text("".join(german(s) + "\n" for s in part), encoding="utf-8")
    out = tmp_path / "run"
    options = ["--data", str(data), "--out", str(out), "--init-from", str(marian[3]), "--src-lang", "en"]
    options += ["--tgt-lang", "de", "--epochs", "3", "--max-tokens", "400", "--lr", "1e-3", "--warmup", "10"]
    options += ["--device", "cpu", "--threads", "1", "--valid-bleu-limit", "10", "--snapshot-steps", "0", "--quiet"]
    train_main(options)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [epoch["valid_loss"] for epoch in metrics]
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0]
    tuned = load_checkpoint(out / "final", "cpu")
    assert tuned.config.bos_id is None and tuned.config.start_id == tuned.config.pad_id  # still a Marian model
    assert read_card(out / "final").history[-1].init_from == str(marian[3])


def test_an_imported_model_decodes_up_to_its_authors_max_length_not_our_default(marian):
    """OPUS-MT allows max_length 512 (the start token included): a translation out of a language with few pieces
    per word must not stop at our 1.5 x source + 10. A model that never writes </s> shows the limit."""
    from model.decoding.search import default_max_new_tokens
    from model.translator import Translator

    imported = load_checkpoint(marian[3], "cpu")
    model = copy.deepcopy(imported.model)
    eos = model.config.eos_id

    def never_end(module, inputs, logits):
        logits = logits.clone()
        logits[..., eos] = -1e9
        return logits

    model.generator.register_forward_hook(never_end)
    endless = Translator(model, imported.tokenizer, torch.device("cpu"), name="endless", card=imported.card)
    source = "a dog."
    positions = model.config.max_sequence_tokens  # the tiny model's 63 positions are fewer than OPUS-MT's 511
    assert imported.authors_limit == positions  # their max_length of 512 new tokens, within our positions
    short = default_max_new_tokens(model, len(imported.source_ids(source).ids))
    assert short < positions
    for beam_size in (1, 2):
        trace = endless.trace(source, beam_size=beam_size)
        assert trace.n_steps == positions and trace.outcome.cut_off
    assert len(endless.tokenizer.encode(endless.translate(source, beam_size=1), "target")) >= positions - 1
    assert endless.trace(source, beam_size=1, max_new_tokens=5).n_steps == 5  # the user's limit still wins
    ours = Translator(model, imported.tokenizer, torch.device("cpu"), name="ours")  # no authors' settings
    assert ours.authors_limit is None and ours.trace(source, beam_size=1).n_steps == short


def test_an_output_projection_of_its_own_is_imported_as_transformers_uses_it(marian, tmp_path):
    """tie_word_embeddings false (the output projection its own matrix), and a tied config whose folder still holds
    an lm_head.weight that differs from the embedding (older converters wrote such folders): transformers uses the
    stored lm_head.weight in both cases, and so does the import."""
    from safetensors.torch import load_file, save_file

    for tied in (False, True):
        folder = shutil.copytree(marian[2], tmp_path / f"tied-{tied}" / "source")
        path = folder / "model.safetensors"
        tensors = load_file(path)
        shared = tensors["model.shared.weight"]
        tensors["lm_head.weight"] = shared + 0.5 * torch.randn(shared.shape, generator=torch.Generator().manual_seed(1))
        save_file(tensors, path, metadata={"format": "pt"})
        config = json.loads((folder / "config.json").read_text())
        config["tie_word_embeddings"] = tied
        (folder / "config.json").write_text(json.dumps(config))
        expected, logits = logits_of_both(folder, tmp_path / f"out-{tied}", SENTENCES[0])
        torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)
        card = read_card(tmp_path / f"out-{tied}")
        assert card.extra["conversion"]["output_projection"] == "lm_head.weight, its own matrix"
    assert read_card(marian[3]).extra["conversion"]["output_projection"] == "tied to the shared embedding"


def test_an_untied_config_without_its_output_projection_is_refused(marian, tmp_path):
    folder = shutil.copytree(marian[2], tmp_path / "source")
    config = json.loads((folder / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors: no lm_head\.weight, but tie_word_embeddings is false"
    ):
        import_hf(folder, tmp_path / "out")
