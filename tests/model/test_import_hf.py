"""mBART-50, M2M100 and NLLB converted with ``python -m model.import_hf``, checked against transformers on tiny random
models built with it (tests/hf_family_helpers.py): logits and every head's attention, greedy and beam search
against ``generate`` with the target language forced, the token ids of 200 sentences, and the refusals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from model import load_checkpoint
from model.analysis.attribution import attribute
from model.analysis.attribution.record import ATTRIBUTION_METHODS
from model.capture import capture_attention
from model.checkpoint import CheckpointError
from model.decoding.languages import LanguagePair, using_languages
from model.interop.huggingface import import_hf
from tests.helpers import REPO
from tests.hf_family_helpers import (
    FAMILIES,
    LANGUAGES,
    SENTENCEPIECE_TYPES,
    build_folder,
    fairseq_sentencepiece,
    hf_tokenizer,
    multi30k_lines,
)
from tests.marian_helpers import transformers_or_skip

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SOURCES = ["A dog runs on the beach.", "Two men."]
TARGETS = ["Un chien court sur la plage.", "Deux hommes."]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    """(family, save_pretrained folder, transformers' model, our Translator of its conversion)."""
    transformers = transformers_or_skip()
    transformers.utils.logging.disable_progress_bar()
    name = request.param
    work = tmp_path_factory.mktemp(name)
    model = fairseq_sentencepiece(SENTENCEPIECE_TYPES[name])
    folder = build_folder(name, work / "hf", model, extra_rows=2 if name == "nllb" else 0)
    classes = {"mbart50": transformers.MBartForConditionalGeneration}
    hf_class = classes.get(name, transformers.M2M100ForConditionalGeneration)
    hf_model = hf_class.from_pretrained(folder, attn_implementation="eager").eval()  # eager: it returns attentions
    translator = load_checkpoint(import_hf(folder, work / "ours"), "cpu")
    return name, folder, hf_model, translator


def code_id(translator, family: str, language: str) -> int:
    return translator.tokenizer.language_id(translator_code(family, language))


def translator_code(family: str, language: str) -> str:
    return LANGUAGES[family][language]


def test_logits_and_every_heads_attention_equal_transformers_on_a_padded_batch(family):
    name, folder, hf_model, translator = family
    tokenizer = hf_tokenizer(name, folder, "en", "fr")
    batch = tokenizer(SOURCES, text_target=TARGETS, padding=True, return_tensors="pt")
    assert (batch["input_ids"] == 1).any(), "the second source is padded"
    labels = batch["labels"].masked_fill(batch["labels"] == -100, 1)
    decoder_input = torch.cat([torch.full((2, 1), 2), labels[:, :-1]], dim=1)
    real = decoder_input != 1  # transformers hides no decoder padding: its rows are compared where they are real
    with torch.no_grad():
        expected = hf_model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_input,
            output_attentions=True,
        )
        with capture_attention(translator.model) as capture:
            ours = translator.model(batch["input_ids"], decoder_input)
    torch.testing.assert_close(ours[real], expected.logits[real], atol=1e-5, rtol=0)
    kinds = {
        "encoder.layers.{}.self_attn": (expected.encoder_attentions, None),
        "decoder.layers.{}.self_attn": (expected.decoder_attentions, real),
        "decoder.layers.{}.cross_attn": (expected.cross_attentions, real),
    }
    for module, (layers, rows) in kinds.items():
        for index, attention in enumerate(layers):
            captured = capture.attention[module.format(index)]
            if rows is not None:  # (B, H, T, K): the real query rows of each sentence
                captured, attention = captured.transpose(1, 2)[rows], attention.transpose(1, 2)[rows]
            torch.testing.assert_close(captured, attention, atol=1e-5, rtol=0)


@pytest.mark.parametrize("target", ["fr", "de"])
@pytest.mark.parametrize("beams", [1, 4])
def test_greedy_and_beam_search_write_what_generate_writes_with_the_target_forced(family, target, beams):
    name, folder, hf_model, translator = family
    tokenizer = hf_tokenizer(name, folder, "en", target)
    forced = code_id(translator, name, target)
    authors = translator.authors_decoding
    assert authors is not None and authors.beam_size == (hf_model.generation_config.num_beams or 1)  # the folder's
    languages = LanguagePair(translator_code(name, "en"), translator_code(name, target))
    for sentence in SOURCES:
        src = tokenizer(sentence, return_tensors="pt").input_ids
        with torch.no_grad():
            expected = hf_model.generate(src, forced_bos_token_id=forced, num_beams=beams)[0].tolist()
        trace = translator.trace(
            sentence, beam_size=beams, scoring=authors.scoring, languages=languages, max_new_tokens=None
        )
        assert trace.source_ids == src[0].tolist()
        assert trace.target_ids == expected, (name, target, beams, sentence)
        assert trace.target_ids[1] == forced and trace.settings.prefix_ids[:1] == [forced]


def test_token_ids_equal_transformers_tokenizer_on_200_sentences_in_two_languages(family):
    name, folder, _, translator = family
    for source, target in (("en", "de"), ("de", "fr")):
        tokenizer = hf_tokenizer(name, folder, source, target)
        sentences = multi30k_lines(source, 100, skip=500)
        languages = LanguagePair(translator_code(name, source), translator_code(name, target))
        for sentence in sentences:
            assert translator.source_ids(sentence, languages.source).ids == tokenizer(sentence).input_ids, sentence
        for sentence in multi30k_lines(target, 20, skip=500):
            trace = translator.trace(sentences[0], target=sentence, languages=languages)
            assert trace.target_ids[1:] == tokenizer(text_target=sentence).input_ids, sentence


def test_the_translation_reads_as_text_without_codes_or_specials(family):
    name, _, _, translator = family
    trace = translator.trace(SOURCES[0], target=TARGETS[0], languages=LanguagePair(None, translator_code(name, "fr")))
    assert trace.translation == TARGETS[0]
    assert trace.target_pieces[1] == translator.tokenizer.languages.pieces[translator_code(name, "fr")]


def test_an_unknown_language_code_is_refused_naming_some_it_has(family):
    name, _, _, translator = family
    with pytest.raises(ValueError, match="unknown language code 'xx_YY'; this model's include"):
        translator.trace(SOURCES[0], languages=LanguagePair("xx_YY", None))
    with pytest.raises(ValueError, match="unknown language code"):
        translator.translate(SOURCES[0], languages=LanguagePair(None, "xx_YY"))


def test_the_card_records_the_family_languages_and_generation_defaults(family):
    name, _, _, translator = family
    card = translator.card
    assert (card.source_language, card.target_language) == (translator_code(name, "en"), translator_code(name, "fr"))
    conversion = card.extra["conversion"]
    assert conversion["tool"] == "python -m model.import_hf" and conversion["family"] == name
    assert card.extra["generation_defaults"]["max_length"] == 40
    expected = {"mbart50": 52, "m2m100": 100, "nllb": 202}[name]
    assert len(translator.tokenizer.language_codes()) == conversion["language_codes"] == expected


def edited(folder, tmp_path, file: str, **changes):
    copy = shutil.copytree(folder, tmp_path / "source")
    data = json.loads((copy / file).read_text(encoding="utf-8"))
    data.update(changes)
    (copy / file).write_text(json.dumps(data), encoding="utf-8")
    return copy


REFUSALS = {
    "nllb-moe": ("config.json", {"model_type": "nllb-moe"}, "mixture-of-experts"),
    "t5": ("config.json", {"model_type": "t5"}, "relative position buckets"),
    "unknown": ("config.json", {"model_type": "gpt2"}, "'gpt2': no converter for it; supported: marian"),
    "heads": ("config.json", {"decoder_attention_heads": 2}, "encoder_attention_heads=4 but decoder_attention_heads=2"),
    "activation": ("config.json", {"activation_function": "tanh"}, "activation_function='tanh'"),
    "vocabulary": ("config.json", {"vocab_size": 100}, "has id \\d+, outside the model's 100 rows"),
    "pad": ("config.json", {"pad_token_id": 0}, "pad_token_id=0 but the tokenizer gives 1"),
    "mbart-25": ("tokenizer_config.json", {"tokenizer_class": "MBartTokenizer"}, "mBART-25's tokenizer"),
    "other tokenizer": ("tokenizer_config.json", {"tokenizer_class": "T5Tokenizer"}, "T5Tokenizer is not one of"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_what_cannot_be_followed_is_refused_by_name_and_nothing_is_written(family, tmp_path, case):
    name, folder, _, _ = family
    file, changes, message = REFUSALS[case]
    source = edited(folder, tmp_path, file, **changes)
    with pytest.raises(CheckpointError, match=message):
        import_hf(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["nllb"], indirect=True)
def test_the_command_refuses_a_language_the_model_lacks_without_a_traceback(family, tmp_path):
    name, folder, _, _ = family
    result = subprocess.run(
        [sys.executable, "-m", "model.import_hf", str(folder), str(tmp_path / "out"), "--target-language", "xx_YY"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "unknown language code 'xx_YY'" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_pickles_missing_files_and_an_untied_output_are_refused(family, tmp_path):
    name, folder, hf_model, _ = family
    source = shutil.copytree(folder, tmp_path / "source")
    (source / "sentencepiece.bpe.model").rename(tmp_path / "spm")
    with pytest.raises(CheckpointError, match="no sentencepiece.bpe.model"):
        import_hf(source, tmp_path / "out")
    (tmp_path / "spm").rename(source / "sentencepiece.bpe.model")
    (source / "model.safetensors").rename(source / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickle"):
        import_hf(source, tmp_path / "out")
    (source / "pytorch_model.bin").unlink()
    tensors = {
        key: value.contiguous() for key, value in hf_model.state_dict().items() if "embed_positions.weights" not in key
    }
    tensors["lm_head.weight"] = tensors["lm_head.weight"] + 1.0
    tensors = {key: value.clone() for key, value in tensors.items()}  # shared storage cannot be saved twice
    from safetensors.torch import save_file

    save_file(tensors, str(source / "model.safetensors"))
    with pytest.raises(CheckpointError, match="an untied output projection"):
        import_hf(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_keys_transformers_ignores_are_accepted(family, tmp_path):
    name, folder, _, translator = family
    ignored = {
        "normalize_before": False,
        "add_final_layer_norm": False,
        "static_position_embeddings": False,
        "encoder_layerdrop": 0.05,
        "decoder_layerdrop": 0.05,
        "tokenizer_class": "SomeTokenizer",
    }
    source = edited(folder, tmp_path, "config.json", **ignored)
    converted = load_checkpoint(import_hf(source, tmp_path / "out"), "cpu")
    assert converted.model.config == translator.model.config


@pytest.mark.slow
@pytest.mark.parametrize("family", ["nllb"], indirect=True)
def test_a_model_id_is_read_from_the_hub_cache_and_converted_by_the_command(family, tmp_path):
    """The download path against huggingface_hub's own cache layout, offline (no network here): the command is given
    a model id, finds its snapshot as the hub client does, and converts it. The path is the same for every family:
    NLLB's, the one a lecturer downloads for everyday sentences, is run."""
    name, folder, _, translator = family
    snapshot = tmp_path / "hub" / f"models--test-org--tiny-{name}" / "snapshots" / ("0" * 40)
    shutil.copytree(folder, snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    environment = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "converted"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "model.import_hf",
            f"test-org/tiny-{name}",
            str(out),
            "--target-language",
            translator_code(name, "de"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    converted = load_checkpoint(out, "cpu")
    assert converted.card.extra["source_model"] == f"test-org/tiny-{name}"
    assert converted.card.target_language == translator_code(name, "de")
    missing = subprocess.run(
        [sys.executable, "-m", "model.import_hf", "test-org/no-such-model", str(tmp_path / "none")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=environment,
    )
    assert missing.returncode == 2 and "test-org/no-such-model: cannot download it" in missing.stderr
    assert not (tmp_path / "none").exists()


def test_a_model_that_starts_from_eos_may_still_end_with_it(family):
    """The three families start decoding from </s>: the start token is never generated, except when it is EOS."""
    name, folder, hf_model, translator = family
    assert translator.config.start_id == translator.config.eos_id == 2
    assert translator.config.never_generated == [translator.config.pad_id]
    if name != "mbart50":
        return  # only mBART has a logits bias to make </s> likely with
    tokenizer = hf_tokenizer(name, folder, "en", "fr")
    src = tokenizer(SOURCES[0], return_tensors="pt").input_ids
    forced = code_id(translator, name, "fr")
    original = hf_model.final_logits_bias.clone()
    try:
        for bias in (hf_model.final_logits_bias, translator.model.final_logits_bias):
            bias[0, 2] += 6.0
        with torch.no_grad():
            expected = hf_model.generate(src, forced_bos_token_id=forced, num_beams=4)[0].tolist()
        trace = translator.trace(SOURCES[0], beam_size=4, scoring=translator.authors_decoding.scoring)
    finally:
        hf_model.final_logits_bias.copy_(original)
        translator.model.final_logits_bias.copy_(original)
    assert trace.target_ids == expected and expected[-1] == 2 and len(expected) < 20


@pytest.mark.parametrize("method", ATTRIBUTION_METHODS)
def test_every_attribution_method_reads_a_converted_model(family, method):
    """Pre-norm with final norms (and mBART's embedding norm): ALTI+ rebuilds every sublayer's output from its
    decomposition, so its reconstruction error says the decomposition followed the model."""
    name, _, _, translator = family
    trace = translator.trace(SOURCES[0], target=TARGETS[0], languages=LanguagePair(None, translator_code(name, "fr")))
    attribution = attribute(translator, trace, method)
    assert attribution.source.shape == (trace.n_steps, len(trace.source_ids))
    assert np.isfinite(attribution.source).all()
    if method == "alti_plus":
        assert attribution.layers["reconstruction_error"].max() < 1e-4


@pytest.mark.parametrize("family", ["nllb"], indirect=True)
def test_nllbs_legacy_behaviour_puts_the_source_code_after_the_end(family, tmp_path):
    """NLLB's tokenizer_config.json may ask for the older layout (pieces, </s>, code): converted as it asks."""
    name, folder, _, _ = family
    source = edited(folder, tmp_path, "tokenizer_config.json", legacy_behaviour=True)
    translator = load_checkpoint(import_hf(source, tmp_path / "out"), "cpu")
    tokenizer = hf_tokenizer(name, source, "de", "fr")
    assert tokenizer.legacy_behaviour
    for sentence in multi30k_lines("de", 20, skip=500):
        ids = translator.source_ids(sentence, translator_code(name, "de")).ids
        assert ids == tokenizer(sentence).input_ids and ids[-2:] == [2, code_id(translator, name, "de")]


def test_a_block_of_calls_reads_its_pair_and_a_one_pair_model_in_it_ignores_it(family, translator):
    """using_languages sets a default: the many-language model's calls in the block read it, a call's own pair wins,
    and a model with one language pair (the tiny checkpoint) translates in the block as it does outside it."""
    name, _, _, converted = family
    german, french = translator_code(name, "de"), translator_code(name, "fr")
    alone = translator.translate("a b c", beam_size=1)
    with using_languages(LanguagePair(None, german)):
        assert converted.trace(SOURCES[0], beam_size=1).target_ids[1] == code_id(converted, name, "de")
        asked = converted.trace(SOURCES[0], beam_size=1, languages=LanguagePair(None, french))
        assert asked.target_ids[1] == code_id(converted, name, "fr")
        assert translator.translate("a b c", beam_size=1) == alone
