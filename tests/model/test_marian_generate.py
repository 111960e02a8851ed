"""Decoding as an imported model's authors do (model.decoding.authors): with their generate settings our search
must give what transformers' ``generate`` gives, token for token, greedy and beam, wherever the settings differ
(length penalty, early stopping, renormalisation, forced </s>, banned tokens, the length limit).

The tiny random MarianMT model of the ``marian`` fixture is made to end its sentences: its logits bias favours
</s> (``with_eos_bias``), so hypotheses finish at many lengths and the length penalty and stopping rules decide.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from model import load_checkpoint
from model.decoding import Sampling
from model.decoding.authors import authors_decoding
from model.decoding.sampling import sampling_scores
from model.decoding.scoring import Scoring
from model.decoding.search import beam_search, greedy_decode
from model.interop.huggingface import import_hf
from tests.marian_helpers import transformers_or_skip

SENTENCES = [
    "a man rides a blue bike.",
    "two young dogs play in the snow.",
    "the cat sits.",
    "a dog runs in a park",
    "dogs play in the snow with a ball near a park",
    "the",
]


def with_eos_bias(source: Path, folder: Path, bias: float, generation: dict) -> Path:
    """A copy of a MarianMT folder whose final_logits_bias favours </s> by ``bias``, with these generate settings."""
    shutil.copytree(source, folder)
    weights = load_file(folder / "model.safetensors")
    eos = json.loads((folder / "config.json").read_text(encoding="utf-8"))["eos_token_id"]
    weights["final_logits_bias"][0, eos] += bias
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def ending(marian, tmp_path_factory):
    """(Hugging Face model, tokenizer, imported Translator, the folder's generate settings) of the fixture's model
    biased towards </s>."""
    transformers = transformers_or_skip()
    hf_model, hf_tokenizer, source, _ = marian
    work = tmp_path_factory.mktemp("ending")
    pad, eos = hf_model.config.pad_token_id, hf_model.config.eos_token_id
    authors = {
        "num_beams": 4,
        "max_length": 40,
        "length_penalty": 1.2,
        "forced_eos_token_id": eos,
        "bad_words_ids": [[pad]],
        "decoder_start_token_id": pad,
        "eos_token_id": eos,
        "pad_token_id": pad,
    }
    folder = with_eos_bias(source, work / "source", 5.5, authors)
    out = import_hf(folder, work / "imported")
    model = transformers.MarianMTModel.from_pretrained(folder).eval()
    return model, hf_tokenizer, load_checkpoint(out, "cpu"), authors


def generate_as_folder(hf_model, src: torch.Tensor, settings: dict | None = None, **outputs):
    """``generate`` with the folder's settings, or with ``settings`` in their place (as a folder's, not as
    arguments: transformers 5 reads a max_length it was not passed as new tokens, and fills settings left out of a
    GenerationConfig argument from the folder's)."""
    transformers = transformers_or_skip()
    folder_settings = hf_model.generation_config
    if settings is not None:
        base = {
            key: getattr(folder_settings, key) for key in ("decoder_start_token_id", "eos_token_id", "pad_token_id")
        }
        hf_model.generation_config = transformers.GenerationConfig(**base, **settings, **outputs)
    try:
        with torch.no_grad():
            return hf_model.generate(src)
    finally:
        hf_model.generation_config = folder_settings


def generated(hf_model, hf_tokenizer, text: str, settings: dict | None = None) -> list[int]:
    """generate_as_folder's output ids for one sentence, the start token and any padding after </s> dropped."""
    ids = generate_as_folder(hf_model, torch.tensor([hf_tokenizer(text).input_ids]), settings)[0].tolist()
    return [token for token in ids[1:] if token != hf_model.config.pad_token_id]


def test_the_authors_settings_are_read_from_the_folder_and_decode_as_generate(ending):
    hf_model, hf_tokenizer, translator, authors = ending
    recorded = translator.card.extra["generation_defaults"]
    assert {key: recorded.get(key) for key in authors} == authors  # the importer records them all
    preset = translator.authors_decoding
    assert (preset.beam_size, preset.max_new_tokens, preset.scoring.alpha) == (4, 40, 1.2)
    assert preset.scoring.style == "transformers" and preset.scoring.force_eos
    assert preset.scoring.banned == (hf_model.config.pad_token_id,) and not preset.not_followed
    lengths = set()
    for text in SENTENCES:
        expected = generated(hf_model, hf_tokenizer, text)  # the folder's generation_config.json alone
        trace = translator.trace(
            text, beam_size=preset.beam_size, max_new_tokens=preset.max_new_tokens, scoring=preset.scoring
        )
        assert trace.target_ids[1:] == expected, text
        assert translator.translate(
            text, preset.beam_size, preset.max_new_tokens, preset.scoring
        ) == hf_tokenizer.decode(expected, skip_special_tokens=True)
        lengths.add(len(expected))
    assert len(lengths) >= 3 and max(lengths) == preset.max_new_tokens  # ends at many lengths, one at the limit


SETTINGS = [
    pytest.param({"num_beams": 1}, id="greedy"),
    pytest.param({"num_beams": 1, "max_length": 4}, id="greedy-forced-end"),
    pytest.param({"num_beams": 4}, id="beam-authors"),
    pytest.param({"num_beams": 4, "length_penalty": 0.6}, id="length-penalty-0.6"),
    pytest.param({"num_beams": 3, "length_penalty": 2.0}, id="length-penalty-2"),
    pytest.param({"num_beams": 3, "length_penalty": -0.5}, id="length-penalty-negative"),
    pytest.param({"num_beams": 4, "early_stopping": True}, id="early-stopping"),
    pytest.param({"num_beams": 4, "early_stopping": "never", "length_penalty": 1.5}, id="early-stopping-never"),
    pytest.param({"num_beams": 5, "renormalize_logits": True}, id="renormalised"),
    pytest.param({"num_beams": 5, "max_length": 5}, id="beam-forced-end"),
    pytest.param({"num_beams": 3, "max_length": 6, "forced_eos_token_id": None}, id="limit-without-forced-end"),
    pytest.param({"num_beams": 2, "max_new_tokens": 7}, id="max-new-tokens"),
]


@pytest.mark.parametrize("changes", SETTINGS)
def test_each_generate_setting_gives_generates_output(ending, changes):
    hf_model, hf_tokenizer, translator, _ = ending
    pad, eos = hf_model.config.pad_token_id, hf_model.config.eos_token_id
    settings = {"max_length": 40, "forced_eos_token_id": eos, "bad_words_ids": [[pad]], **changes}
    preset = authors_decoding(settings, translator.config)
    for text in SENTENCES:
        expected = generated(hf_model, hf_tokenizer, text, settings)
        ids = translator.trace(text, preset.beam_size, preset.max_new_tokens, scoring=preset.scoring).target_ids[1:]
        assert ids == expected, text


def test_banned_tokens_are_never_generated_as_generate_bans_them(ending):
    hf_model, hf_tokenizer, translator, _ = ending
    pad = hf_model.config.pad_token_id
    favourites = Counter(token for text in SENTENCES for token in generated(hf_model, hf_tokenizer, text)[:-1])
    banned = [[token] for token, _ in favourites.most_common(2)]
    settings = {"num_beams": 3, "max_length": 20, "bad_words_ids": [[pad], *banned]}
    preset = authors_decoding(settings, translator.config)
    assert preset.scoring.banned == tuple(sorted([pad, *(words[0] for words in banned)]))
    banned_ids = {words[0] for words in banned}
    for text in SENTENCES:
        for beam_size in (1, 3):
            expected = generated(hf_model, hf_tokenizer, text, {**settings, "num_beams": beam_size})
            ours = translator.trace(text, beam_size, preset.max_new_tokens, scoring=preset.scoring).target_ids[1:]
            assert ours == expected and not banned_ids & set(ours), text
    trace = translator.trace(SENTENCES[1], 1, preset.max_new_tokens, scoring=preset.scoring)
    assert not banned_ids & set(trace.topk_ids.flatten().tolist())  # the views never offer them
    other = next(token for token, _ in favourites.most_common() if token not in banned_ids)
    unbanned = translator.fork(translator.trace(SENTENCES[1], 1, preset.max_new_tokens), 0, other)
    assert banned_ids & set(unbanned.target_ids)  # the model would write them after that token...
    forked = translator.fork(trace, 0, other)
    assert not banned_ids & set(forked.target_ids) and forked.settings.scoring == trace.settings.scoring
    tree = translator.beam_tree(SENTENCES[1], 3, preset.max_new_tokens, scoring=preset.scoring)
    assert tree.scoring.style == "transformers" and tree.results()[0].id in {
        n.id for n in tree.nodes if n.status == "finished"
    }
    assert (
        tree.hypotheses[0].tokens
        == translator.trace(SENTENCES[1], 3, preset.max_new_tokens, scoring=preset.scoring).target_ids[1:]
    )


def test_every_returned_hypothesis_and_score_equal_generates(ending):
    """Not only the best: the whole n-best list, with its length-normalised scores, as generate returns it."""
    hf_model, hf_tokenizer, translator, _ = ending
    pad = hf_model.config.pad_token_id
    for changes in ({"forced_eos_token_id": None, "max_length": 6}, {"length_penalty": 0.5}, {}):
        settings = {"num_beams": 4, "max_length": 20, "forced_eos_token_id": 0, "bad_words_ids": [[pad]], **changes}
        preset = authors_decoding(settings, translator.config)
        for text in SENTENCES:
            src = torch.tensor([hf_tokenizer(text).input_ids])
            outputs = {"num_return_sequences": 4, "output_scores": True, "return_dict_in_generate": True}
            result = generate_as_folder(hf_model, src, settings, **outputs)
            expected = [[token for token in row[1:] if token != pad] for row in result.sequences.tolist()]
            ours = beam_search(translator.model, src, 4, max_new_tokens=preset.max_new_tokens, scoring=preset.scoring)[
                0
            ]
            assert [hypothesis.tokens for hypothesis in ours] == expected, (text, changes)
            scores = torch.tensor([hypothesis.score for hypothesis in ours])
            torch.testing.assert_close(scores, result.sequences_scores, rtol=0, atol=1e-5)


def test_batched_search_gives_each_sentence_what_it_gets_alone(ending):
    """Sentences of different lengths decoded together (source padding, per-row stopping) as generate gives them."""
    hf_model, hf_tokenizer, translator, _ = ending
    settings = {"num_beams": 4, "max_length": 30, "length_penalty": 0.8}
    preset = authors_decoding(settings, translator.config)
    src = hf_tokenizer(SENTENCES, padding=True, return_tensors="pt").input_ids
    ours = beam_search(translator.model, src, 4, max_new_tokens=preset.max_new_tokens, scoring=preset.scoring)
    assert [hypotheses[0].tokens for hypotheses in ours] == [
        generated(hf_model, hf_tokenizer, text, settings) for text in SENTENCES
    ]
    greedy = greedy_decode(
        translator.model, src, max_new_tokens=5, scoring=Scoring(style="transformers", force_eos=True)
    )
    expected = [
        generated(hf_model, hf_tokenizer, text, {"max_length": 5, "forced_eos_token_id": 0}) for text in SENTENCES
    ]
    assert greedy == expected


def test_a_forced_end_at_the_limit_is_marked_cut_off(ending):
    hf_model, _, translator, _ = ending
    preset = authors_decoding({"num_beams": 3, "max_length": 2, "forced_eos_token_id": 0}, translator.config)
    trace = translator.trace(SENTENCES[1], preset.beam_size, preset.max_new_tokens, scoring=preset.scoring)
    assert trace.target_ids[-1] == translator.config.eos_id and trace.n_steps == 2
    assert trace.outcome.cut_off  # </s> was written because the limit came, not because the model chose it
    free = authors_decoding({"num_beams": 3, "max_length": 40}, translator.config)
    assert not translator.trace(SENTENCES[0], free.beam_size, free.max_new_tokens, scoring=free.scoring).outcome.cut_off


def test_settings_our_search_does_not_apply_are_named():
    from model.config import TransformerConfig

    config = TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, max_len=64)
    preset = authors_decoding(
        {"num_beams": 2, "no_repeat_ngram_size": 3, "bad_words_ids": [[4], [5, 6]], "repetition_penalty": 1.0},
        config,
    )
    assert preset.scoring.banned == (4,)
    assert preset.not_followed == ("no_repeat_ngram_size=3", "bad_words_ids [5, 6]")
    assert preset.max_new_tokens == 20  # generate's max_length when a folder gives none
    assert (
        authors_decoding({"max_length": 512}, config).max_new_tokens == config.max_sequence_tokens
    )  # within our positions
    with pytest.raises(ValueError, match="early_stopping"):
        authors_decoding({"early_stopping": "sometimes"}, config)


SAMPLINGS = [
    pytest.param(Sampling(temperature=1.0, seed=3), id="temperature-1"),
    pytest.param(Sampling(temperature=0.6, top_k=4, seed=11), id="top-k"),
    pytest.param(Sampling(temperature=1.4, top_p=0.7, seed=5), id="top-p"),
    pytest.param(Sampling(temperature=0.9, top_k=6, top_p=0.9, seed=7), id="all-three"),
]


def sampling_settings(sampling: Sampling, pad: int, eos: int) -> dict:
    """generate's settings for ``sampling`` (top_k 0: no top-k, for both; generate reads a top_k of None as 50)."""
    return {
        "do_sample": True,
        "num_beams": 1,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "max_length": 30,
        "forced_eos_token_id": eos,
        "bad_words_ids": [[pad]],
    }


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_each_step_reshapes_the_distribution_as_generates_logits_processors(ending, sampling):
    """At every step of a sampled translation the distribution drawn from equals the one transformers' temperature,
    top-k and top-p processors make of the same logits."""
    transformers = transformers_or_skip()
    hf_model, hf_tokenizer, translator, _ = ending
    warpers = transformers.LogitsProcessorList(
        [transformers.TemperatureLogitsWarper(sampling.temperature)]
        + ([transformers.TopKLogitsWarper(sampling.top_k)] if sampling.top_k else [])
        + ([transformers.TopPLogitsWarper(sampling.top_p)] if sampling.top_p < 1 else [])
    )
    for text in SENTENCES:
        trace = translator.trace(text, max_new_tokens=30, sampling=sampling)
        src = torch.tensor([hf_tokenizer(text).input_ids])
        with torch.no_grad():
            logits = hf_model(input_ids=src, decoder_input_ids=torch.tensor([trace.target_ids[:-1]])).logits[0]
        logits[:, hf_model.config.pad_token_id] = float("-inf")  # bad_words_ids, as our model never writes <pad>
        theirs = warpers(torch.tensor([trace.target_ids[:-1]]), logits).softmax(dim=-1)
        ours = sampling_scores(torch.log_softmax(logits, dim=-1), sampling).softmax(dim=-1)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def unbiased(marian):
    """(Hugging Face model, tokenizer, imported Translator) of the fixture's model as it is: it rarely ends a
    sentence, so a sampled translation runs to its limit and every one of its tokens is a draw to compare."""
    hf_model, hf_tokenizer, _, imported = marian
    return hf_model, hf_tokenizer, load_checkpoint(imported, "cpu")


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_sampling_draws_what_generate_draws_with_the_same_seed(unbiased, sampling):
    """generate draws from torch's global stream; seeded with the same number, it draws what our own generator does,
    token for token, also with the folder's settings read by authors_decoding."""
    hf_model, hf_tokenizer, translator = unbiased
    settings = sampling_settings(sampling, hf_model.config.pad_token_id, hf_model.config.eos_token_id)
    preset = authors_decoding(settings, translator.config)
    assert preset.sampling == Sampling(sampling.temperature, sampling.top_k, sampling.top_p) and not preset.not_followed
    lengths = []
    for text in SENTENCES:
        torch.manual_seed(sampling.seed)
        expected = generated(hf_model, hf_tokenizer, text, settings)
        ours = translator.trace(text, max_new_tokens=preset.max_new_tokens, scoring=preset.scoring, sampling=sampling)
        assert ours.target_ids[1:] == expected, text
        lengths.append(len(expected))
    assert min(lengths) >= 10, lengths  # enough draws to tell two random streams apart
