"""model.evaluate reports exactly what sacreBLEU computes on the model's own translations."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest
import sacrebleu
import torch

from model.checkpoint import load_checkpoint
from model.decoding.scoring import Scoring
from model.training import evaluate as evaluate_module
from model.training.evaluate import evaluate
from tests.helpers import REPO, toy_sentences

# The random model never stops by itself. Without a fixed limit, a sentence's output length
# would follow the longest source in its batch (decoding's default limit is per batch).
MAX_LEN = 12


@pytest.fixture(scope="module")
def translator(tiny_checkpoint):
    torch.set_num_threads(1)
    return load_checkpoint(tiny_checkpoint, device="cpu")


def references_for(hypotheses: list[str]) -> list[str]:
    """References that score strictly between 0 and 100, and lower cased than lowercased.

    A third match exactly, a third differ only in case, a third lose their last word.
    """
    references = []
    for index, hypothesis in enumerate(hypotheses):
        words = hypothesis.split()
        if index % 3 == 1:
            references.append(hypothesis.upper())
        elif index % 3 == 2:
            references.append(" ".join(words[:-1] + ["zebra"]))
        else:
            references.append(hypothesis)
    return references


def sacrebleu_scores(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "bleu_lowercase": sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
    }


def test_evaluate_equals_sacrebleu_on_the_same_hypotheses(translator):
    sources = toy_sentences(12, seed=5)
    expected_hypotheses = [translator.translate(source, beam_size=1, max_new_tokens=MAX_LEN) for source in sources]
    assert all(h.strip() for h in expected_hypotheses)
    references = references_for(expected_hypotheses)

    # batch_size 5 splits the length-sorted sentences into 3 batches: the output must come back in input order
    result = evaluate(translator, sources, references, beam_size=1, batch_size=5, max_new_tokens=MAX_LEN)

    assert result["hypotheses"] == expected_hypotheses
    expected = sacrebleu_scores(expected_hypotheses, references)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-4), key
    assert 0 < result["bleu"] < result["bleu_lowercase"] < 100
    assert 0 < result["chrf"] < 100
    assert result["sentences"] == 12 and result["beam_size"] == 1
    assert "case:lc" in result["signatures"]["bleu_lowercase"]
    assert "tok:13a" in result["signatures"]["bleu"] and "case:mixed" in result["signatures"]["bleu"]


def test_a_larger_length_penalty_makes_the_shipped_models_beam_choose_longer_translations():
    """The option reaches the beam search: with alpha 2 the shipped En->De model's beam picks longer finished
    translations of these captions than with alpha 0 (ranked by raw log-probability), as translate_batch does."""
    translator = load_checkpoint(REPO / "checkpoints" / "multi30k-en-de", device="cpu")
    sources = [
        "A Boston Terrier is running on lush green grass in front of a white fence.",
        "A girl in karate uniform breaking a stick with a front kick.",
        "A boy in a red uniform is attempting to avoid getting out at home plate, while the catcher in the blue "
        "uniform is attempting to catch him.",
        "A man in an orange hat starring at something.",
    ]
    by_alpha = {
        alpha: evaluate(translator, sources, sources, beam_size=5, scoring=Scoring(alpha=alpha)) for alpha in (0.0, 2.0)
    }
    for alpha, result in by_alpha.items():
        assert result["length_penalty"] == alpha
        assert result["hypotheses"] == translator.translate_batch(sources, beam_size=5, scoring=Scoring(alpha=alpha))
    lengths = {alpha: result["bleu_details"]["hypothesis_length"] for alpha, result in by_alpha.items()}
    assert lengths[2.0] > lengths[0.0]


def test_evaluate_refuses_misaligned_references(translator):
    with pytest.raises(ValueError, match="3 source sentences but 2 references"):
        evaluate(translator, ["a dog.", "a cat.", "a man."], ["x", "y"], beam_size=1, batch_size=2)


def test_cli_prints_and_writes_the_scores(tiny_checkpoint, translator, tmp_path):
    sources = toy_sentences(4, seed=9)
    hypotheses = [translator.translate(source, beam_size=2, max_new_tokens=MAX_LEN) for source in sources]
    references = references_for(hypotheses)
    src = tmp_path / "test.en.gz"
    with gzip.open(src, "wt", encoding="utf-8") as handle:
        handle.write("".join(s + "\n" for s in sources))
    ref = tmp_path / "test.de"
    ref.write_text("".join(r + "\n" for r in references), encoding="utf-8")
    json_out, hyp_out = tmp_path / "scores.json", tmp_path / "test.hyp"

    command = [
        sys.executable, "-m", "model.evaluate", "--checkpoint", str(tiny_checkpoint), "--src", str(src),
        "--ref", str(ref), "--beam", "2", "--batch-size", "3", "--max-new-tokens", str(MAX_LEN), "--device", "cpu",
        "--json", str(json_out), "--hyp-out", str(hyp_out),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr

    lines = result.stdout.strip().splitlines()
    printed = json.loads(lines[-1])
    assert json.loads(json_out.read_text()) == printed
    written = hyp_out.read_text(encoding="utf-8").splitlines()
    assert written == hypotheses
    for key, value in sacrebleu_scores(written, references).items():
        assert printed[key] == pytest.approx(value, abs=1e-4), key
    assert printed["sentences"] == 4 and printed["beam_size"] == 2
    table = "\n".join(lines[:-1])
    assert "BLEU (cased, 13a)" in table and "BLEU (lowercased)" in table and "chrF" in table
    assert f"{printed['bleu']:.2f}" in table and f"{printed['chrf']:.2f}" in table
    assert "translating" in result.stderr  # the progress bar goes to stderr


def test_cli_names_missing_files_and_misaligned_lines(tiny_checkpoint, tmp_path, capsys):
    ref = tmp_path / "ref.txt"
    ref.write_text("one\ntwo\n")
    missing = tmp_path / "nowhere.en"
    with pytest.raises(SystemExit) as exit_info:
        evaluate_module.main(["--checkpoint", str(tiny_checkpoint), "--src", str(missing), "--ref", str(ref)])
    assert exit_info.value.code == 2
    assert f"--src {missing}: file not found" in capsys.readouterr().err

    src = tmp_path / "src.txt"
    src.write_text("a dog.\n")
    with pytest.raises(SystemExit) as exit_info:
        evaluate_module.main(["--checkpoint", str(tiny_checkpoint), "--src", str(src), "--ref", str(ref)])
    assert exit_info.value.code == 2
    assert f"--src {src} has 1 lines but --ref {ref} has 2" in capsys.readouterr().err

    with pytest.raises(SystemExit):
        evaluate_module.main(["--checkpoint", str(tmp_path / "no-model"), "--src", str(src), "--ref", str(src)])
    assert "no-model" in capsys.readouterr().err


def test_card_split_records_scores_and_keeps_the_card(tiny_checkpoint, tmp_path):
    import shutil

    from model.card import TrainingRun
    from model.checkpoint import read_card
    from model.training.evaluate import main

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, folder)
    src, ref = tmp_path / "s.en", tmp_path / "r.de"
    src.write_text("a man rides a bike.\ntwo dogs play.\n", encoding="utf-8")
    ref.write_text("ein mann fährt rad.\nzwei hunde spielen.\n", encoding="utf-8")
    result = main(
        [
            "--checkpoint",
            str(folder),
            "--src",
            str(src),
            "--ref",
            str(ref),
            "--beam",
            "2",
            "--device",
            "cpu",
            "--max-new-tokens",
            "6",
            "--quiet",
            "--card-split",
            "val",
            "--length-penalty",
            "1.0",
        ]
    )
    card = read_card(folder)
    assert card.source_language == "en" and card.data == "random weights (tests)"  # the rest of the card survives
    assert card.scores["val"].bleu == result["bleu"]
    assert card.scores["val"].length_penalty == result["length_penalty"] == 1.0
    assert card.scores["val"].bleu_lowercase == result["bleu_lowercase"]
    assert card.history is None  # a card without a training history does not get one from scores alone

    card.history = [TrainingRun(command="first run"), TrainingRun(command="continued run")]
    card.save(folder)
    main(["--checkpoint", str(folder), "--src", str(src), "--ref", str(ref), "--beam", "1", "--device", "cpu"]
         + ["--max-new-tokens", "6", "--quiet", "--card-split", "test"])  # fmt: skip
    history = read_card(folder).history
    assert history[0].scores is None and history[1].scores["test"].beam_size == 1  # the run that made them


def test_by_rarest_word_scores_each_group_of_sentences(tiny_checkpoint, translator, tmp_path, capsys):
    import shutil

    from model.analysis.domain import SourceWords

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, folder)
    sources = ["a man rides a bike.", "two dogs play.", "a man sleeps."]
    hypotheses = [translator.translate(source, beam_size=1, max_new_tokens=6) for source in sources]
    references = references_for(hypotheses)
    src, ref = tmp_path / "s.en", tmp_path / "r.de"
    src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    ref.write_text("".join(r + "\n" for r in references), encoding="utf-8")
    argv = ["--checkpoint", str(folder), "--src", str(src), "--ref", str(ref), "--beam", "1", "--device", "cpu",
            "--max-new-tokens", "6", "--quiet", "--by-rarest-word"]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        evaluate_module.main(argv)
    assert exit_info.value.code == 2
    assert "source_words.json is missing" in capsys.readouterr().err

    SourceWords(10, {"a": 20, "man": 20, "rides": 2, "bike": 5, "two": 7, "dogs": 7, "play": 7}).save(folder)
    result = evaluate_module.main(argv)
    expected = [("0", [2]), ("2-3", [0]), ("4-10", [1])]  # "sleeps" never seen, "rides" twice, "two dogs play" 7
    assert [(group["rarest_word_seen"], group["sentences"]) for group in result["by_rarest_word"]] == [
        (seen, len(members)) for seen, members in expected
    ]
    for group, (_, members) in zip(result["by_rarest_word"], expected, strict=True):
        hyps, refs = [hypotheses[i] for i in members], [references[i] for i in members]
        assert group["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=0.01)
    printed = capsys.readouterr().out
    assert "rarest word seen" in printed and "2-3 times" in printed
