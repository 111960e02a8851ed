"""python -m model.translate on arguments and stdin; --help of every command-line entry point."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest
import torch

from model import translate
from model.checkpoint import load_checkpoint
from model.decoding import Sampling
from model.interop import convert
from model.training import evaluate, options, toy_tasks, train
from tests.helpers import REPO

MAX_LEN = 12  # the random model never stops by itself; a fixed limit keeps its outputs short and batch-independent


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "model.translate", *args]
    return subprocess.run(command, cwd=REPO, env=env, input=stdin, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def expected(tiny_checkpoint):
    """Greedy translations by the library, one sentence at a time."""
    torch.set_num_threads(1)
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    return lambda text: translator.translate(text, beam_size=1, max_new_tokens=MAX_LEN)


def test_translates_text_arguments(tiny_checkpoint, expected, capsys):
    texts = ["a dog runs in the park.", "two girls sit on a red bike."]
    options = ("--device", "cpu", "--beam", "1", "--max-new-tokens", str(MAX_LEN))
    translate.main(["--checkpoint", str(tiny_checkpoint), *options, *texts])
    out = capsys.readouterr().out
    assert out.splitlines() == [expected(text) for text in texts]
    assert all(line.strip() for line in out.splitlines())


def test_translates_stdin_lines_and_keeps_blank_lines(tiny_checkpoint, expected):
    """The command as a person runs it, in a process of its own, reading a pipe (the other tests call its main)."""
    lines = ["the man plays with a ball.", "", "an old woman walks."]
    result = run_cli(
        "--checkpoint", str(tiny_checkpoint), "--device", "cpu", "--beam", "1", "--max-new-tokens", str(MAX_LEN),
        "--batch-size", "1",
        stdin="".join(line + "\n" for line in lines),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [expected(lines[0]), "", expected(lines[2])]


def test_sampling_options_draw_what_the_library_draws_and_bad_ones_are_refused(tiny_checkpoint, capsys):
    translator = load_checkpoint(tiny_checkpoint, device="cpu")
    text = "a dog runs in the park."
    common = ["--checkpoint", str(tiny_checkpoint), "--device", "cpu", "--max-new-tokens", str(MAX_LEN)]
    translate.main([*common, "--sample", "--temperature", "1.5", "--top-k", "5", "--seed", "4", text])
    sampling = Sampling(temperature=1.5, top_k=5, seed=4)
    drawn = translator.translate(text, max_new_tokens=MAX_LEN, sampling=sampling)
    assert capsys.readouterr().out.splitlines() == [drawn]
    for bad, message in (
        (["--sample", "--temperature", "0"], "temperature must be a number above 0"),
        (["--sample", "--top-p", "1.5"], "top_p must be above 0 and at most 1"),
        (["--sample", "--seed", "-2"], "seed must be a whole number"),
        (["--top-p", "0.5", "--seed", "1"], "--top-p, --seed only apply with --sample"),
    ):
        with pytest.raises(SystemExit):
            translate.main([*common, *bad, text])
        assert message in capsys.readouterr().err, bad


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback notice needs a machine without CUDA")
def test_missing_gpu_falls_back_with_a_notice_on_stderr(tiny_checkpoint, expected, capsys):
    options = ("--device", "cuda", "--beam", "1", "--max-new-tokens", str(MAX_LEN))
    translate.main(["--checkpoint", str(tiny_checkpoint), *options, "a cat."])
    printed = capsys.readouterr()
    assert "CUDA was requested but is not available" in printed.err
    assert printed.out.splitlines() == [expected("a cat.")]  # stdout holds only the translation


def test_unusable_checkpoint_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        translate.main(["--checkpoint", str(tmp_path / "missing"), "hello"])
    assert exit_info.value.code == 2
    printed = capsys.readouterr()
    assert "missing: not a checkpoint folder" in printed.err
    assert printed.out == ""


COMMANDS = {  # command -> (its parser, its main)
    "model.train": (options.build_parser, train.main),
    "model.evaluate": (evaluate.build_parser, evaluate.main),
    "model.translate": (translate.build_parser, translate.main),
    "model.training.toy_tasks": (toy_tasks.build_parser, toy_tasks.main),
    "model.interop.convert": (convert.build_parser, convert.main),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_help_explains_every_option(command, capsys):
    build_parser, main = COMMANDS[command]
    parser = build_parser()
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines; compare with single spaces
    assert text.startswith(f"usage: python -m {command}")
    actions = [action for action in parser._actions if not isinstance(action, argparse._HelpAction)]
    assert actions
    for action in actions:
        name = action.option_strings[0] if action.option_strings else action.metavar or action.dest
        assert action.help and action.help.strip() and action.help != argparse.SUPPRESS, f"{name} has no help"
        assert name in text, name
        shown = parser._get_formatter()._expand_help(action)  # with %(default)s filled in
        assert " ".join(shown.split()[:4]) in text, f"help of {name} is not shown"
