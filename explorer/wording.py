"""Words on the page: example sentences, model-card summaries, names of choices, notices.

In one place, so that they can be read and reviewed as prose, and tested without running the
page. The "How to read this" texts are in explorer/explanations.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from model.card import Card, ToyTaskSection
from model.heads import KIND_TITLES
from viz.tokens import display_text

EXAMPLE_SENTENCES: dict[str, list[str]] = {
    "en": [
        "A man in a blue shirt is riding a bike.",
        "Two dogs are playing in the snow.",
        "A little girl is climbing the stairs.",
        "A group of people are standing in front of a building.",
        "A woman with a red hat is sitting on a bench in the park.",
        "The boy throws the ball to his father.",
    ],
    "de": [
        "Ein Mann in einem blauen Hemd fährt Fahrrad.",
        "Zwei Hunde spielen im Schnee.",
        "Ein kleines Mädchen klettert die Treppe hinauf.",
        "Eine Gruppe von Menschen steht vor einem Gebäude.",
        "Eine Frau mit einem roten Hut sitzt auf einer Bank im Park.",
        "Der Junge wirft seinem Vater den Ball zu.",
    ],
}

LANGUAGE_NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "cs": "Czech",
    "es": "Spanish",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "ru": "Russian",
    "uk": "Ukrainian",
    "pl": "Polish",
    "ro": "Romanian",
    "sv": "Swedish",
    "fi": "Finnish",
    "el": "Greek",
    "tr": "Turkish",
    "ar": "Arabic",
    "hi": "Hindi",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
    "vi": "Vietnamese",
    "id": "Indonesian",
    # the toy checkpoints' synthetic "languages" (checkpoints/toy-*/card.json)
    "seq": "Symbol sequence",
    "copy": "The same sequence",
    "rev": "The sequence reversed",
    "sorted": "The sequence sorted",
    "svo": "Subject–verb–object order",
    "sov": "Subject–object–verb order",
}

# Minimal pairs to start the pair view from: two sentences that differ in one detail.
EXAMPLE_PAIRS: dict[str, list[tuple[str, str]]] = {
    "en": [
        # in-domain words the model translates right, and German marks the swap: "die Katze" / "den Hund"
        ("The dog is chasing the cat.", "The cat is chasing the dog."),
        ("A man is riding a bike.", "A woman is riding a bike."),
        ("The boy throws the ball to his father.", "The girl throws the ball to her father."),
        ("Two dogs are playing in the snow.", "Two dogs are playing in the water."),
    ],
    "de": [
        ("Der Hund beißt den Mann.", "Der Mann beißt den Hund."),
        ("Ein Mann fährt Fahrrad.", "Eine Frau fährt Fahrrad."),
    ],
    "seq": [("a b c d e", "a c b d e"), ("k w c m", "k w c m b")],
    "svo": [
        ("the cat pushes the dog", "the dog pushes the cat"),
        ("the book pushes a cat", "the book pushes a red cat"),
    ],
}


HEAD_VIEW_HINT = (
    "Point at a word to see only its lines; click a word on the left to keep them. "
    "Click a colour chip to switch its head on or off, double-click it to see that head alone."
)
# short: they title four panels side by side; "How to read this" says what each one is
ATTRIBUTION_NAMES = {
    "attention": "Attention",
    "value_norm": "Value norm",
    "grad_attention": "Gradient × attention",
    "alti_plus": "ALTI+",
}
DISPLAY_NAMES = {"single": "Single head", "grid": "All heads", "heads": "Head view", "aggregates": "Aggregates"}
DEVICE_NAMES = {"auto": "Auto", "cpu": "CPU", "cuda": "CUDA"}
STATS_SOURCE_NAMES = {"sentence": "This sentence", "file": "A file of sentences"}
WORD_ORDER_VARIANT_NAMES = {"no-pe": "Remove the positional encoding", "shuffle": "Shuffle the source words"}
ABLATION_NAMES = {"zero": "zeros", "mean": "its mean output"}

MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def escape_markdown(text: str) -> str:
    """Text (a user's sentence, a model's output) that st.markdown shows literally."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", text)


def pieces_markdown(pieces: Sequence[str]) -> str:
    """Pieces as Markdown code spans, written as the charts write them (viz.tokens.display_text: "▁Hund" -> "Hund",
    "en" -> "·en", specials as they are), as explorer.explanations.TOKEN_MARKS says."""
    return " ".join(f"`` {display_text(piece)} ``" for piece in pieces)


def example_sentences(source_language: str | None) -> list[str]:
    """Examples in the checkpoint's source language (English when it is unknown)."""
    language = (base_language(source_language) or "en").lower()
    return EXAMPLE_SENTENCES.get(language, EXAMPLE_SENTENCES["en"])


# the ISO 639-3 codes NLLB's codes start with ("eng_Latn"), of the languages named above
ISO_639_3 = {
    "eng": "en", "deu": "de", "fra": "fr", "ces": "cs", "spa": "es", "ita": "it", "por": "pt", "nld": "nl",
    "rus": "ru", "ukr": "uk", "pol": "pl", "ron": "ro", "swe": "sv", "fin": "fi", "ell": "el", "tur": "tr",
    "arb": "ar", "hin": "hi", "zho": "zh", "jpn": "ja", "kor": "ko", "vie": "vi", "ind": "id",
}  # fmt: skip


def base_language(code: str | None) -> str | None:
    """A language code as the page's examples and names know it: mBART-50's "en_XX", NLLB's "eng_Latn" and
    M2M100's "en" all read "en"; another code stays as it is."""
    if not code:
        return code
    head = re.split(r"[_-]", code)[0]
    return ISO_639_3.get(head, head)


def language_label(code: str | None) -> str:
    """A language code in words where it is a known one: "French (fra_Latn)", else the code."""
    name = LANGUAGE_NAMES.get(base_language(code) or "")
    return f"{name} ({code})" if name and name != code else (code or "another language")


def card_examples(card: Card) -> list[str]:
    """The inputs a checkpoint's card lists under "examples" (the toy checkpoints), else example sentences in its
    source language."""
    usable = [example for example in card.examples or [] if example.strip()]
    return usable or example_sentences(base_language(card.source_language))


def example_pairs(source_language: str | None) -> list[tuple[str, str]]:
    """Minimal pairs in the checkpoint's source language; none when there are none for it."""
    return EXAMPLE_PAIRS.get((base_language(source_language) or "en").lower(), [])


def bleu_scores(card: Card) -> dict[str, float]:
    """BLEU scores on a card, labelled by split (``scores.{split}.bleu``, written by model.evaluate --card-split),
    and the training run's greedy validation BLEU only when nothing better is recorded."""
    if not card.bleu and card.valid_bleu_greedy is not None:
        return {"valid (greedy)": float(card.valid_bleu_greedy)}
    return card.bleu


def describe_card(card: Card) -> str:
    """One line for the checkpoint picker: languages, size and scores from card.json (Markdown)."""
    source = "?" if card.source_language is None else card.source_language
    target = "?" if card.target_language is None else card.target_language
    named = [LANGUAGE_NAMES.get(base_language(code) or code, code) for code in (source, target)]
    languages = " → ".join(named)
    codes = (card.extra.get("conversion") or {}).get("language_codes")  # a many-language model's (model.import_hf)
    if isinstance(codes, int):
        languages = f"{codes} languages, opening on {languages}"
    parts = [escape_markdown(languages)]
    if card.parameters is not None:
        parts.append(f"{card.parameters:,} parameters")
    scores = bleu_scores(card)
    toy = card.toy_task or ToyTaskSection()
    if toy.held_out_exact_match is not None:
        # a toy task has one right answer: BLEU would only restate how often it is found
        inputs = "new inputs" if toy.held_out_pairs is None else f"{toy.held_out_pairs:,} new inputs"
        parts.append(f"gets {100 * toy.held_out_exact_match:.1f}% of {inputs} exactly right")
    elif scores:
        parts.append("BLEU " + ", ".join(f"{score:.1f} ({escape_markdown(name)})" for name, score in scores.items()))
    else:
        parts.append("no BLEU score on its card")
    if card.snapshot:
        parts.append(f"snapshot {escape_markdown(card.snapshot)}")
    return " · ".join(parts)


def learned_from(card: Card) -> str:
    """One line on what the model learned from (Markdown), from its card; "" when the card does not say."""
    domain, toy = card.domain_section, card.toy_task or ToyTaskSection()
    if domain.name is not None:
        count = domain.training_sentences
        amount = "" if count is None else f"{count:,} "
        about = "" if domain.description is None else f", {escape_markdown(domain.description)},"
        return f"This model learned from {amount}{escape_markdown(domain.name)}{about} and nothing else."
    if toy.rule is not None:
        count = (toy.sizes or {}).get("train")
        amount = "" if count is None else f"{count:,} "
        return f"This model learned one rule from {amount}made-up examples: {escape_markdown(toy.rule)}."
    return ""


def domain_name(card: Card) -> str:
    """What the model learned from, in a word or two ("image captions"); "sentences" when the card does not say."""
    name = card.domain_section.name
    return "sentences" if name is None else name


def unlike_training_notice(card: Card, reasons: Sequence[str]) -> str:
    """Why the translation may mean little, and what to try instead (Markdown)."""
    what = domain_name(card)
    examples = " · ".join(f"“{escape_markdown(example)}”" for example in card_examples(card)[:3])
    return (
        f"**This sentence is unlike the {escape_markdown(what)} this model learned from**: "
        + "; ".join(escape_markdown(reason) for reason in reasons)
        + ". Its translation, and so its attention, may mean little. Sentences like these show what it learned: "
        + examples
        + " (more under *Example sentences*)."
    )


def rare_words_line(card: Card, rare: Sequence[tuple[str, int]], sentences: int, shown: int = 6) -> str:
    """The sentence's words the model barely saw in training, with how often (Markdown, one line)."""
    what = domain_name(card)
    listed = ", ".join(
        f"“{escape_markdown(word)}” ({'never' if count == 0 else 'once' if count == 1 else f'{count} times'})"
        for word, count in rare[:shown]
    )
    more = f" and {len(rare) - shown} more" if len(rare) > shown else ""
    return (
        f"Barely seen in its {sentences:,} training {escape_markdown(what)}: {listed}{more}. "
        "The model has little to go on for these words."
    )


NO_TARGET_LANGUAGE = (
    "This model translates into several languages and this sentence does not say which: pick a *Target language* "
    "in the sidebar (or start the sentence with a code such as >>fr<<). Without one the model guesses."
)


def file_cap_notice(total: int, used: int) -> str:
    """Why only the first sentences of an uploaded file are used (Markdown)."""
    return (
        f"The file has {total:,} sentences; the first {used:,} are used, so that one class's uploads do not "
        "hold up the shared server."
    )


ALTI_FALLBACK = (
    "ALTI+ fell back in {rows}: no position scored clearly above zero there (its score under 10⁻⁹ of the block's "
    "output), so each of those positions keeps itself, and the shares passing through them say less."
)


def alti_fallback_notice(fallback_rows: dict[str, int]) -> str:
    """Where ALTI+ found nothing to share out ("" when nowhere): rows per kind of attention block."""
    parts = [
        f"{count} row{'s' if count != 1 else ''} of {KIND_TITLES[kind].lower()}"
        for kind, count in fallback_rows.items()
        if count
    ]
    return ALTI_FALLBACK.format(rows=", ".join(parts)) if parts else ""


TRAIN_STATES = {
    "queued": "Waiting for a free slot: number {position} in the queue. It starts when a training ahead of it ends.",
    "running": "Training",
    "stopping": "Stopping",
    "finished": "Finished",
    "cancelled": "Cancelled before it started",
    "failed": "Failed",
}
EXERCISE_RESULT = (
    "Each claim was measured with the default settings and seed 0, and the tests train every one again "
    "(tests/model/test_live.py); another seed may take a little longer."
)

STAGE_NAMES = {"untrained": "untrained", "early": "early in training", "final": "finished model"}


def stage_label(stage: str, card: Card) -> str:
    """A training stage's name for a chart, with its update count from the snapshot's card when known."""
    name = STAGE_NAMES.get(stage, stage)
    return f"{name} (update {card.step:,})" if card.step is not None and stage != "final" else name


def no_snapshots(checkpoint: str) -> str:
    """Why the training-evolution view is empty for a checkpoint (Markdown)."""
    return (
        f"The checkpoint **{escape_markdown(checkpoint)}** has no training snapshots, so there is nothing "
        "to compare. A checkpoint folder gets them as `snapshots/untrained/` and `snapshots/early/` "
        "(full checkpoint folders, written by `python -m model.train --snapshot-steps`); pick a "
        "checkpoint that has them, e.g. multi30k-en-de."
    )
