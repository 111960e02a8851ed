"""model.train end to end on a toy task: learning, exact resume, and DDP agreeing with one process.

The task reverses sequences of 3-8 symbols ("c a f d" -> "d f a c") with a word-level
tokenizer, small enough to learn in about fifteen seconds on one CPU thread. One reference
run (module fixture) serves the tests that compare with it: the resumed run and the
two-process run must reproduce its per-epoch metrics, a --cpu-bf16 run must follow them.
Every test here runs training, so the module is in the slow tier; one training step on its own
is tested in tests/model/test_optimization.py (fast).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model.analysis.domain import SourceWords
from model.checkpoint import load_checkpoint, read_card
from model.training import train as train_module
from model.training.data import Example, read_lines, token_batches
from model.training.state import SAMPLED_FILE
from tests.helpers import REPO

pytestmark = pytest.mark.slow

SYMBOLS = "abcdefgh"
EPOCHS = 18  # with room over every level the first test asks; fewer come near its 95% exact match
RESUMED_EPOCHS = 6  # where the resume test's run ends: far enough for a resumed mistake to show in the losses
SEED = 1
MAX_TOKENS = 800
# One training pair far longer than the rest is sorted into a batch of its own, so under
# two processes one rank gets no sentence for that step (the case train.py must survive).
OUTLIER = " ".join(SYMBOLS * 2)
TRAIN_OPTIONS = [
    "--src-lang", "src", "--tgt-lang", "tgt",
    "--tokenizer-type", "word", "--vocab-size", "20",
    "--layers", "2", "--d-model", "64", "--heads", "4", "--d-ff", "128", "--dropout", "0", "--max-len", "32",
    "--max-tokens", str(MAX_TOKENS), "--lr", "2e-3", "--warmup", "100", "--seed", str(SEED),
    "--keep-last", "5", "--patience", "1000", "--valid-bleu-limit", "50", "--snapshot-steps", "0",
    "--device", "cpu", "--threads", "1", "--quiet",
]  # fmt: skip
# Per-epoch metrics that are pure functions of the weights (timings are not).
COMPARED = ("step", "train_loss", "valid_loss")


def reverse_pairs(count: int, seed: int, exclude: set[tuple[str, ...]]) -> list[tuple[str, str]]:
    """count distinct sequences not in exclude (which grows), each with its reversal."""
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    while len(pairs) < count:
        sequence = tuple(rng.choice(SYMBOLS) for _ in range(rng.randint(3, 8)))
        if sequence in exclude:
            continue
        exclude.add(sequence)
        pairs.append((" ".join(sequence), " ".join(reversed(sequence))))
    return pairs


def write_split(folder: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    (folder / f"{split}.src").write_text("".join(s + "\n" for s, _ in pairs))
    (folder / f"{split}.tgt").write_text("".join(t + "\n" for _, t in pairs))


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """train (3000 + the outlier), val (200) and test (200) pairs; no sequence occurs twice."""
    folder = tmp_path_factory.mktemp("reverse-task")
    seen: set[tuple[str, ...]] = set()
    train = reverse_pairs(3000, 1, seen) + [(OUTLIER, " ".join(reversed(OUTLIER.split())))]
    write_split(folder, "train", train)
    write_split(folder, "val", reverse_pairs(200, 2, seen))
    write_split(folder, "test", reverse_pairs(200, 3, seen))
    return folder


@pytest.fixture(scope="module")
def reference_run(corpus, tmp_path_factory) -> Path:
    """One uninterrupted single-process run of EPOCHS epochs."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("runs") / "reference"
    train_module.main(["--data", str(corpus), "--out", str(out), "--epochs", str(EPOCHS), *TRAIN_OPTIONS])
    return out


def test_training_learns_the_reverse_task(reference_run, corpus):
    metrics = read_metrics(reference_run)
    assert [m["epoch"] for m in metrics] == list(range(1, EPOCHS + 1))
    losses = [m["train_loss"] for m in metrics]
    # Label smoothing 0.1 over ~12 classes puts the floor near 0.5; an untrained model starts near ln(12) = 2.5.
    assert losses[0] > 2.0
    assert max(losses[-3:]) < 0.7
    assert all(later < earlier for earlier, later in zip(losses[:5], losses[1:6], strict=True)), losses[:6]
    assert metrics[-1]["valid_loss"] < 0.3 * metrics[0]["valid_loss"]

    translator = load_checkpoint(reference_run / "final", device="cpu")
    sources, references = read_lines(corpus / "test.src"), read_lines(corpus / "test.tgt")
    hypotheses = translator.translate_batch(sources, beam_size=1)
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(references)
    wrong = [(s, h) for s, h, r in zip(sources, hypotheses, references, strict=True) if h != r]
    assert exact >= 0.95, f"{exact:.1%} exact on held-out sequences; e.g. {wrong[:5]}"
    card = read_card(reference_run / "final")
    assert card.averaged_epochs and card.valid_bleu_greedy > 90
    assert card.final_weights == f"the average of {card.averaged_epochs[0]}-{card.averaged_epochs[-1]}"
    assert card.config == json.loads((reference_run / "final" / "config.json").read_text())  # the files' own
    # the training source's words, counted for the page's "barely seen" line
    assert SourceWords.load(reference_run / "final") == SourceWords.count(read_lines(corpus / "train.src"))


def test_the_untrained_snapshot_is_stored_as_the_runs_seed(reference_run):
    """Step 0's snapshot holds the run's seed and its weights' digest instead of the weights; loading rebuilds them
    from the seed and checks the digest, so a snapshot that loads is the run's initial model."""
    snapshot = reference_run / "snapshots" / "untrained"
    assert not (snapshot / "model.safetensors").exists()
    card = read_card(snapshot)
    assert card.step == 0 and card.initial_weights.seed == SEED
    untrained = load_checkpoint(snapshot, device="cpu").model
    assert card.parameters == untrained.num_parameters()


def test_resume_continues_where_the_run_stopped(reference_run, corpus, tmp_path, capsys):
    """Stop at an epoch boundary, then one step into the next epoch, then go on to epoch RESUMED_EPOCHS: the same run
    as the reference's first epochs.

    Dropout is 0, the data order depends only on seed and epoch, and the learning rate on the step alone (no
    cool-down), so the resumed run must repeat the reference's arithmetic exactly; each epoch's step, training loss
    and validation loss (pure functions of the weights) are compared with a relative tolerance of 1e-6 (they come
    out bit-identical on one thread). The run stops well before the reference's last epoch: a weight the resume got
    wrong changes the validation loss of every epoch after it.
    """
    torch.set_num_threads(1)
    out = tmp_path / "resumed"
    common = ["--data", str(corpus), "--out", str(out), *TRAIN_OPTIONS]
    train_module.main([*common, "--epochs", "2"])
    steps_per_epoch = read_metrics(out)[0]["step"]
    assert [m["epoch"] for m in read_metrics(out)] == [1, 2]

    with pytest.raises(SystemExit, match="already holds a run"):
        train_module.main([*common, "--epochs", "3"])

    # 1e-9 minutes: the clock runs out after the first step of epoch 3, mid-epoch.
    stop_early = ["--max-minutes", "1e-9", "--device", "cpu", "--quiet"]
    train_module.main(["--out", str(out), "--resume", "--epochs", str(RESUMED_EPOCHS), *stop_early])
    state = torch.load(out / "state.pt", map_location="cpu", weights_only=True)
    assert (state["epoch"], state["batch_in_epoch"], state["step"]) == (3, 1, 2 * steps_per_epoch + 1)
    assert len(read_metrics(out)) == 2
    assert read_card(out / "final").stopped == "--max-minutes reached in epoch 3"
    capsys.readouterr()

    resume = ["--out", str(out), "--resume", "--epochs", str(RESUMED_EPOCHS), "--device", "cpu", "--threads", "1"]
    train_module.main(resume)
    assert f"resuming at epoch 3, batch 1, step {2 * steps_per_epoch + 1}" in capsys.readouterr().err
    # the card says why this session ended, not the last one's --max-minutes
    card = read_card(out / "final")
    planned = f"stopped after its {RESUMED_EPOCHS} planned epochs (--epochs {RESUMED_EPOCHS})"
    assert card.stopped == card.history[-1].stopped == planned

    resumed, reference = read_metrics(out), read_metrics(reference_run)[:RESUMED_EPOCHS]
    assert [m["epoch"] for m in resumed] == list(range(1, RESUMED_EPOCHS + 1))
    for mine, theirs in zip(resumed, reference, strict=True):
        for key in COMPARED:
            assert mine[key] == pytest.approx(theirs[key], rel=1e-6), (mine["epoch"], key)


def test_two_process_ddp_matches_one_process(reference_run, corpus, tmp_path):
    """torchrun with 2 CPU processes (gloo) splits each batch in two; losses match the single process.

    Gradients are all-reduced sums of per-rank token sums divided by the global token count,
    so the two runs differ only in floating-point summation order. After epoch 1 (30 steps)
    train and validation losses must agree within 1e-4 relative (measured: 1e-7). Adam then
    amplifies rounding noise early in training (one process on 2 threads instead of 1 drifts
    by 7e-4 at epoch 2), so epoch 2 is held to 5e-3 (measured for DDP: 2e-4).
    """
    epochs = 2
    examples = [
        Example([0] * (len(s.split()) + 1), [0] * (len(s.split()) + 2)) for s in read_lines(corpus / "train.src")
    ]
    smallest = min(len(b) for e in range(1, epochs + 1) for b in token_batches(examples, MAX_TOKENS, SEED * 1000 + e))
    assert smallest == 1, "the corpus should give one rank an empty share of some batch"

    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "model.train", "--data", str(corpus), "--out", str(out), "--epochs", str(epochs), *TRAIN_OPTIONS,
    ]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=420)
    assert result.returncode == 0, result.stderr[-4000:]

    ddp, single = read_metrics(out), read_metrics(reference_run)[:epochs]
    assert [m["epoch"] for m in ddp] == list(range(1, epochs + 1))
    for mine, theirs, tolerance in zip(ddp, single, (1e-4, 5e-3), strict=True):
        assert mine["step"] == theirs["step"]
        for key in ("train_loss", "valid_loss"):
            assert mine[key] == pytest.approx(theirs[key], rel=tolerance), (mine["epoch"], key)
    assert (out / "final" / "model.safetensors").is_file()


def test_resume_can_change_the_batch_size_from_the_next_epoch_and_keeps_it(corpus, tmp_path):
    """--max-tokens given with --resume inside an epoch: that epoch ends with the batches it began with, the
    following ones use the new size, and later resumes keep it (and the --epochs given before)."""
    out = tmp_path / "run"
    base = ["--data", str(corpus), "--out", str(out), *TRAIN_OPTIONS]
    train_module.main([*base, "--epochs", "1"])
    steps_epoch_1 = read_metrics(out)[0]["step"]
    train_module.main(["--out", str(out), "--resume", "--epochs", "2", "--max-minutes", "1e-9", "--quiet"])
    train_module.main(["--out", str(out), "--resume", "--max-tokens", "400", "--quiet"])  # one step into epoch 2
    assert json.loads((out / "args.json").read_text())["max_tokens"] == 400
    assert [m["step"] for m in read_metrics(out)] == [steps_epoch_1, 2 * steps_epoch_1]  # epoch 2 as it began
    train_module.main(["--out", str(out), "--resume", "--epochs", "3", "--quiet"])
    metrics = read_metrics(out)
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    assert metrics[2]["step"] - metrics[1]["step"] > steps_epoch_1  # smaller batches: more steps in epoch 3


def test_resume_keeps_the_saved_plan_and_can_end_the_run_with_a_cooldown(corpus, tmp_path):
    """A resume keeps the run's --patience when not given again (not the option's default), and
    --cooldown-epochs given on it takes the learning rate linearly to 0 over the last epochs of the new --epochs."""
    out = tmp_path / "run"
    train_module.main(["--data", str(corpus), "--out", str(out), *TRAIN_OPTIONS, "--epochs", "1", "--patience", "7"])
    train_module.main(["--out", str(out), "--resume", "--epochs", "3", "--cooldown-epochs", "2", "--quiet"])
    saved = json.loads((out / "args.json").read_text())
    assert (saved["patience"], saved["epochs"], saved["cooldown_epochs"]) == (7, 3, 2)
    metrics = read_metrics(out)
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    steps = metrics[0]["step"]  # per epoch: the batch size did not change
    assert [m["step"] for m in metrics] == [steps, 2 * steps, 3 * steps]
    peak, warmup = 2e-3, 100  # TRAIN_OPTIONS' --lr and --warmup
    # each epoch's logged rate is its last step's: the warm-up/inverse-sqrt schedule times the cool-down's share
    # left at that step (the cool-down spans epochs 2 and 3, 2 * steps steps; step s starts after s - 1)
    for metric in metrics:
        step = metric["step"]
        share_left = min(1.0, (3 * steps - (step - 1)) / (2 * steps))
        assert metric["lr"] == pytest.approx(peak * min(step / warmup, (warmup / step) ** 0.5) * share_left, rel=1e-9)
    assert metrics[-1]["lr"] < peak / steps
    assert metrics[-1]["valid_loss"] < metrics[0]["valid_loss"]
    with pytest.raises(SystemExit):  # refused by the parser, before the run is touched
        train_module.main(["--out", str(out), "--resume", "--epochs", "4", "--cooldown-epochs", "-1"])
    assert len(read_metrics(out)) == 3


def test_init_from_continues_from_a_saved_checkpoint_and_keeps_its_history(corpus, tmp_path, capsys):
    """A new run started from a checkpoint's weights alone (fresh optimiser, short warm-up) starts at the
    checkpoint's loss, not an untrained one, and keeps improving; its card lists both runs."""
    torch.set_num_threads(1)
    first, second = tmp_path / "first", tmp_path / "continued"
    train_module.main(["--data", str(corpus), "--out", str(first), "--epochs", "3", *TRAIN_OPTIONS])
    before = read_metrics(first)
    start_card = read_card(first / "final")

    # the model options in TRAIN_OPTIONS are not used (the checkpoint's are); the later --lr and --warmup win
    continue_options = ["--data", str(corpus), "--out", str(second), "--init-from", str(first / "final")]
    continue_options += [*TRAIN_OPTIONS, "--epochs", "3", "--lr", "1e-3", "--warmup", "20"]
    train_module.main(continue_options)
    after = read_metrics(second)
    untrained_loss = before[0]["train_loss"]  # epoch 1 of the first run: what a model starting cold reaches
    assert after[0]["train_loss"] < 0.8 * untrained_loss
    assert after[0]["train_loss"] < 1.1 * before[-1]["train_loss"]  # where the checkpoint left off (fp16 weights)
    assert after[-1]["valid_loss"] < start_card.valid_loss  # and better than it
    assert [m["train_loss"] for m in after] == sorted((m["train_loss"] for m in after), reverse=True)
    assert (second / "tokenizer.model").read_bytes() == (first / "final" / "tokenizer.model").read_bytes()
    assert not (second / "snapshots" / "untrained").exists()  # a continued model is not untrained at its step 0

    card = read_card(second / "final")
    assert card.config == start_card.config  # the checkpoint's architecture, not the option defaults
    history = card.history
    assert [run.command for run in history] == [start_card.train_command, card.train_command]
    assert history[0].valid_bleu_greedy == start_card.valid_bleu_greedy
    assert history[1].init_from == str(first / "final") and history[1].epochs == 3
    assert history[1].steps == after[-1]["step"] and history[1].valid_bleu_greedy == card.valid_bleu_greedy

    with pytest.raises(SystemExit, match="--init-from starts a new run"):
        train_module.main(["--out", str(second), "--resume", "--init-from", str(first / "final")])
    swapped = [*continue_options, "--src-lang", "tgt", "--tgt-lang", "src"]
    swapped[swapped.index("--out") + 1] = str(tmp_path / "swapped")
    with pytest.raises(SystemExit, match="translates src -> tgt, not tgt -> src"):
        train_module.main(swapped)
    with pytest.raises(SystemExit, match="--init-from: .*config.json: file is missing"):
        train_module.main(["--data", str(corpus), "--out", str(tmp_path / "third"), "--init-from", str(tmp_path)])


def test_subword_sampling_draws_new_pieces_and_a_resume_in_another_process_trains_on_the_same(corpus, tmp_path, capsys):
    """--subword-sampling segments the training sentences anew every epoch, so the run differs from one on the best
    segmentation. SentencePiece draws differently in every process, so the epoch's draw is kept in the run folder:
    a run stopped one step into epoch 2 and resumed here, and its copy resumed in a new process, finish epoch 2
    identically. A value outside (0, 1] is refused as the options are parsed, a word tokenizer (it cannot sample) once
    it is built."""
    torch.set_num_threads(1)
    words = tmp_path / "words"
    words.mkdir()
    seen: set[tuple[str, ...]] = set()
    for split, count, seed in (("train", 600, 1), ("val", 100, 2)):  # one word a sentence: BPE has merges to skip
        pairs = reverse_pairs(count, seed, seen)
        write_split(words, split, [(source.replace(" ", ""), target.replace(" ", "")) for source, target in pairs])
    bpe = [*TRAIN_OPTIONS, "--tokenizer-type", "bpe", "--vocab-size", "40", "--data", str(words)]
    sampling = ["--subword-sampling", "0.2"]
    here, there = tmp_path / "resumed-here", tmp_path / "resumed-there"

    train_module.main(["--out", str(tmp_path / "best"), *bpe, "--epochs", "1"])
    train_module.main(["--out", str(here), *bpe, "--epochs", "1", *sampling])
    assert read_metrics(here)[0]["train_loss"] != pytest.approx(read_metrics(tmp_path / "best")[0]["train_loss"])

    stop_early = ["--max-minutes", "1e-9", "--device", "cpu", "--quiet"]  # one step into epoch 2
    train_module.main(["--out", str(here), "--resume", "--epochs", "2", *stop_early])
    drawn = torch.load(here / SAMPLED_FILE, weights_only=True)
    tokenizer = load_checkpoint(here / "final", device="cpu").tokenizer
    sources = read_lines(words / "train.src")
    assert drawn["epoch"] == 2 and [tokenizer.decode(src, "source") for src in drawn["src"]] == sources
    assert [src[:-1] for src in drawn["src"]] != [tokenizer.encode(source, "source") for source in sources]
    shutil.copytree(here, there)

    train_module.main(["--out", str(here), "--resume", "--epochs", "2", "--threads", "1", "--quiet"])
    command = [sys.executable, "-m", "model.train", "--out", str(there), "--resume", "--epochs", "2", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run([*command, "--quiet"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for mine, theirs in zip(read_metrics(there), read_metrics(here), strict=True):
        for key in COMPARED:
            assert mine[key] == pytest.approx(theirs[key], rel=1e-6), (mine["epoch"], key)

    capsys.readouterr()
    for wrong in ("-0.1", "1.5", "nan"):  # refused as the options are parsed: no tokenizer trained, no folder made
        with pytest.raises(SystemExit):
            train_module.main(["--out", str(tmp_path / "wrong"), *bpe, "--subword-sampling", wrong])
        assert (
            f"--subword-sampling: must be above 0 and at most 1 (0: off), not {float(wrong)}" in capsys.readouterr().err
        )
        assert not (tmp_path / "wrong").exists()
    with pytest.raises(SystemExit, match="--subword-sampling needs a BPE or unigram tokenizer"):
        train_module.main(["--data", str(corpus), "--out", str(tmp_path / "word"), *TRAIN_OPTIONS, *sampling])


def test_cpu_bf16_training_learns_as_the_fp32_reference_does(reference_run, corpus, tmp_path, monkeypatch, capsys):
    """The same run with --cpu-bf16 follows the fp32 reference's losses epoch by epoch within bf16's precision (it is
    not the same arithmetic), keeps the option for --resume, and its card's command says how it was trained. On a
    CPU without bf16 units (made so here) it says that bf16 will be slow."""
    for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, check, lambda: False, raising=False)
    torch.set_num_threads(1)
    out = tmp_path / "bf16"
    epochs = 6  # the first epoch after which both runs are below 0.3 of their first validation loss
    train_module.main(["--data", str(corpus), "--out", str(out), "--epochs", str(epochs), "--cpu-bf16", *TRAIN_OPTIONS])
    assert "neither AVX512-BF16 nor AMX" in capsys.readouterr().err
    ours, reference = read_metrics(out), read_metrics(reference_run)[:epochs]
    assert [m["step"] for m in ours] == [m["step"] for m in reference]

    def relative_differences(key: str, epochs: slice) -> list[float]:
        return [abs(a[key] - b[key]) / b[key] for a, b in zip(ours[epochs], reference[epochs], strict=True)]

    # measured: within 0.6% for 3 epochs; then the two runs cross the task's sudden drop in loss at slightly
    # different steps (train loss within 2%, validation loss within 7% in epochs 4-6; 12% and 54% apart by epochs 7-8)
    for key in ("train_loss", "valid_loss"):
        assert 0 < max(relative_differences(key, slice(0, 3))) < 0.02, key
    assert max(relative_differences("train_loss", slice(None))) < 0.15
    assert ours[-1]["valid_loss"] < 0.3 * ours[0]["valid_loss"]  # it learns the task, as the reference does
    assert json.loads((out / "args.json").read_text())["cpu_bf16"] is True
    assert "--cpu-bf16" in read_card(out / "final").train_command
