"""Shared fixtures: small random models and a tokenizer trained here on text the test writes, and the fixtures
that tests of several layers need (a module-scoped fixture gives each test module its own instance).

Plain helpers live in tests/helpers.py (small_config, toy_sentences, BAD_INPUTS), tests/app_helpers.py,
tests/browser_helpers.py and tests/marian_helpers.py.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

# One thread per xdist worker (and per server or script it starts), set before torch is imported: two workers on
# two cores that each start a thread per core spin against each other, and the suite takes far longer
# (docs/testing.md, "Two workers").
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    torch.set_num_threads(1)  # in case torch was imported before this file (a plugin)

from model import load_checkpoint
from model.checkpoint import save_checkpoint
from model.tokenizer import Tokenizer, train_sentencepiece
from model.trace import Trace
from model.translator import Translator
from tests.helpers import (
    DEFAULT_CHECKPOINT,
    DOG_BITES_MAN,
    HOSTILE,
    INTERNALS_SENTENCE,
    MAN_BITES_DOG,
    REPO,
    SHIPPED_MODELS,
    STATISTICS_SENTENCES,
    WORD_START,
    hand_trace,
    random_model,
    toy_sentences,
)
from tests.marian_helpers import (
    run_importer,
    transformers_or_skip,
    write_separate_tokenizer_files,
    write_tokenizer_files,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the files as the two workers should start them: those with a ``longest`` test, then those with slow
    tests, then the rest, each group by its number of tests (most first), the tests of a file in their own order.

    xdist hands out whole files in this order (``--no-loadscope-reorder`` in pyproject.toml): a file that runs for
    minutes handed out last would keep one worker busy long after the other has finished everything else.
    """

    def start_order(tests: list[pytest.Item]) -> tuple[bool, bool, int]:
        marked = {name for test in tests for name in ("longest", "slow") if test.get_closest_marker(name)}
        return "longest" not in marked, "slow" not in marked, -len(tests)

    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    items[:] = [item for tests in sorted(files.values(), key=start_order) for item in tests]


def pytest_configure(config: pytest.Config) -> None:
    """Scan the installed packages for Streamlit components once per test process, not once per AppTest.

    Every AppTest starts a runtime of its own, and each reads the metadata of every installed distribution looking
    for component manifests (streamlit.components.v2.manifest_scanner), a good share of a short AppTest's time with
    the test tools installed. A server scans once when it starts; the packages do not change while the tests run.
    """
    from streamlit.components.v2 import manifest_scanner

    manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)


@pytest.fixture(scope="session")
def toy_tokenizer() -> Tokenizer:
    return Tokenizer.from_model_bytes(train_sentencepiece(toy_sentences(400), vocab_size=80))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, toy_tokenizer) -> Path:
    """A random 2+2-layer model with the toy tokenizer saved as a checkpoint folder."""
    model = random_model(toy_tokenizer.vocab_size("source"), seed=0)
    folder = tmp_path_factory.mktemp("checkpoints") / "tiny-en-de"
    card = {"source_language": "en", "target_language": "de", "data": "random weights (tests)"}
    return save_checkpoint(folder, model, toy_tokenizer, card)


@pytest.fixture(scope="module")
def translator(tiny_checkpoint) -> Translator:
    """The tiny checkpoint loaded on the CPU (a module that needs another translator defines its own)."""
    return load_checkpoint(tiny_checkpoint, device="cpu")


@pytest.fixture(scope="session")
def browser_ready() -> None:
    """Skip a browser test where headless Chromium is missing; in CI (CI=true) a missing browser fails it."""
    from tests.browser_helpers import missing_browser

    reason = missing_browser()
    if reason and os.environ.get("CI") == "true":
        pytest.fail(f"browser tests must run in CI: {reason}")
    if reason:
        pytest.skip(reason)


@pytest.fixture
def handout_files(monkeypatch) -> dict:
    """The deferred download callables the page registers, by file name (called here as a click would)."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    registered: dict = {}
    original = MediaFileManager.add_deferred

    def add_deferred(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        registered[file_name] = data_callable
        return original(self, data_callable, mimetype, coordinates, file_name, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add_deferred", add_deferred)
    return registered


# --- traces: the analyses in tests/model and the figures in tests/viz read the same ones ---


@pytest.fixture(scope="module")
def traces(translator) -> list[Trace]:
    """Greedy traces (6 steps at most) of STATISTICS_SENTENCES: the head statistics' inputs."""
    return [translator.trace(text, beam_size=1, max_new_tokens=6) for text in STATISTICS_SENTENCES]


@pytest.fixture(scope="module")
def internals_trace(translator) -> Trace:
    """A greedy trace of INTERNALS_SENTENCE (9 steps at most): inside one head."""
    return translator.trace(INTERNALS_SENTENCE, beam_size=1, max_new_tokens=9)


@pytest.fixture(scope="module")
def hand_pair() -> tuple[Trace, Trace]:
    """A minimal pair of hand-made traces: "the dog bites the man" and "the man bites the dog"."""
    W = WORD_START
    first = hand_trace(DOG_BITES_MAN, ["<s>", f"{W}der", f"{W}Hund", f"{W}beißt", "</s>"], "der Hund beißt", 0)
    second = hand_trace(MAN_BITES_DOG, ["<s>", f"{W}der", f"{W}Mann", f"{W}beißt", "</s>"], "der Mann beißt", 1)
    return first, second


@pytest.fixture(scope="module")
def handout(tiny_checkpoint) -> tuple[str, list]:
    """A handout export (the HTML and its sections) with real figures of the tiny checkpoint, of several kinds
    (bars, heatmaps, subplots, lines), and HOSTILE text in its facts and a table."""
    import viz
    from explorer.explanations import CAVEAT, EXPLANATIONS
    from viz.export import HandoutSection, handout_html

    trace = load_checkpoint(tiny_checkpoint, device="cpu").trace("the girl sits.", beam_size=1)
    axes = viz.attention_axes(trace, "cross")
    step = viz.decoding_step(trace, 0, 1)
    sections = [
        HandoutSection(
            "Probability of each output token",
            "",
            viz.token_probabilities(trace.predicted_pieces, trace.step_probs, title="Probabilities"),
        ),
        HandoutSection(
            "Step 1", EXPLANATIONS["step"], viz.step_attention(step.cross_rows, trace.source_pieces, title="Step 1")
        ),
        HandoutSection(
            "Cross-attention",
            EXPLANATIONS["cross"],
            viz.attention_heatmap(axes.stack[0, 0], axes.query_pieces, axes.key_pieces, title="One head"),
        ),
        HandoutSection(
            "All heads",
            EXPLANATIONS["grid"],
            viz.attention_grid(axes.stack, axes.query_pieces, axes.key_pieces, title="All heads"),
        ),
        HandoutSection(
            "Head view",
            EXPLANATIONS["heads"],
            viz.head_view(axes.stack[1], axes.query_pieces, axes.key_pieces, title="Head view"),
        ),
        HandoutSection("Translation at each stage", rows=[("untrained", HOSTILE), ("final", trace.translation)]),
    ]
    facts = [("Source sentence", trace.source_text), ("Translation", trace.translation), ("Note", HOSTILE)]
    return handout_html("A handout", sections, facts=facts, caveat=CAVEAT), sections


# --- checkpoint folders ---


@pytest.fixture(scope="module")
def classroom_checkpoints(tmp_path_factory, tiny_checkpoint, toy_tokenizer) -> Path:
    """tiny-en-de with snapshots/untrained and snapshots/early (other random weights), toy-plain-en-de without any."""
    folder = tmp_path_factory.mktemp("classroom-checkpoints")
    shutil.copytree(tiny_checkpoint, folder / "tiny-en-de")
    shutil.copytree(tiny_checkpoint, folder / "toy-plain-en-de")
    vocab = toy_tokenizer.vocab_size("source")
    card = {"source_language": "en", "target_language": "de"}
    for seed, (stage, step) in enumerate([("untrained", 0), ("early", 10)], start=1):
        save_checkpoint(
            folder / "tiny-en-de" / "snapshots" / stage,
            random_model(vocab, seed),
            toy_tokenizer,
            {**card, "snapshot": stage, "step": step, "description": f"{stage} weights (tests)"},
        )
    return folder


@pytest.fixture(scope="module")
def shipped_en_de() -> Translator:
    """The shipped default checkpoint (multi30k-en-de); its tests skip where it is not shipped."""
    if not (DEFAULT_CHECKPOINT / "model.safetensors").exists():
        pytest.skip("checkpoints/multi30k-en-de is not shipped")
    return load_checkpoint(DEFAULT_CHECKPOINT, device="cpu")


@pytest.fixture(scope="module", params=sorted(SHIPPED_MODELS))
def shipped_model(request) -> tuple[str, Path, Translator]:
    """(name, folder, translator) of each shipped translation checkpoint (SHIPPED_MODELS)."""
    folder = REPO / "checkpoints" / request.param
    assert folder.is_dir(), f"{folder} is missing: it is the app's default and must be committed"
    return request.param, folder, load_checkpoint(folder, device="cpu")


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """A tiny random MarianMT model imported by ``python -m model.import_hf``'s main: (Hugging Face model,
    MarianTokenizer, save_pretrained folder, imported checkpoint folder). Everything is built here, offline: two
    SentencePiece models trained on toy text, a joint vocab.json, a MarianTokenizer and a random MarianMTModel
    saved with save_pretrained. Skips without transformers, except in CI (CI=true), where it fails."""
    transformers = transformers_or_skip()
    work = tmp_path_factory.mktemp("marian")
    spm_folder = work / "spm"
    spm_folder.mkdir()
    vocab = write_tokenizer_files(spm_folder)
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(spm_folder / "source.spm"),
        target_spm=str(spm_folder / "target.spm"),
        vocab=str(spm_folder / "vocab.json"),
        source_lang="en",
        target_lang="de",
    )
    config = transformers.MarianConfig(
        vocab_size=len(vocab),
        d_model=32,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="swish",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        max_position_embeddings=64,
        pad_token_id=vocab["<pad>"],
        eos_token_id=vocab["</s>"],
        decoder_start_token_id=vocab["<pad>"],
        forced_eos_token_id=vocab["</s>"],
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    model, source, out, printed = random_marian_imported(transformers, config, tokenizer, work / "opus-mt-tiny", seed=0)
    assert "2+3 layers" in printed
    return model, tokenizer, source, out


def random_marian_imported(transformers, config, tokenizer, source: Path, seed: int):
    """A random MarianMTModel of ``config``, every weight, norm and bias away from its initial value and the logits
    bias non-zero, with OPUS-MT's generation defaults, saved with ``tokenizer`` in ``source`` and imported with
    ``python -m model.import_hf``'s main into checkpoints/<its name> beside it: (the model, ready for
    output_attentions, source, imported folder, what the importer printed)."""
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:  # the fixed sinusoidal table, which save_pretrained leaves out
                parameter.add_(torch.randn_like(parameter) * 0.2)
        model.final_logits_bias.normal_(0.0, 1.0)
    generation = model.generation_config  # OPUS-MT's generation defaults, which the card records
    generation.num_beams, generation.max_length, generation.forced_eos_token_id = 4, 512, config.eos_token_id
    generation.bad_words_ids = [[config.pad_token_id]]
    model.save_pretrained(source)
    tokenizer.save_pretrained(source)
    (source / "README.md").write_text(f"---\nlicense: cc-by-4.0\n---\n# {source.name}\n", encoding="utf-8")
    out = source.parent / "checkpoints" / source.name
    result = run_importer(source, out)
    assert result.returncode == 0, result.stderr
    model.config._attn_implementation = "eager"  # output_attentions needs the explicit softmax
    return model, source, out, result.stdout


@pytest.fixture(scope="session")
def marian_separate(tmp_path_factory):
    """A tiny random MarianMT model with separate source and target vocabularies, as the tc-big OPUS-MT models have
    them (share_encoder_decoder_embeddings false, vocab.json and target_vocab.json, decoder_vocab_size), imported
    by ``python -m model.import_hf``'s main: (Hugging Face model, MarianTokenizer, save_pretrained folder, imported
    checkpoint folder). The source vocabulary is the larger, so the two <pad> ids differ. Skips without transformers,
    except in CI (CI=true), where it fails."""
    transformers = transformers_or_skip()
    work = tmp_path_factory.mktemp("marian-separate")
    spm_folder = work / "spm"
    spm_folder.mkdir()
    vocab, target_vocab = write_separate_tokenizer_files(spm_folder)
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(spm_folder / "source.spm"),
        target_spm=str(spm_folder / "target.spm"),
        vocab=str(spm_folder / "vocab.json"),
        target_vocab_file=str(spm_folder / "target_vocab.json"),
        separate_vocabs=True,
        source_lang="en",
        target_lang="de",
    )
    pad, eos = target_vocab["<pad>"], target_vocab["</s>"]  # decoding's: the decoder starts from the target's <pad>
    config = transformers.MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(target_vocab),
        share_encoder_decoder_embeddings=False,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="swish",
        scale_embedding=True,
        max_position_embeddings=64,
        pad_token_id=pad,
        eos_token_id=eos,
        decoder_start_token_id=pad,
        forced_eos_token_id=eos,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    model, source, out, printed = random_marian_imported(
        transformers, config, tokenizer, work / "opus-mt-tc-tiny", seed=1
    )
    assert f"vocabularies {len(vocab)} (source) and {len(target_vocab)} (target)" in printed
    return model, tokenizer, source, out
