"""The shipped checkpoints: they load, their cards match their files, and they still translate.

This guards the committed artefacts (not the training): a fixed set of 20 sentences from
test_2016_flickr must score above a floor set a few points below the measured score (SHIPPED_MODELS in
tests/helpers.py; the shipped_model fixture is in tests/conftest.py, the page on each model in
tests/explorer/test_shipped_checkpoints.py).
"""

from __future__ import annotations

import pytest
import sacrebleu

from model import load_checkpoint
from model.analysis.head_stats import batch_head_statistics, readable_cross_head
from model.checkpoint import read_card, read_config
from model.training.data import read_lines
from tests.helpers import REPO, SHIPPED_MODELS

DATA = REPO.parent / "shared" / "data" / "multi30k"


def test_card_matches_the_files(shipped_model):
    name, folder, translator = shipped_model
    source, target, _ = SHIPPED_MODELS[name]
    card = read_card(folder)
    assert card.languages == (source, target)
    assert card.parameters == translator.model.num_parameters() <= 10_000_000
    assert card.config == read_config(folder).to_dict()
    for split in ("val", "test_2016_flickr"):
        scores = card.scores[split]
        assert scores.beam_size == 5 and scores.bleu > 0 and scores.bleu_lowercase >= scores.bleu
    for key in ("train_command", "hardware", "wall_time_s", "data"):
        assert getattr(card, key), key
    assert sum(f.stat().st_size for f in (REPO / "checkpoints").rglob("*") if f.is_file()) < 60 * 2**20


def test_translates_twenty_test_sentences_above_the_floor(shipped_model):
    name, _, translator = shipped_model
    source, target, floor = SHIPPED_MODELS[name]
    if not DATA.is_dir():
        pytest.skip(f"{DATA} is not here (the Multi30k data sits in ../shared/data beside the repo in CI)")
    sources = read_lines(DATA / f"test_2016_flickr.{source}.gz")[:20]
    references = read_lines(DATA / f"test_2016_flickr.{target}.gz")[:20]
    hypotheses = translator.translate_batch(sources, beam_size=5)
    score = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    assert score >= floor, f"{name}: lowercased BLEU {score:.1f} on 20 test sentences, floor {floor}"


def test_french_puts_the_adjective_after_the_noun_and_cross_attention_crosses():
    """What multi30k-en-fr's first example teaches: "a red car" -> "une voiture rouge". On the head the page opens
    on (measured as the page measures it), the step writing "voiture" reads "car" and the step writing "rouge" reads
    "red": the lines cross, since "red" comes before "car" and "rouge" after "voiture"."""
    translator = load_checkpoint(REPO / "checkpoints" / "multi30k-en-fr", device="cpu")
    examples = translator.card.examples
    assert examples[0] == "A man is driving a red car."
    layer, head = readable_cross_head(batch_head_statistics(translator, examples, beam_size=1))
    trace = translator.trace(examples[0], beam_size=1)
    assert "voiture rouge" in trace.translation
    written, read = trace.predicted_pieces, trace.source_pieces
    looked_at = trace.attention_stack("cross")[layer, head].argmax(-1)  # per output step, the source piece read most
    noun, adjective = written.index("▁voiture"), written.index("▁rouge")
    assert read[looked_at[noun]] == "▁car" and read[looked_at[adjective]] == "▁red"
    assert noun < adjective and looked_at[noun] > looked_at[adjective]
