"""The checkpoint card (model.card.Card): every shipped card loads and round-trips, wrong types are refused by
name, and keys the Card does not model survive a rewrite."""

from __future__ import annotations

import json

import pytest

from model.card import Card, DomainSection, HeadScore, SplitScores, ToyTaskSection, TrainingRun
from model.checkpoint import CheckpointError, read_card
from tests.helpers import REPO

SHIPPED_CARDS = sorted((REPO / "checkpoints").rglob("card.json"))


def test_there_are_shipped_cards_to_check():
    # the seven checkpoints and their snapshots
    assert len(SHIPPED_CARDS) >= 7 and any("snapshots" in path.parts for path in SHIPPED_CARDS)


@pytest.mark.parametrize("path", SHIPPED_CARDS, ids=lambda path: str(path.parent.relative_to(REPO)))
def test_every_shipped_card_loads_and_round_trips_unchanged(path, tmp_path):
    data = json.loads(path.read_text(encoding="utf-8"))
    card = Card.load(path.parent)
    # the same content in the same order (json.dumps keeps the keys' order, the dicts' == does not)
    assert card.to_dict() == data and json.dumps(card.to_dict()) == json.dumps(data)
    assert card.extra == {}  # the Card models every top-level key a shipped card has
    assert card.source_language and card.target_language and card.parameters
    card.save(tmp_path)
    assert (tmp_path / "card.json").read_text(encoding="utf-8") == path.read_text(encoding="utf-8")


def test_the_shipped_cards_read_as_typed_sections():
    en_de = Card.load(REPO / "checkpoints" / "multi30k-en-de")
    assert en_de.languages == ("en", "de") and isinstance(en_de.domain, DomainSection)
    assert en_de.domain_section.name == "image captions" and en_de.domain_section.calibration["beam_size"] == 1
    assert isinstance(en_de.scores["test_2016_flickr"], SplitScores) and set(en_de.bleu) == {"val", "test_2016_flickr"}
    assert isinstance(en_de.history[0], TrainingRun) and en_de.runs() == en_de.history
    toy = Card.load(REPO / "checkpoints" / "toy-copy")
    assert isinstance(toy.toy_task, ToyTaskSection) and isinstance(toy.toy_task.clearest_head, HeadScore)
    assert toy.bleu == {} and toy.valid_bleu_greedy > 99
    # a card without a history (the toys'): one run made from its own training fields
    (run,) = toy.runs()
    assert (run.command, run.hardware, run.averaged_epochs) == (toy.train_command, toy.hardware, toy.averaged_epochs)
    untrained = Card.load(REPO / "checkpoints" / "multi30k-en-de" / "snapshots" / "untrained")
    assert (untrained.snapshot, untrained.step, untrained.initial_weights.seed) == ("untrained", 0, 1)


@pytest.mark.parametrize(
    "card,where,expected",
    [
        ({"parameters": "3131904"}, "parameters", "an integer"),
        ({"parameters": True}, "parameters", "an integer"),
        ({"source_language": ["en"]}, "source_language", "a string"),
        ({"examples": ["a b", 3]}, r"examples\[1\]", "a string"),
        ({"history": [{"command": "one"}, {"wall_time_s": "90 s"}]}, r"history\[1\]\.wall_time_s", "a number"),
        ({"scores": {"val": {"bleu": "42"}}}, r"scores\.val\.bleu", "a number"),
        ({"domain": {"calibration": [1, 2]}}, r"domain\.calibration", "an object"),
        ({"domain": 3}, "domain", "an object or a string"),
        ({"toy_task": {"clearest_head": {"module": "x", "head": 1.5}}}, r"toy_task\.clearest_head\.head", "an integer"),
        ({"initial_weights": {"seed": 1}}, r"initial_weights\.sha256", "missing"),
    ],
)
def test_a_wrong_type_in_a_known_field_is_an_error_naming_the_file_and_the_field(tmp_path, card, where, expected):
    (tmp_path / "card.json").write_text(json.dumps(card), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'card.json'}: {where}: .*{expected}"):
        Card.load(tmp_path)
    with pytest.raises(CheckpointError, match=where):  # what loading a checkpoint says
        read_card(tmp_path)


def test_a_card_that_is_no_json_object_is_refused(tmp_path):
    (tmp_path / "card.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match="card.json: the card: expected an object"):
        Card.load(tmp_path)
    (tmp_path / "card.json").write_text("{", encoding="utf-8")
    with pytest.raises(CheckpointError, match="card.json: not valid JSON"):
        read_card(tmp_path)
    assert Card.load(tmp_path / "nowhere") == Card()  # a folder without a card has an empty one


def test_scores_at_the_top_of_a_card_are_an_old_format_with_a_clear_error():
    with pytest.raises(ValueError, match="test_2016_flickr: .*old format.*scores.test_2016_flickr"):
        Card.from_dict({"source_language": "de", "test_2016_flickr": {"bleu": 12.5}})


def test_keys_the_card_does_not_model_survive_a_rewrite_in_their_places(tmp_path):
    data = {
        "name": "opus-mt-en-de",  # an imported model's
        "source_language": "en",
        "conversion": {"tool": "python -m model.import_marian", "dtype": "float32"},
        "domain": {"name": "captions", "colour": "blue", "calibration": {"beam_size": 1, "new_threshold": 0.5}},
        "history": [{"command": "run", "gpu_hours": 3, "scores": {"val": {"bleu": 1.0, "ter": 80.0}}}],
        "toy_task": {"task": "copy", "lengths": "3-10", "clearest_head": {"module": "m", "head": 0, "note": "x"}},
        "licence": "cc-by-4.0",
    }
    card = Card.from_dict(json.loads(json.dumps(data)))
    assert card.extra == {"name": "opus-mt-en-de", "conversion": data["conversion"], "licence": "cc-by-4.0"}
    assert card.domain.extra == {"colour": "blue"} and card.history[0].extra == {"gpu_hours": 3}
    assert card.history[0].scores["val"].extra == {"ter": 80.0}
    assert card.toy_task.clearest_head.extra == {"note": "x"}
    assert json.dumps(card.to_dict()) == json.dumps(data)

    card.scores = {"val": SplitScores(bleu=2.0)}  # a tool changes the card: the new key goes last, the rest stays
    card.description = "a description"
    card.save(tmp_path)
    written = json.loads((tmp_path / "card.json").read_text(encoding="utf-8"))
    assert list(written) == [*data, "description", "scores"]
    assert {key: written[key] for key in data} == data


def test_an_imported_models_card_names_its_domain_in_words():
    card = Card.from_dict({"source_language": "en", "domain": "broad (OPUS parallel data)"})  # model.import_marian's
    assert card.domain == "broad (OPUS parallel data)" and card.domain_section == DomainSection()
    assert card.to_dict() == {"source_language": "en", "domain": "broad (OPUS parallel data)"}


def test_a_field_set_to_none_is_left_out_and_null_reads_as_missing():
    card = Card.from_dict({"source_language": "en", "description": None, "valid_bleu_greedy": 30.0})
    assert card.description is None and "description" not in card.to_dict()
    card.valid_bleu_greedy = None
    assert card.to_dict() == {"source_language": "en"}


def test_saving_a_card_that_would_not_load_writes_nothing(tmp_path):
    card = Card(source_language="en")
    card.parameters = "many"  # a tool's mistake
    with pytest.raises(ValueError, match="parameters: expected an integer"):
        card.save(tmp_path)
    assert not (tmp_path / "card.json").exists()


def test_save_checkpoint_reads_a_dict_card_and_leaves_a_card_it_is_given_alone(tmp_path, toy_tokenizer):
    from model import Transformer
    from model.checkpoint import save_checkpoint
    from tests.helpers import small_config

    model = Transformer(small_config(toy_tokenizer.vocab_size("source"))).eval()
    with pytest.raises(ValueError, match="step: expected an integer"):
        save_checkpoint(tmp_path / "bad", model, toy_tokenizer, {"step": "200"})
    given = Card(source_language="en")
    save_checkpoint(tmp_path / "good", model, toy_tokenizer, given)
    assert given.parameters is None and read_card(tmp_path / "good").parameters == model.num_parameters()


def test_cards_compare_by_content_not_by_key_order():
    assert Card.from_dict({"source_language": "en", "step": 1}) == Card.from_dict({"step": 1, "source_language": "en"})
    assert Card(step=1) != Card(step=2)
