"""The words on the page (explorer.wording): card summaries, example sentences, and text shown literally."""

from __future__ import annotations

from explorer.wording import (
    bleu_scores,
    describe_card,
    escape_markdown,
    example_sentences,
    language_label,
    rare_words_line,
)
from model.card import Card


def test_card_summary_and_examples():
    scores = {"test_2016_flickr": {"bleu": 35.04, "bleu_lowercase": 36.0}}
    card = Card.from_dict({"source_language": "de", "target_language": "en", "parameters": 2349056,
                           "scores": scores, "valid_bleu_greedy": 33.2})  # fmt: skip
    assert bleu_scores(card) == {"test_2016_flickr": 35.04}  # the greedy validation score only when nothing else
    assert bleu_scores(Card(valid_bleu_greedy=33.2)) == {"valid (greedy)": 33.2}
    assert bleu_scores(Card.from_dict({"scores": {"val": {"bleu": 31.8}, "test_2016_flickr": {"bleu": 32.9}}})) == {
        "val": 31.8,
        "test_2016_flickr": 32.9,
    }
    summary = describe_card(card)
    assert "German → English" in summary and "2,349,056 parameters" in summary and "35.0" in summary
    assert "no BLEU" in describe_card(Card())
    assert example_sentences("de")[0].startswith("Ein") and example_sentences(None)[0].startswith("A man")
    assert escape_markdown("*a* <b>") == "\\*a\\* \\<b\\>"


def test_a_toy_card_says_how_often_it_is_exactly_right_instead_of_a_bleu_label():
    card = Card.from_dict({"source_language": "seq", "target_language": "rev", "valid_bleu_greedy": 99.97,
            "toy_task": {"held_out_pairs": 1000, "held_out_exact_match": 0.999}})  # fmt: skip
    summary = describe_card(card)
    assert "gets 99.9% of 1,000 new inputs exactly right" in summary
    assert "BLEU" not in summary


def test_the_rare_words_line_says_how_often_each_word_was_seen():
    card = Card.from_dict({"domain": {"name": "image captions"}})
    rare = [("sat", 3), ("didn't", 0), ("mat*", 1)]
    assert rare_words_line(card, rare, 29000) == (
        "Barely seen in its 29,000 training image captions: “sat” (3 times), “didn't” (never), “mat\\*” (once). "
        "The model has little to go on for these words."
    )
    many = rare_words_line(Card(), [(f"w{i}", 0) for i in range(9)], 12, shown=6)
    assert (
        many.startswith("Barely seen in its 12 training sentences: “w0” (never)") and "“w5” (never) and 3 more." in many
    )


def test_a_many_language_card_names_its_count_and_the_pair_it_opens_on_in_words():
    """mBART-50's, M2M100's and NLLB's codes all read as the language's name (explorer.wording.base_language)."""
    for source, target in (("eng_Latn", "fra_Latn"), ("en_XX", "fr_XX"), ("en", "fr")):
        card = Card.from_dict({"source_language": source, "target_language": target,
                               "conversion": {"language_codes": 202}})  # fmt: skip
        assert describe_card(card).startswith("202 languages, opening on English → French")
    assert language_label("deu_Latn") == "German (deu_Latn)" and language_label("xx_YY") == "xx_YY"
    assert example_sentences("deu_Latn") == example_sentences("de")
