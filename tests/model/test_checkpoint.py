"""Checkpoint folders: identical outputs after a round trip, clear refusals of bad files, training snapshots."""

from __future__ import annotations

import json
import re
import shutil
import types

import pytest
import safetensors
import safetensors.torch
import torch

import model.checkpoint as checkpoint_module
from model import Transformer, load_checkpoint
from model.card import Card
from model.checkpoint import (
    CheckpointError,
    build_model,
    check_checkpoint,
    find_snapshots,
    initial_model,
    read_card,
    read_config,
    resolve_device,
    save_checkpoint,
    scan_checkpoints,
)
from model.tokenizer import Tokenizer, word_index
from tests.helpers import DEFAULT_CHECKPOINT, REPO, random_model, small_config


@pytest.fixture
def checkpoint_copy(tiny_checkpoint, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(tiny_checkpoint, folder)
    return folder


def test_save_and_load_give_identical_outputs(tmp_path, toy_tokenizer):
    torch.manual_seed(0)
    vocab = toy_tokenizer.vocab_size("source")
    model = Transformer(small_config(vocab, final_norm=True)).eval()
    save_checkpoint(tmp_path / "m", model, toy_tokenizer, {"note": "test"})
    loaded = load_checkpoint(tmp_path / "m", device="cpu")
    src, tgt = torch.randint(4, vocab, (2, 6)), torch.randint(4, vocab, (2, 5))
    with torch.inference_mode():
        assert torch.equal(loaded.model(src, tgt), model(src, tgt))
    assert loaded.card.extra["note"] == "test" and loaded.card.parameters == model.num_parameters()
    assert loaded.config == model.config


def test_half_precision_checkpoint_is_smaller_and_close(tmp_path, toy_tokenizer):
    torch.manual_seed(0)
    model = Transformer(small_config(toy_tokenizer.vocab_size("source"))).eval()
    save_checkpoint(tmp_path / "full", model, toy_tokenizer)
    save_checkpoint(tmp_path / "half", model, toy_tokenizer, half=True)
    full, half = (
        (tmp_path / "full/model.safetensors").stat().st_size,
        (tmp_path / "half/model.safetensors").stat().st_size,
    )
    assert half < 0.6 * full
    loaded = load_checkpoint(tmp_path / "half", device="cpu").model
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert b.dtype == torch.float32 and torch.allclose(a, b, atol=1e-2, rtol=1e-3), name


def test_an_untrained_model_is_stored_as_its_seed_and_rebuilt_exactly(tmp_path, toy_tokenizer):
    config = small_config(toy_tokenizer.vocab_size("source"), final_norm=True)
    untrained = initial_model(config, seed=7).eval()
    save_checkpoint(tmp_path / "seeded", untrained, toy_tokenizer, {"snapshot": "untrained"}, half=True, initial_seed=7)
    assert not (tmp_path / "seeded" / "model.safetensors").exists()
    assert read_card(tmp_path / "seeded").initial_weights.seed == 7
    save_checkpoint(tmp_path / "stored", untrained, toy_tokenizer, half=True)  # the same model, weights written
    torch.manual_seed(0)  # rebuilding leaves the caller's random state alone
    before = torch.rand(3)
    torch.manual_seed(0)
    seeded = load_checkpoint(tmp_path / "seeded", device="cpu").model
    assert torch.equal(torch.rand(3), before)
    stored = load_checkpoint(tmp_path / "stored", device="cpu").model
    for (name, a), b in zip(stored.state_dict().items(), seeded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_model_its_seed_does_not_make_keeps_its_weights(tmp_path, toy_tokenizer):
    config = small_config(toy_tokenizer.vocab_size("source"))
    trained = initial_model(config, seed=7)
    with torch.no_grad():
        next(trained.parameters()).add_(0.5)  # one update's worth of change
    passed_on = Card.from_dict({"initial_weights": {"seed": 7, "sha256": "0" * 64}})  # a seeded folder's card
    save_checkpoint(tmp_path / "m", trained, toy_tokenizer, passed_on, half=True, initial_seed=7)
    assert (tmp_path / "m" / "model.safetensors").is_file() and read_card(tmp_path / "m").initial_weights is None
    assert passed_on.initial_weights.seed == 7  # the caller's card is left as it was


def test_a_seed_that_rebuilds_other_weights_is_refused(tmp_path, toy_tokenizer):
    untrained = initial_model(small_config(toy_tokenizer.vocab_size("source")), seed=7)
    folder = save_checkpoint(tmp_path / "m", untrained, toy_tokenizer, half=True, initial_seed=7)
    card = read_card(folder)
    card.initial_weights.seed = 8  # as a PyTorch that initialises differently would rebuild it
    card.save(folder)
    with pytest.raises(CheckpointError, match=r"card\.json: initial_weights: seed 8 gives other weights"):
        load_checkpoint(folder)
    data = card.to_dict()
    data["initial_weights"]["seed"] = "8"
    (folder / "card.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"card\.json: initial_weights\.seed: expected an integer"):
        load_checkpoint(folder)


def test_pickled_weights_are_refused_with_conversion_hint(checkpoint_copy):
    (checkpoint_copy / "model.safetensors").unlink()
    torch.save({"weights": torch.zeros(1)}, checkpoint_copy / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin.*python -m model\.interop\.convert"):
        load_checkpoint(checkpoint_copy)
    with pytest.raises(CheckpointError, match="never loaded"):
        load_checkpoint(checkpoint_copy / "pytorch_model.bin")


def test_truncated_weights_name_the_file(checkpoint_copy):
    weights = checkpoint_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt or truncated"):
        load_checkpoint(checkpoint_copy)


def test_wrong_shapes_name_the_file(checkpoint_copy):
    config = json.loads((checkpoint_copy / "config.json").read_text())
    config["d_ff"] = 128
    (checkpoint_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: weights do not match config\.json"):
        load_checkpoint(checkpoint_copy)


def test_vocabulary_mismatch_names_the_tokenizer(checkpoint_copy):
    config = json.loads((checkpoint_copy / "config.json").read_text())
    config["src_vocab_size"] = config["tgt_vocab_size"] = 90
    (checkpoint_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"tokenizer\.model: source vocabulary has 80 pieces but config\.json says 90"
    ):
        load_checkpoint(checkpoint_copy)


@pytest.mark.parametrize("content,message", [("{not json", "not valid JSON"), ('{"d_model": 3}', "config.json")])
def test_bad_config_names_the_file(checkpoint_copy, content, message):
    (checkpoint_copy / "config.json").write_text(content)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(checkpoint_copy)


def test_missing_files_are_named(checkpoint_copy):
    (checkpoint_copy / "tokenizer.model").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.model"):
        load_checkpoint(checkpoint_copy)
    with pytest.raises(CheckpointError, match="not a checkpoint folder"):
        load_checkpoint(checkpoint_copy / "nowhere")


def test_corrupt_tokenizer_is_named(checkpoint_copy):
    (checkpoint_copy / "tokenizer.model").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match=r"tokenizer\.model: not a valid SentencePiece model"):
        load_checkpoint(checkpoint_copy)


def test_device_resolution_falls_back_with_a_notice():
    device, notices = resolve_device("auto")
    assert device.type in ("cpu", "cuda", "mps")
    if not torch.cuda.is_available():
        device, notices = resolve_device("cuda")
        assert device.type == "cpu" and "CUDA" in notices[0]
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu")


def test_tokenizer_ids_pieces_and_words(toy_tokenizer, tmp_path):
    ids = toy_tokenizer.encode("a man rides a bike.")
    pieces = toy_tokenizer.pieces(ids)
    assert toy_tokenizer.decode(ids, "source") == "a man rides a bike."
    assert "".join(pieces).replace("\u2581", " ").strip() == "a man rides a bike."
    assert toy_tokenizer.special_ids() == {
        "pad_id": toy_tokenizer.source.pad_id(),
        "unk_id": toy_tokenizer.source.unk_id(),
        "bos_id": toy_tokenizer.source.bos_id(),
        "eos_id": toy_tokenizer.source.eos_id(),
    }
    assert word_index(["<s>", "\u2581a", "\u2581bi", "ke", ".", "</s>"]) == [0, 1, 2, 2, 2, 3]
    toy_tokenizer.save(tmp_path)
    assert Tokenizer.load(tmp_path).encode("a man") == toy_tokenizer.encode("a man")


def test_averaging_checkpoints_writes_the_mean_of_their_weights(tmp_path, toy_tokenizer, capsys):
    from model.analysis.domain import SOURCE_WORDS_FILE
    from model.training import average

    folders = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        model = Transformer(small_config(toy_tokenizer.vocab_size("source"), share_embeddings=True, tie_output=True))
        runs = [{"command": "run 1", "epochs": 3, "wall_time_s": 60.0}]
        runs += [{"command": "run 2", "epochs": 2, "wall_time_s": 30.5}] if seed == 2 else []
        card = {"source_language": "en", "scores": {"val": {"bleu": 1.0}}, "history": runs}  # 2 continues 1
        folder = save_checkpoint(tmp_path / f"run{seed}", model.eval(), toy_tokenizer, card)
        (folder / SOURCE_WORDS_FILE).write_text('{"sentences": 1, "counts": {"a": 1}}\n')
        folders.append(folder)
    out = average.main([str(folders[0]), str(folders[1]), "--out", str(tmp_path / "mean")])

    weights = [load_checkpoint(folder, device="cpu").model.state_dict() for folder in (*folders, out)]
    for name, value in weights[2].items():  # stored in fp16
        torch.testing.assert_close(value, (weights[0][name] + weights[1][name]) / 2, atol=2e-3, rtol=1e-3)
    card = read_card(out)
    assert card.scores is None  # the first checkpoint's scores are not the mean's
    assert [run.command for run in card.history[:2]] == ["run 1", "run 2"]
    assert card.train_command.startswith("run 1 ; then run 2 ; then python -m model.training.average")
    assert card.wall_time_s == 90.5
    assert card.history[2].averaged_from == [str(folder) for folder in folders] and len(card.history) == 3
    assert (out / SOURCE_WORDS_FILE).read_text() == (folders[0] / SOURCE_WORDS_FILE).read_text()

    torch.manual_seed(3)
    wider = Transformer(small_config(toy_tokenizer.vocab_size("source"), d_model=64, share_embeddings=True))
    other = save_checkpoint(tmp_path / "wider", wider, toy_tokenizer, {})
    for argv, message in (
        ([str(folders[0]), str(other), "--out", str(tmp_path / "x")], "config.json differs"),
        ([str(folders[0]), str(folders[1]), "--out", str(out)], "already exists"),
        ([str(folders[0]), "--out", str(tmp_path / "y")], "at least two"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            average.main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


# --- training snapshots (the classroom_checkpoints fixture: tests/conftest.py) ---


def test_find_snapshots_orders_the_stages_and_ends_with_the_checkpoint(classroom_checkpoints, tmp_path):
    folder = classroom_checkpoints / "tiny-en-de"
    assert find_snapshots(folder) == {
        "untrained": folder / "snapshots" / "untrained",
        "early": folder / "snapshots" / "early",
        "final": folder,
    }
    assert find_snapshots(classroom_checkpoints / "toy-plain-en-de") == {
        "final": classroom_checkpoints / "toy-plain-en-de"
    }
    odd = tmp_path / "odd"
    for stage in ("mid", "early", "final", "untrained", "empty"):
        (odd / "snapshots" / stage).mkdir(parents=True)
        if stage != "empty":
            (odd / "snapshots" / stage / "config.json").write_text("{}")
    assert list(find_snapshots(odd)) == ["untrained", "early", "mid", "final"]
    assert find_snapshots(odd)["final"] == odd  # not snapshots/final: the checkpoint is the final stage


def test_shipped_default_checkpoint_has_its_snapshots():
    folder = DEFAULT_CHECKPOINT
    if not (folder / "snapshots").is_dir():
        pytest.skip("checkpoints/multi30k-en-de has no snapshots here")
    assert list(find_snapshots(folder)) == ["untrained", "early", "final"]


def test_every_load_path_gives_a_float32_model_in_eval_mode(tmp_path, toy_tokenizer):
    """fp16 weights, fp32 weights and an untrained model stored as its seed all load as float32 (the stored fp16
    values, exactly), so traces and attributions compute in float32 whichever way a checkpoint was written."""
    config = small_config(toy_tokenizer.vocab_size("source"))
    untrained = initial_model(config, seed=3).eval()
    save_checkpoint(tmp_path / "half", untrained, toy_tokenizer, half=True)
    save_checkpoint(tmp_path / "full", untrained, toy_tokenizer, half=False)
    save_checkpoint(tmp_path / "seeded", untrained, toy_tokenizer, {"snapshot": "untrained"}, half=True, initial_seed=3)
    shipped = [DEFAULT_CHECKPOINT / "snapshots" / "untrained", DEFAULT_CHECKPOINT / "snapshots" / "early"]
    for folder in [tmp_path / "half", tmp_path / "full", tmp_path / "seeded", *shipped]:
        model = load_checkpoint(folder, device="cpu").model
        dtypes = {tensor.dtype for tensor in [*model.parameters(), *model.buffers()] if tensor.is_floating_point()}
        assert dtypes == {torch.float32}, folder
        assert not model.training, folder
    half, seeded = (load_checkpoint(tmp_path / name, device="cpu").model for name in ("half", "seeded"))
    for (name, a), b in zip(half.state_dict().items(), seeded.state_dict().values(), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b), name  # the same fp16 values, in float32


# --- devices, files and messages a user reads, the checkpoints folder (the mutation-testing survivors) ---


def fake_devices(monkeypatch, cuda: bool, mps: bool) -> None:
    """Make CUDA and MPS (un)available, whatever this machine has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize("cuda,mps,expected", [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")])
def test_auto_device_prefers_cuda_then_mps_then_the_cpu(monkeypatch, cuda, mps, expected):
    fake_devices(monkeypatch, cuda, mps)
    assert resolve_device() == (torch.device(expected), [])
    assert resolve_device("Auto") == (torch.device(expected), [])


def test_auto_device_on_a_pytorch_without_mps_is_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch, "backends", types.SimpleNamespace())  # PyTorch before 1.12 has no torch.backends.mps
    assert resolve_device("auto") == (torch.device("cpu"), [])


@pytest.mark.parametrize("requested", ["cuda", "CUDA:1", "mps", "Mps"])
def test_a_missing_device_falls_back_to_the_cpu_with_a_notice(monkeypatch, requested):
    fake_devices(monkeypatch, cuda=False, mps=False)
    device, notices = resolve_device(requested)
    assert device == torch.device("cpu") and len(notices) == 1
    assert re.match(rf"{requested[:4].upper().rstrip(':')} was requested .*not available.* CPU", notices[0])


@pytest.mark.parametrize("requested,expected", [("cpu", "cpu"), ("CUDA:1", "cuda:1"), ("MPS", "mps")])
def test_an_available_device_is_used_as_asked_in_any_case(monkeypatch, requested, expected):
    fake_devices(monkeypatch, cuda=True, mps=True)
    assert resolve_device(requested) == (torch.device(expected), [])


def test_load_checkpoint_names_the_translator_and_passes_on_its_device_and_notices(monkeypatch, tiny_checkpoint):
    fake_devices(monkeypatch, cuda=False, mps=False)
    translator = load_checkpoint(tiny_checkpoint)  # device "auto"
    assert translator.device == torch.device("cpu") and translator.notices == []
    assert translator.name == "tiny-en-de" and translator.card.source_language == "en"
    fallback = load_checkpoint(tiny_checkpoint, device="cuda")
    assert fallback.device == torch.device("cpu") and len(fallback.notices) == 1 and "CUDA" in fallback.notices[0]


def test_config_problems_start_with_the_config_file(checkpoint_copy):
    config = checkpoint_copy / "config.json"
    for content, words in (
        ("[1, 2]", "expected a JSON object"),
        ('{"d_model": 3}', "src_vocab_size"),
        (None, "missing"),
    ):
        if content is None:
            config.unlink()
        else:
            config.write_text(content)
        with pytest.raises(CheckpointError) as error:
            build_model(checkpoint_copy)
        assert str(error.value).startswith(f"{config}: ") and words in str(error.value), content


def test_a_special_id_the_tokenizer_does_not_use_is_named(checkpoint_copy):
    config = json.loads((checkpoint_copy / "config.json").read_text())
    config["pad_id"] = 5
    (checkpoint_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as error:
        build_model(checkpoint_copy)
    assert str(error.value).startswith(f"{checkpoint_copy / 'config.json'}: pad_id=5 ")
    assert "source tokenizer uses 0" in str(error.value)


def marian_checkpoint(folder, toy_tokenizer, **config_changes):
    """A checkpoint whose tokenizer is in Marian mode (source.spm, target.spm, vocab.json), built from the toy
    tokenizer's pieces, with config.json changed as given."""
    processor = toy_tokenizer.source
    vocab = {processor.id_to_piece(index): index for index in range(processor.get_piece_size())}
    model = random_model(len(vocab), seed=0)
    save_checkpoint(folder, model, Tokenizer(processor, processor, vocab))
    config = {**json.loads((folder / "config.json").read_text()), **config_changes}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_unk_id_is_checked_against_a_marian_vocabulary_only(tmp_path, toy_tokenizer, checkpoint_copy):
    marian = marian_checkpoint(tmp_path / "marian", toy_tokenizer, unk_id=5)
    with pytest.raises(CheckpointError, match=r"config\.json: unk_id=5 but the source tokenizer uses 1"):
        build_model(marian)
    config = json.loads((checkpoint_copy / "config.json").read_text())
    (checkpoint_copy / "config.json").write_text(json.dumps({**config, "unk_id": 5}))
    build_model(checkpoint_copy)  # SentencePiece ids: decoding keeps <unk>, so its id is not checked


def test_a_vocabulary_mismatch_names_every_tokenizer_file(tmp_path, toy_tokenizer):
    marian = marian_checkpoint(tmp_path / "marian", toy_tokenizer, src_vocab_size=90, tgt_vocab_size=90)
    with pytest.raises(CheckpointError) as error:
        build_model(marian)
    assert str(error.value).startswith(f"{marian / 'source.spm/target.spm/vocab.json'}: source vocabulary has 80")


def test_missing_weights_without_a_seed_are_named(checkpoint_copy):
    (checkpoint_copy / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors: file is missing"):
        build_model(checkpoint_copy)


def test_only_a_folder_or_a_pickle_is_taken_for_a_checkpoint(checkpoint_copy):
    torch.save({"step": 1}, checkpoint_copy / "optimizer.pt")  # beside safetensors weights: left alone
    assert load_checkpoint(checkpoint_copy, device="cpu").name == "copy"
    for path in (checkpoint_copy / "config.json", checkpoint_copy / "missing.pt"):
        with pytest.raises(CheckpointError, match="not a checkpoint folder"):
            load_checkpoint(path)


def test_weights_missing_a_layer_config_asks_for_are_refused(checkpoint_copy):
    config = json.loads((checkpoint_copy / "config.json").read_text())
    (checkpoint_copy / "config.json").write_text(json.dumps({**config, "final_norm": True}))
    with pytest.raises(
        CheckpointError, match=r"(?s)model\.safetensors: weights do not match.*Missing key.*encoder\.norm"
    ):
        build_model(checkpoint_copy)


def test_loaded_models_need_no_gradients(tmp_path, toy_tokenizer, tiny_checkpoint):
    untrained = initial_model(small_config(toy_tokenizer.vocab_size("source")), seed=5)
    seeded = save_checkpoint(tmp_path / "seeded", untrained, toy_tokenizer, half=True, initial_seed=5)
    for folder in (tiny_checkpoint, seeded):
        model, _ = build_model(folder)
        assert not any(parameter.requires_grad for parameter in model.parameters()), folder


def test_saving_again_into_a_folder_replaces_its_checkpoint(tmp_path, toy_tokenizer):
    untrained = initial_model(small_config(toy_tokenizer.vocab_size("source")), seed=5)
    folder = save_checkpoint(tmp_path / "m", untrained, toy_tokenizer, half=True)
    assert (folder / "model.safetensors").is_file()
    save_checkpoint(folder, untrained, toy_tokenizer, half=True, initial_seed=5)  # now stored as its seed
    assert not (folder / "model.safetensors").exists()
    recipe = read_card(folder).initial_weights
    assert (recipe.seed, recipe.dtype) == (5, "float16")
    assert load_checkpoint(folder, device="cpu").config == untrained.config


def test_weights_record_their_dtype_and_config_json_is_indented(tmp_path, toy_tokenizer):
    model = random_model(toy_tokenizer.vocab_size("source"), seed=0)
    for half, dtype in ((False, "float32"), (True, "float16")):
        folder = save_checkpoint(tmp_path / dtype, model, toy_tokenizer, half=half)
        with safetensors.safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
            assert handle.metadata()["dtype"] == dtype
            assert {handle.get_tensor(name).dtype for name in handle.keys()} == {getattr(torch, dtype)}
        assert (folder / "config.json").read_text().startswith('{\n  "')  # one key a line: readable diffs


def test_scan_checkpoints_lists_sub_folders_by_name_with_their_cards_or_errors(tmp_path, tiny_checkpoint):
    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoint, root / "b-good")
    shutil.copytree(tiny_checkpoint, root / ".b-hidden")
    shutil.copytree(tiny_checkpoint, root / "c-no-weights")
    (root / "c-no-weights" / "model.safetensors").unlink()
    (root / "a-no-config").mkdir()
    (root / "notes.txt").write_text("not a checkpoint")
    entries = scan_checkpoints(root)
    assert [entry.name for entry in entries] == ["a-no-config", "b-good", "c-no-weights"]
    assert [entry.path for entry in entries] == [str(root / entry.name) for entry in entries]
    no_config, good, no_weights = entries
    assert good.error == "" and good.card.source_language == "en"
    assert no_config.error.startswith(str(root / "a-no-config" / "config.json")) and "missing" in no_config.error
    assert no_weights.error.startswith(str(root / "c-no-weights" / "model.safetensors"))
    assert "missing" in no_weights.error and no_weights.card == Card()
    assert scan_checkpoints(tmp_path / "nowhere") == []


def change_tensors(weights, change) -> None:
    """Rewrite the safetensors file ``weights`` with ``change(tensors)`` applied to its name -> tensor dict."""
    with safetensors.safe_open(str(weights), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    change(tensors)
    safetensors.torch.save_file(tensors, str(weights))


BIAS = "encoder.layers.0.self_attn.q_proj.bias"
SHARED = "decoder.embed.embedding.weight"  # the name safetensors kept of the table three modules share
WEIGHTS_THAT_DO_NOT_LOAD = {  # changes of the tiny checkpoint's weights file that a strict load refuses
    "truncated": lambda weights: weights.write_bytes(weights.read_bytes()[:-1]),
    "a byte too many": lambda weights: weights.write_bytes(weights.read_bytes() + b"\0"),
    "not safetensors": lambda weights: weights.write_bytes(b"garbage"),
    "a tensor missing": lambda weights: change_tensors(weights, lambda tensors: tensors.pop(BIAS)),
    "a tensor too many": lambda weights: change_tensors(weights, lambda tensors: tensors.update(extra=torch.zeros(2))),
    "a shape changed": lambda weights: change_tensors(
        weights, lambda tensors: tensors.update({BIAS: tensors[BIAS][1:]})
    ),
    "a shared table stored twice": lambda weights: change_tensors(
        weights, lambda tensors: tensors.update({"generator.weight": tensors[SHARED].clone()})
    ),
    "a shared table stored under no name": lambda weights: change_tensors(weights, lambda tensors: tensors.pop(SHARED)),
}


@pytest.mark.parametrize("change", WEIGHTS_THAT_DO_NOT_LOAD.values(), ids=WEIGHTS_THAT_DO_NOT_LOAD.keys())
def test_the_header_check_refuses_what_a_strict_load_refuses_and_says_so_as_loading_does(checkpoint_copy, change):
    weights = checkpoint_copy / "model.safetensors"
    change(weights)
    with pytest.raises((RuntimeError, safetensors.SafetensorError)):  # safetensors' own strict load: the reference
        safetensors.torch.load_model(Transformer(read_config(checkpoint_copy)), str(weights), strict=True)
    with pytest.raises(CheckpointError) as checked:
        check_checkpoint(checkpoint_copy)
    with pytest.raises(CheckpointError) as loaded:
        build_model(checkpoint_copy)
    assert str(checked.value) == str(loaded.value) and str(checked.value).startswith(f"{weights}: ")


def test_the_header_check_takes_every_shipped_checkpoint_and_reads_no_weights(monkeypatch, tmp_path, toy_tokenizer):
    untrained = initial_model(small_config(toy_tokenizer.vocab_size("source")), seed=5)
    seeded = save_checkpoint(tmp_path / "seeded", untrained, toy_tokenizer, half=True, initial_seed=5)
    monkeypatch.setattr(checkpoint_module, "load_model", lambda *args, **kwargs: pytest.fail("weights were read"))
    shipped = REPO / "checkpoints"
    for folder in (*sorted(path for path in shipped.iterdir() if path.is_dir()), seeded):
        check_checkpoint(folder)
    assert {entry.error for entry in scan_checkpoints(shipped)} == {""}


def test_find_snapshots_leaves_out_hidden_stages(tmp_path):
    for stage in ("mid", ".partial", "early"):
        (tmp_path / "m" / "snapshots" / stage).mkdir(parents=True)
        (tmp_path / "m" / "snapshots" / stage / "config.json").write_text("{}")
    assert list(find_snapshots(tmp_path / "m")) == ["early", "mid", "final"]
