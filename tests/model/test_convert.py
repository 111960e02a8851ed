"""model.interop.convert: pickled weights become a safe checkpoint with identical outputs."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch

from model import Transformer, load_checkpoint
from model.checkpoint import CheckpointError
from model.interop import Seq2SeqTransformer
from model.interop.convert import convert, main
from model.interop.torch_transformer import tutorial_logits
from tests.helpers import small_config


@pytest.fixture
def files(tmp_path, toy_tokenizer):
    torch.manual_seed(0)
    config = small_config(toy_tokenizer.vocab_size("source"))
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    toy_tokenizer.save(tmp_path)
    return tmp_path, config


def test_our_state_dict_converts_to_identical_outputs(files):
    folder, config = files
    model = Transformer(config).eval()
    torch.save(model.state_dict(), folder / "model.pt")
    main(
        [
            "--weights",
            str(folder / "model.pt"),
            "--config",
            str(folder / "config.json"),
            "--tokenizer-dir",
            str(folder),
            "--out",
            str(folder / "converted"),
        ]
    )
    loaded = load_checkpoint(folder / "converted", device="cpu").model
    src, tgt = torch.randint(4, 80, (2, 6)), torch.randint(4, 80, (2, 5))
    with torch.inference_mode():
        assert torch.equal(loaded(src, tgt), model(src, tgt))


def test_tutorial_state_dict_converts(files):
    folder, config = files
    tutorial = Seq2SeqTransformer(config).eval()
    torch.save(tutorial.state_dict(), folder / "tutorial.pth")
    translator_folder = convert(folder / "tutorial.pth", folder / "config.json", folder, folder / "from-tutorial")
    loaded = load_checkpoint(translator_folder, device="cpu").model
    src, tgt = torch.randint(4, 80, (2, 6)), torch.randint(4, 80, (2, 5))
    with torch.inference_mode():
        assert torch.allclose(loaded(src, tgt), tutorial_logits(tutorial, src, tgt, config.pad_id), atol=1e-5)


class Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_a_pickle_with_code_is_refused(files):
    folder, _ = files
    with open(folder / "evil.pt", "wb") as handle:
        pickle.dump({"weights": Exploit()}, handle)
    with pytest.raises(CheckpointError, match="evil.pt: cannot be read as plain tensors"):
        convert(folder / "evil.pt", folder / "config.json", folder, folder / "out")
    assert not (folder / "out").exists()
