"""The shipped checkpoints: they load, their cards match their files, and they still translate.

This guards the committed artefacts (not the training): a fixed set of 20 sentences from
test_2016_flickr must score above a floor set a few points below the measured score.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu
from streamlit.testing.v1 import AppTest

from explorer import views
from model import load_checkpoint
from model.analysis.head_stats import batch_head_statistics, readable_cross_head
from model.checkpoint import read_config
from model.training.data import read_lines
from tests.app_utils import APP, assert_ok, chart_titles

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "multi30k"
# name -> (source language, target language, lowercased BLEU floor on the first 20 test sentences, beam 5)
SHIPPED = {
    # measured 41.1 (beam 5) when shipped (the 4+4, d_model 128 model; 41.02 on the whole test set against the
    # 3+3, d_model 256 model's 40.11, yet below that model's 43.3 on these 20)
    "multi30k-en-de": ("en", "de", 36.0),
    # measured 47.6 (beam 5) when shipped (the mean of the 3+3, d_model 256 model and its BPE-dropout continuation;
    # 43.5 on the whole test set against the 3+3 model's 42.8, but lower on these 20: 52.3)
    "multi30k-de-en": ("de", "en", 44.0),
    "multi30k-en-fr": ("en", "fr", 54.0),  # measured 59.1 (beam 5) when shipped (the 3+3, d_model 256 model)
}


@pytest.fixture(scope="module", params=sorted(SHIPPED))
def shipped(request):
    folder = REPO / "checkpoints" / request.param
    assert folder.is_dir(), f"{folder} is missing: it is the app's default and must be committed"
    return request.param, folder, load_checkpoint(folder, device="cpu")


def test_card_matches_the_files(shipped):
    name, folder, translator = shipped
    source, target, _ = SHIPPED[name]
    card = json.loads((folder / "card.json").read_text())
    assert card["source_language"] == source and card["target_language"] == target
    assert card["parameters"] == translator.model.num_parameters() <= 10_000_000
    assert card["config"] == read_config(folder).to_dict()
    for split in ("val", "test_2016_flickr"):
        scores = card["scores"][split]
        assert scores["beam_size"] == 5 and scores["bleu"] > 0 and scores["bleu_lowercase"] >= scores["bleu"]
    for key in ("train_command", "hardware", "wall_time_s", "data"):
        assert card[key], key
    assert sum(f.stat().st_size for f in (REPO / "checkpoints").rglob("*") if f.is_file()) < 60 * 2**20


def test_translates_twenty_test_sentences_above_the_floor(shipped):
    name, _, translator = shipped
    source, target, floor = SHIPPED[name]
    if not DATA.is_dir():
        pytest.skip(f"{DATA} is not here (the Multi30k data sits in ../shared/data beside the repo in CI)")
    sources = read_lines(DATA / f"test_2016_flickr.{source}.gz")[:20]
    references = read_lines(DATA / f"test_2016_flickr.{target}.gz")[:20]
    hypotheses = translator.translate_batch(sources, beam_size=5)
    score = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    assert score >= floor, f"{name}: lowercased BLEU {score:.1f} on 20 test sentences, floor {floor}"


def test_every_view_draws_the_shipped_model(shipped):
    """Each view opens on the checkpoint's own example without an error, and the attention views draw charts
    (the shipped translation models are pre-norm with a final LayerNorm; tests/test_views.py opens every view on a
    post-norm model)."""
    name, _, _ = shipped
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params["checkpoint"] = name
    app.run()
    assert app.selectbox(key="checkpoint").value == name
    for view in views.choices(presenting=False):
        app.segmented_control(key="view").set_value(view).run()
        assert_ok(app)
        assert not app.error, (view, [error.value for error in app.error])
        if view in ("cross", "steps", "encoder", "decoder"):
            assert chart_titles(app), view


def test_french_puts_the_adjective_after_the_noun_and_cross_attention_crosses():
    """The lesson of multi30k-en-fr's first example: "a red car" -> "une voiture rouge". On the head the page opens
    on (measured as the page measures it), the step writing "voiture" reads "car" and the step writing "rouge" reads
    "red": the lines cross, since "red" comes before "car" and "rouge" after "voiture"."""
    translator = load_checkpoint(REPO / "checkpoints" / "multi30k-en-fr", device="cpu")
    examples = translator.card["examples"]
    assert examples[0] == "A man is driving a red car."
    layer, head = readable_cross_head(batch_head_statistics(translator, examples, beam_size=1))
    trace = translator.trace(examples[0], beam_size=1)
    assert "voiture rouge" in trace.translation
    written, read = trace.predicted_pieces, trace.source_pieces
    looked_at = trace.attention_stack("cross")[layer, head].argmax(-1)  # per output step, the source piece read most
    noun, adjective = written.index("▁voiture"), written.index("▁rouge")
    assert read[looked_at[noun]] == "▁car" and read[looked_at[adjective]] == "▁red"
    assert noun < adjective and looked_at[noun] > looked_at[adjective]
