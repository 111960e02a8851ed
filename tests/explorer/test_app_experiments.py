"""The Experiments view (AppTest): each experiment driven once through the page, its result checked against
the model and viz functions called directly; the experiments' URL state; toy checkpoints' card examples.

The page runs on small random checkpoints (tests/conftest.py) with at most MAX_LEN output tokens, so every
run is short; one test uses the shipped default checkpoint, where a typed word really is several pieces.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from explorer.explanations import EXPLANATIONS
from explorer.views.experiments.stats import MAX_FILE_SENTENCES
from explorer.wording import (
    EXAMPLE_PAIRS,
    LANGUAGE_NAMES,
    card_examples,
    escape_markdown,
    example_sentences,
    file_cap_notice,
)
from model import load_checkpoint
from model.analysis.ablation import compare_ablation
from model.analysis.head_stats import batch_head_statistics, trace_head_statistics
from model.analysis.importance import head_importance
from model.analysis.internals import attention_stages
from model.analysis.pairs import attention_pair
from model.analysis.word_order import compare_word_order, shuffle_source_words
from model.card import Card
from model.checkpoint import read_card
from model.heads import HeadRef
from tests.app_helpers import (
    assert_ok,
    chart_specs,
    chart_titled,
    chart_titles,
    open_details,
    plotly_array,
    shown_tokenization,
)
from tests.helpers import APP, CHECKPOINTS_ENV, REPO, SENTENCE
from viz.head_stats import statistic_grid

SECOND = "a woman rides a red bike in the park."
MAX_LEN = 6  # the sidebar's "Max output tokens" for every page here: short traces, fast runs
TOY = "toy-reverse"


# --- fixtures and helpers ---


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny_checkpoint) -> Path:
    """tiny-en-de (random weights) and a copy of the shipped toy-reverse checkpoint, with its card's examples."""
    folder = tmp_path_factory.mktemp("experiment-checkpoints")
    shutil.copytree(tiny_checkpoint, folder / "tiny-en-de")
    shutil.copytree(REPO / "checkpoints" / TOY, folder / TOY, ignore=shutil.ignore_patterns("snapshots"))
    return folder


@pytest.fixture(scope="module")
def translator(checkpoints):
    return load_checkpoint(checkpoints / "tiny-en-de", device="cpu")


@pytest.fixture(scope="module")
def original(translator):
    """The page's trace: greedy (the page's default search), at most MAX_LEN output tokens."""
    return translator.trace(SENTENCE, beam_size=1, max_new_tokens=MAX_LEN)


@pytest.fixture
def new_app(monkeypatch, checkpoints):
    """An AppTest on the test checkpoints, opened at SENTENCE in the Experiments view plus the given URL values."""
    monkeypatch.setenv(CHECKPOINTS_ENV, str(checkpoints))

    def make(**query: str) -> AppTest:
        app = AppTest.from_file(APP, default_timeout=60)
        app.query_params.update({"sentence": SENTENCE, "max_new_tokens": str(MAX_LEN), "view": "experiments", **query})
        return app.run()

    return make


def translations_shown(app: AppTest) -> dict[str, str]:
    """The labelled translations an experiment writes ("**Original:** …  \\n**What if:** …"), as Markdown."""
    shown = {}
    for markdown in app.markdown:
        for line in markdown.value.split("  \n"):
            found = re.fullmatch(r"\*\*([^*]+):\*\* (.*)", line, re.DOTALL)
            if found:
                shown[found.group(1)] = found.group(2).strip()
    return shown


def as_shown(text: str) -> str:
    """A translation as the page writes it: escaped Markdown; trailing spaces (a lone "▁" piece) do not show."""
    return escape_markdown(text).strip()


# --- each experiment once ---


def test_whatif_forks_with_another_top_k_token_and_with_a_typed_word(new_app, translator, original):
    step = 1
    token = next(int(t) for t in original.topk_ids[step] if int(t) != original.target_ids[step + 1])
    app = new_app(experiment="whatif", fork_step=str(step), fork_token=str(token))
    assert_ok(app)
    forked = translator.fork(original, step, token)
    assert forked.target_ids[1 : step + 1] == original.target_ids[1 : step + 1]  # the page shows this fork...
    assert translations_shown(app)["What if"] == as_shown(forked.translation)
    assert translations_shown(app)["Original"] == as_shown(original.translation)
    tokens = chart_titled(app, "Original and what-if, token by token")
    assert plotly_array(tokens["data"][0]["z"])[1, : forked.n_steps] == pytest.approx(forked.step_probs)
    # steps counted from 1 on the page, as in the steps view (the URL's fork_step counts from 0)
    assert f"fork at step {step + 1}" in [note["text"] for note in tokens["layout"]["annotations"]]
    assert app.selectbox(key="fork_step").format_func(step).startswith(f"step {step + 1}: ")
    forked_attention = chart_titled(app, f"What if: step {step + 1} → ")
    assert "Original" in chart_titles(app)  # the two side by side have short titles; the page names the head
    cross = forked.attention["decoder.layers.0.cross_attn"][0]
    assert np.allclose(plotly_array(forked_attention["data"][0]["z"]), cross, atol=1e-6)
    app.text_input(key="fork_word").input("park").run()  # ...and a typed word replaces the pick
    assert_ok(app)
    assert translations_shown(app)["What if"] == as_shown(translator.fork(original, step, "park").translation)
    assert app.query_params["fork_word"] == "park" and app.query_params["fork_step"] == str(step)


def test_whatif_says_when_a_typed_word_is_several_pieces_on_the_shipped_checkpoint(monkeypatch):
    folder = REPO / "checkpoints" / "multi30k-en-de"
    if not (folder / "model.safetensors").exists():
        pytest.skip("checkpoints/multi30k-en-de is not shipped here")
    monkeypatch.delenv(CHECKPOINTS_ENV, raising=False)
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params.update({"view": "experiments", "experiment": "whatif", "fork_word": "Kätzchen"})
    app.run()
    assert_ok(app)
    shipped = load_checkpoint(folder, device="cpu")
    page_trace = shipped.trace(app.text_input(key="sentence").value, beam_size=1)
    forked = shipped.fork(page_trace, 0, "Kätzchen")
    assert len(forked.outcome.fork.token_ids) > 1
    assert [info.value for info in app.info] == [escape_markdown(forked.outcome.fork.notice)]
    assert translations_shown(app)["What if"] == as_shown(forked.translation)


def test_beam_tree_draws_every_candidate_and_one_beams_cross_attention(new_app, translator):
    app = new_app(experiment="beam")
    assert_ok(app)
    tree = translator.beam_tree(SENTENCE, beam_size=5, max_new_tokens=MAX_LEN)  # the sidebar's beam size, 5 by default
    figure = chart_titled(app, "Beam search (beam 5): every hypothesis")
    drawn = sum(
        len(data["x"]) for data in figure["data"] if data.get("mode") == "markers+text" and data.get("hovertemplate")
    )
    assert drawn == len(tree.nodes)
    assert app.selectbox(key="beam_node").value == tree.results()[0].id  # the translation's last token
    pruned = next(node for node in tree.nodes if node.status == "pruned")
    app.selectbox(key="beam_node").set_value(pruned.id).run()
    app.selectbox(key="layer").set_value(1).run()
    assert_ok(app)
    node_trace = translator.beam_node_trace(tree, pruned.id)
    expected = node_trace.attention_stack("cross")[1, :, tree.trace_row(pruned.id), :]  # (heads, source tokens)
    shown = chart_titled(app, "Cross-attention when this beam chose it, layer 2")
    assert np.allclose(plotly_array(shown["data"][0]["z"])[:-1], expected, atol=1e-6)  # a row per head, then their mean
    assert app.query_params["beam_node"] == str(pruned.id) and app.query_params["experiment"] == "beam"
    app.toggle(key="show_pruned").set_value(False).run()
    hidden = chart_titled(app, "Beam search (beam 5): every hypothesis")
    assert "pruned" not in [data.get("name") for data in hidden["data"]]


def test_inside_one_head_shows_every_stage_with_its_shape(new_app, translator, original):
    app = new_app(experiment="internals", module_kind="decoder_self", layer="1", head="2", query_row="2")
    assert_ok(app)
    stages = attention_stages(translator, original, "decoder.layers.1.self_attn", 2, 2)
    titles = chart_titles(app)
    for stage in ("q", "k", "v", "scores", "scaled", "mask", "masked", "softmax", "contributions", "output"):
        shape = " × ".join(
            str(n)
            for n in getattr(
                stages, {"softmax": "probs", "mask": "allowed", "contributions": "contribution_norms"}.get(stage, stage)
            ).shape
        )
        assert any(title.endswith(f"({shape})") for title in titles), (stage, shape, titles)
    softmax = chart_titled(app, "softmax (1 × ")
    assert np.allclose(plotly_array(softmax["data"][0]["z"]), original.attention["decoder.layers.1.self_attn"][2, 2:3])


def statistics_frame(app: AppTest):
    """The head statistics table."""
    return next(frame.value for frame in app.dataframe if "sentences" in frame.value.columns)


def test_head_statistics_of_the_sentence_as_heatmaps_and_a_table(new_app, original):
    app = new_app(experiment="stats", statistic="diagonality")
    assert_ok(app)
    table = trace_head_statistics(original)
    figure = chart_titled(app, "Diagonality – this sentence")  # one figure, a panel per kind
    for panel, kind in zip(figure["data"], ("encoder self", "decoder self", "cross"), strict=True):
        assert np.allclose(plotly_array(panel["z"]), statistic_grid(table, "diagonality", kind))
    frame = statistics_frame(app)
    assert len(frame) == len(table) == 3 * 2 * 4  # three attention kinds, two layers, four heads
    assert list(frame["diagonality"]) == pytest.approx([row["diagonality"] for row in table])


def test_head_statistics_over_an_uploaded_file(new_app, translator):
    app = new_app(experiment="stats", stats_source="file", statistic="entropy")
    assert_ok(app)
    assert not [title for title in chart_titles(app) if title.startswith("Entropy")]  # nothing before a file
    lines = ["a dog runs in the park.", "", "two cats sit on the red ball.", "the girl walks."]
    app.file_uploader(key="stats_file").set_value(("sentences.txt", "\n".join(lines).encode(), "text/plain")).run()
    assert_ok(app)
    expected = batch_head_statistics(translator, lines, beam_size=1, max_new_tokens=MAX_LEN)
    figure = chart_titled(app, "Entropy (bits) – mean over 3 sentences")
    assert np.allclose(plotly_array(figure["data"][2]["z"]), statistic_grid(expected, "entropy", "cross"))
    assert set(statistics_frame(app)["sentences"]) == {3}
    cap = MAX_FILE_SENTENCES
    many = [f"the dog {word} in the park." for word in ("runs", "sits", "walks", "plays") * (cap // 4 + 1)]
    app.file_uploader(key="stats_file").set_value(("many.txt", "\n".join(many).encode(), "text/plain")).run()
    assert_ok(app)
    assert file_cap_notice(len(many), cap) in [warning.value for warning in app.warning]
    assert chart_titled(app, f"Entropy (bits) – mean over {cap} sentences")
    app.file_uploader(key="stats_file").set_value(("blank.txt", b"\n \n", "text/plain")).run()
    assert_ok(app)
    assert [error.value for error in app.error] == [
        escape_markdown("blank.txt has no sentences: it is empty or has only blank lines (one sentence per line)")
    ]


def test_minimal_pair_shows_both_translations_and_the_difference(new_app, translator, original):
    app = new_app(experiment="pair", pair_sentence=SECOND, module_kind="encoder_self", layer="1", head="3")
    assert_ok(app)
    second = translator.trace(SECOND, beam_size=1, max_new_tokens=MAX_LEN)
    shown = translations_shown(app)
    assert (shown["First"], shown["Second"]) == (
        as_shown(original.translation),
        as_shown(second.translation),
    )
    pair = attention_pair(original, second, "encoder.layers.1.self_attn", 3)
    both = next(
        spec
        for spec in chart_specs(app)
        if spec["layout"]["title"]["text"] == "Encoder layer 2 – self-attention – head 4"
    )
    assert [plotly_array(data["z"]).shape for data in both["data"]] == [pair.first.shape, pair.second.shape]
    difference = chart_titled(app, "Difference: first − second sentence")
    assert np.allclose(plotly_array(difference["data"][0]["z"]), pair.difference, atol=1e-6)
    assert len(pair.keys.pieces) < len(pair.second_key_pieces)  # the changed words are left out


def test_example_pair_fills_both_sentences(new_app):
    app = new_app(experiment="pair")
    assert_ok(app)
    assert [info.value for info in app.info] == ["Type a second sentence, or pick an example pair, to compare the two."]
    app.selectbox(key="pair_example").set_value(0).run()
    assert_ok(app)
    first, second = EXAMPLE_PAIRS["en"][0]
    assert (app.text_input(key="sentence").value, app.text_input(key="pair_sentence").value) == (first, second)
    assert app.selectbox(key="pair_example").value is None  # a menu: ready to pick again
    assert app.query_params["pair_sentence"] == second and chart_titled(app, "Difference: first − second sentence")


def test_switching_heads_off_shows_both_translations_and_the_importance_heatmap(new_app, translator, original):
    app = new_app(experiment="ablation")
    assert_ok(app)
    importance = head_importance(translator, SENTENCE, target_ids=original.target_ids[1:])
    heatmap = chart_titled(app, "Head importance (zero ablation)")
    for data, kind in zip(heatmap["data"], ("encoder_self", "decoder_self", "cross"), strict=True):
        assert np.allclose(plotly_array(data["z"]), importance.drops[kind], atol=1e-4)
    assert [info.value for info in app.info][-1].startswith("Pick heads to switch off")
    app.multiselect(key="ablate").set_value(["cross.1.2", "encoder_self.0.1"]).run()
    assert_ok(app)
    heads = [HeadRef("cross", 1, 2), HeadRef("encoder_self", 0, 1)]
    comparison = compare_ablation(translator, SENTENCE, heads, beam_size=1, max_new_tokens=MAX_LEN)
    shown = translations_shown(app)
    assert shown["Original"] == as_shown(comparison.original.translation)
    assert shown["Heads switched off"] == as_shown(comparison.ablated.translation)
    assert chart_titled(app, "Translation without 2 heads (zero ablation)")
    bars = chart_titled(app, "Token probabilities (log-probability drop ")
    assert plotly_array(bars["data"][1]["y"]) == pytest.approx(comparison.forced.step_probs, abs=1e-6)
    assert app.query_params["ablate"] == "cross.1.2,encoder_self.0.1"
    app.button(key="ablate_top").click().run()
    top = [f"{ref.kind}.{ref.layer}.{ref.head}" for ref, _ in importance.ranking()[:3]]
    assert sorted(app.multiselect(key="ablate").value) == sorted(top)


def test_word_order_experiments_show_both_translations(new_app, translator):
    app = new_app(experiment="word_order", word_order_stacks="encoder")
    assert_ok(app)
    without = compare_word_order(
        translator, SENTENCE, "no-pe", beam_size=1, max_new_tokens=MAX_LEN, stacks=("encoder",)
    )
    shown = translations_shown(app)
    assert shown["Original"] == as_shown(without.original.translation)
    assert shown["Without positional encoding"] == as_shown(without.modified.translation)
    assert chart_titled(app, "Translation without positional encoding")
    both = chart_titled(app, "Decoder layer 1 – cross-attention – head 1")
    assert [annotation["text"] for annotation in both["layout"]["annotations"]] == [
        "Original",
        "Without positional encoding",
    ]
    app.segmented_control(key="word_order_variant").set_value("shuffle").run()
    app.number_input(key="word_order_seed").set_value(2).run()
    assert_ok(app)
    shuffled = compare_word_order(translator, SENTENCE, "shuffle", seed=2, beam_size=1, max_new_tokens=MAX_LEN)
    shown = translations_shown(app)
    assert shown["Shuffled sentence"] == escape_markdown(shuffle_source_words(SENTENCE, 2)) != escape_markdown(SENTENCE)
    assert shown["Source words shuffled"] == as_shown(shuffled.modified.translation)
    both = chart_titled(app, "Decoder layer 1 – cross-attention – head 1")
    assert [annotation["text"] for annotation in both["layout"]["annotations"]][1] == "Source words shuffled"
    module = "decoder.layers.0.cross_attn"
    for data, trace in zip(both["data"], (shuffled.original, shuffled.modified), strict=True):
        assert np.allclose(plotly_array(data["z"]), trace.attention[module][0], atol=1e-6)
    assert app.query_params["word_order_variant"] == "shuffle" and app.query_params["word_order_seed"] == "2"


# --- state, explanations, export ---


def test_a_url_opens_each_experiment_in_its_state_and_bad_values_fall_back(new_app):
    query = {"experiment": "ablation", "ablate": "cross.1.2,decoder_self.0.3", "ablation_mode": "mean"}
    app = new_app(**query)
    assert_ok(app)
    assert app.multiselect(key="ablate").value == ["cross.1.2", "decoder_self.0.3"]
    assert app.segmented_control(key="ablation_mode").value == "mean"
    assert chart_titled(app, "Translation without 2 heads (mean ablation)")
    assert app.query_params == {"sentence": SENTENCE, "max_new_tokens": str(MAX_LEN), "view": "experiments", **query}
    app = new_app(experiment="word_order", word_order_variant="no-pe", word_order_stacks="decoder")
    assert app.pills(key="word_order_stacks").value == ["decoder"]
    app = new_app(experiment="nope", module_kind="sideways", ablate="cross.9.9", fork_step="99", query_row="x")
    assert_ok(app)
    assert app.segmented_control(key="experiment").value == "whatif"
    assert app.segmented_control(key="module_kind").value == "cross" and app.selectbox(key="fork_step").value == 0
    assert app.query_params == {"sentence": SENTENCE, "max_new_tokens": str(MAX_LEN), "view": "experiments"}


def test_each_experiment_explains_itself_with_the_caveat_where_it_shows_attention(new_app):
    app = new_app(pair_sentence=SECOND)
    topics = {"beam": "beam_tree", "stats": "head_stats", "pair": "pairs"}
    for experiment in ("whatif", "beam", "internals", "stats", "pair", "ablation", "word_order"):
        app.segmented_control(key="experiment").set_value(experiment).run()
        assert_ok(app)
        explanation = EXPLANATIONS[topics.get(experiment, experiment)]
        panels = [
            expander
            for expander in app.expander
            if expander.label == "How to read this" and expander.markdown[0].value.startswith(explanation)
        ]
        assert len(panels) == 1, experiment
        caveat = any("not by themselves an explanation" in caption.value for caption in panels[0].caption)
        assert caveat == (experiment != "ablation"), experiment  # ablation shows translations, not attention


def test_handout_holds_the_experiment_on_screen(new_app, handout_files, translator):
    app = new_app(experiment="ablation", ablate="cross.0.0")
    assert_ok(app)
    document = handout_files["tiny-en-de-handout.html"]()
    sections = re.findall(r"<section><h2>(.*?)</h2>", document)
    assert "Heads switched off" in sections
    assert [title for title in sections if title.startswith(("Head importance", "Translation with"))] == [
        title for title in chart_titles(app) if title.startswith(("Head importance", "Translation with"))
    ]
    ablated = compare_ablation(translator, SENTENCE, [HeadRef("cross", 0, 0)], beam_size=1, max_new_tokens=MAX_LEN)
    assert ablated.ablated.translation in document


def test_experiments_in_presenter_mode(new_app):
    app = new_app(presenter="true", experiment="stats")
    assert_ok(app)
    assert chart_titles(app) == ["Entropy (bits) – this sentence"]  # the view alone, no steps


# --- toy checkpoints: the card's examples and readable language names ---


def test_a_toy_checkpoint_offers_its_cards_examples(monkeypatch, checkpoints):
    monkeypatch.setenv(CHECKPOINTS_ENV, str(checkpoints))
    card = read_card(checkpoints / TOY)
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params["checkpoint"] = TOY
    app.run()
    assert_ok(app)
    assert app.selectbox(key="example").options == card.examples
    assert app.text_input(key="sentence").value in card.examples
    captions = [caption.value for caption in app.sidebar.caption]
    assert any(caption.startswith("Symbol sequence → The sequence reversed") for caption in captions)


def test_switching_to_a_checkpoint_the_sentence_does_not_suit_takes_its_example_and_says_so(monkeypatch, checkpoints):
    monkeypatch.setenv(CHECKPOINTS_ENV, str(checkpoints))
    card = read_card(checkpoints / TOY)
    app = AppTest.from_file(APP, default_timeout=60).run()
    app.text_input(key="sentence").input(SENTENCE).run()
    app.selectbox(key="checkpoint").set_value(TOY).run()  # English into a model of symbol sequences
    assert_ok(app)
    assert app.text_input(key="sentence").value == card.examples[0]
    notice = next(info.value for info in app.info if "does not suit this checkpoint" in info.value)
    assert "reads Symbol sequence" in notice and escape_markdown(card.examples[0]) in notice
    assert "<unk>" not in toy_pieces(app)  # the page shows the toy's own task, not <unk> "translated"
    app.text_input(key="sentence").input("q a q f").run()  # after the switch a person types what they like
    assert app.text_input(key="sentence").value == "q a q f" and not app.info
    app.selectbox(key="checkpoint").set_value("tiny-en-de").run()  # symbols into an English model: back to English
    assert app.text_input(key="sentence").value == card_examples(read_card(checkpoints / "tiny-en-de"))[0]
    app.text_input(key="sentence").input(SECOND).run()
    app.selectbox(key="checkpoint").set_value("tiny-en-de").run()  # no switch, no change
    assert app.text_input(key="sentence").value == SECOND


def test_a_sentence_with_pieces_the_new_tokenizer_lacks_does_not_suit_it(checkpoints):
    from explorer.page import unsuitable

    tiny = load_checkpoint(checkpoints / "tiny-en-de", device="cpu")
    assert unsuitable(tiny, "en", SENTENCE) == ""
    assert "no pieces for" in unsuitable(tiny, "en", "a man rides a 🚲 bike")  # the toy tokenizer has no 🚲
    assert "reads English" in unsuitable(tiny, "seq", SENTENCE)


def toy_pieces(app: AppTest) -> list[str]:
    return shown_tokenization(open_details(app))["piece"]


def test_card_examples_and_language_names():
    assert card_examples(Card(examples=["b k f s", " "], source_language="seq")) == ["b k f s"]
    assert card_examples(Card(examples=[], source_language="de")) == example_sentences("de")
    assert card_examples(Card()) == example_sentences("en")
    for folder in sorted((REPO / "checkpoints").glob("toy-*")):
        card = read_card(folder)
        assert card.source_language in LANGUAGE_NAMES and card.target_language in LANGUAGE_NAMES, folder.name
