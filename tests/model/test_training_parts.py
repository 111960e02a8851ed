"""The parts a training run is made of, each quick on its own: the resumable state (model.training.state), the
validation scores (model.training.validation), the single-process group (model.training.distributed) and the
arguments a run keeps (model.training.options).

model.train puts them together in tests/model/test_train.py, which trains and is in the slow tier.
"""

from __future__ import annotations

import json

import pytest
import sacrebleu
import torch

from model.training.data import encode_examples
from model.training.distributed import Run
from model.training.options import parse_arguments, run_arguments
from model.training.state import STATE_FILE, load_state, save_state
from model.training.validation import greedy_bleu
from model.transformer import Transformer
from tests.helpers import small_config, toy_sentences
from tests.marian_helpers import assert_validation_loss_is_per_sentence


def test_a_saved_state_restores_the_weights_the_optimiser_and_the_random_generator(tmp_path):
    torch.manual_seed(0)
    model = Transformer(small_config(12)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 7, 6, 5]])
    model(src, tgt).logsumexp(-1).sum().backward()
    optimizer.step()  # moments that are not zero
    path = tmp_path / STATE_FILE
    save_state(path, model, optimizer, step=7, epoch=3, batch_in_epoch=2, extra={"stopped": "--max-minutes"})
    assert path.is_file() and not path.with_suffix(".tmp").exists()  # written to a temporary file, then renamed
    next_draw = torch.rand(4)  # what the generator gives after the save

    restored = Transformer(small_config(12)).train()
    restored_optimizer = torch.optim.AdamW(restored.parameters(), lr=1e-2)
    assert load_state(path, restored, restored_optimizer) == (7, 3, 2, {"stopped": "--max-minutes"})
    assert torch.equal(torch.rand(4), next_draw)  # the generator is back where it was saved
    for name, value in model.state_dict().items():
        assert torch.equal(restored.state_dict()[name], value), name
    saved, loaded = optimizer.state_dict()["state"], restored_optimizer.state_dict()["state"]
    assert saved.keys() == loaded.keys()
    for index, moments in saved.items():
        for key, value in moments.items():
            assert torch.equal(loaded[index][key], value), (index, key)


def test_validation_loss_is_the_mean_cross_entropy_per_target_token(translator):
    sentences = toy_sentences(12, seed=3)
    examples = encode_examples(
        list(zip(sentences, sentences[::-1], strict=True)), translator.tokenizer, translator.config
    )
    assert_validation_loss_is_per_sentence(translator, examples)


def test_greedy_bleu_scores_the_greedy_translations_against_the_targets(translator):
    sources = toy_sentences(6, seed=4)
    greedy = translator.translate_batch(sources, beam_size=1)
    assert greedy_bleu(translator, list(zip(sources, greedy, strict=True))) == pytest.approx(100.0)
    others = toy_sentences(6, seed=5)
    expected = sacrebleu.corpus_bleu(greedy, [others]).score
    assert greedy_bleu(translator, list(zip(sources, others, strict=True))) == expected < 100.0


def test_a_single_process_run_is_the_main_one_and_its_collectives_change_nothing(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    run = Run("cpu")
    assert (run.world, run.rank, run.main, run.device) == (1, 0, True, torch.device("cpu"))
    run.barrier()
    assert run.all_sum(2.5) == 2.5 and run.broadcast({"epoch": 3}) == {"epoch": 3}


def test_a_resume_refuses_a_run_saved_by_an_older_model_train_and_says_what_to_do(tmp_path):
    """A run folder whose args.json lacks an option of today's model.train cannot be resumed as it was: the error
    names the missing option and the --init-from that continues from its weights."""
    out = tmp_path / "old-run"
    out.mkdir()
    new_run = parse_arguments(["--out", str(out), "--data", "somewhere"])
    run_arguments(new_run, out, write=True)
    (out / STATE_FILE).write_bytes(b"")  # the run has saved its state
    resumed = run_arguments(parse_arguments(["--out", str(out), "--resume"]), out, write=False)
    assert resumed.data == "somewhere" and resumed.resume

    saved = json.loads((out / "args.json").read_text())
    del saved["cpu_bf16"]
    (out / "args.json").write_text(json.dumps(saved))
    with pytest.raises(SystemExit, match=r"no --cpu-bf16.*--init-from"):
        run_arguments(parse_arguments(["--out", str(out), "--resume"]), out, write=False)
