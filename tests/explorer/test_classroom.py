"""Classroom mode: the state in the URL (both ways, and Back), presenter mode, quiz, training evolution, handout.

App tests run app.py under AppTest on small random checkpoints, one of them with training
snapshots made here (the classroom_checkpoints fixture, tests/conftest.py). The Back button in a
real headless Chromium: tests/browser/test_classroom.py; the evolution and presenter figures alone:
tests/viz/test_classroom.py; finding the snapshots: tests/model/test_checkpoint.py.
"""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
from streamlit.testing.v1 import AppTest, local_script_runner

import viz
from explorer.components.assistive import plain
from explorer.sidebar import PRESENTER_CSS
from explorer.state import AVERAGE_HEADS, SETTINGS_BY_KEY, url_text
from explorer.wording import card_examples, escape_markdown, no_snapshots
from model import load_checkpoint
from model.analysis.activations import trace_activations
from model.analysis.head_stats import STATISTICS, batch_head_statistics, readable_cross_head
from model.analysis.quiz import step_truth
from model.checkpoint import find_snapshots
from tests.app_helpers import assert_ok, chart_specs, chart_titled, chart_titles, plotly_array
from tests.helpers import APP, CHECKPOINTS_ENV, SENTENCE

EXTERNAL_SCRIPT = re.compile(r"<script\b[^>]*\bsrc\s*=", re.IGNORECASE)


# --- fixtures ---


@pytest.fixture
def new_app(monkeypatch, classroom_checkpoints):
    """Make an AppTest (not yet run) on the classroom checkpoints, opened at the given URL parameters."""
    monkeypatch.setenv(CHECKPOINTS_ENV, str(classroom_checkpoints))

    def make(**query: str) -> AppTest:
        app = AppTest.from_file(APP, default_timeout=60)
        app.query_params.update(query)
        return app

    return make


@pytest.fixture
def app(new_app) -> AppTest:
    return new_app().run()


def translator(classroom_checkpoints: Path, name: str = "tiny-en-de"):
    return load_checkpoint(classroom_checkpoints / name, device="cpu")


def step_heading(app: AppTest) -> str:
    return next(markdown.value for markdown in app.markdown if markdown.value.startswith("**Step "))


def page_state(app: AppTest) -> dict:
    """What a student sees: the widgets that hold the shareable state, and the chart titles."""
    return {
        "checkpoint": app.selectbox(key="checkpoint").value,
        "sentence": app.text_input(key="sentence").value,
        "view": app.segmented_control(key="view").value,
        "layer": app.selectbox(key="layer").value,
        "head": app.selectbox(key="head").value,
        "merge_words": app.toggle(key="merge_words").value,
        "charts": chart_titles(app),
    }


def run_as_back_button(app: AppTest, query: dict[str, str]) -> None:
    """Rerun as the browser does on Back/Forward: the restored history entry's URL, marked as history navigation."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(local_script_runner, "RerunData", partial(RerunData, is_history_navigation=True))
        app.query_params = dict(query)
        app.run()


# --- the URL: it opens the page in its state, and follows every change ---


def test_a_url_opens_the_page_in_exactly_that_state(new_app, classroom_checkpoints):
    query = {
        "checkpoint": "toy-plain-en-de",
        "sentence": SENTENCE,
        "view": "decoder_self",
        "layer": "1",
        "head": "2",
        "decoding": "beam",
        "beam_size": "3",
        "merge_words": "true",
    }
    app = new_app(**query).run()
    assert_ok(app)
    expected = translator(classroom_checkpoints, "toy-plain-en-de").trace(SENTENCE, beam_size=3)
    state = page_state(app)
    assert {key: state[key] for key in ("checkpoint", "sentence", "view", "layer", "head")} == {
        "checkpoint": "toy-plain-en-de",
        "sentence": SENTENCE,
        "view": "decoder_self",
        "layer": 1,
        "head": 2,
    }
    assert state["merge_words"] is True and app.radio(key="decoding").value == "beam"
    assert app.slider(key="beam_size").value == 3
    assert any(markdown.value == f"### {escape_markdown(expected.translation)}" for markdown in app.markdown)
    decoder = chart_titled(app, "Decoder layer 2 – self-attention – head 3")
    no_weights = np.zeros((expected.n_steps, 1))
    output_words = viz.select_tokens(no_weights, expected.predicted_pieces, ["x"], merge_words=True)
    assert decoder["layout"]["yaxis"]["ticktext"] == output_words.query_labels  # merged words
    assert app.query_params == query  # every value was valid, so the URL stays as it was


def test_changing_the_state_updates_the_url_and_that_url_reopens_it(app, new_app):
    assert app.query_params == {}  # the defaults need no parameters
    app.text_input(key="sentence").input(SENTENCE).run()
    assert app.query_params == {"sentence": SENTENCE}
    app.segmented_control(key="view").set_value("decoder_self").run()
    app.selectbox(key="layer").set_value(1).run()
    app.selectbox(key="head").set_value(3).run()
    app.toggle(key="merge_words").set_value(True).run()
    assert_ok(app)
    assert app.query_params == {
        "sentence": SENTENCE,
        "view": "decoder_self",
        "layer": "1",
        "head": "3",
        "merge_words": "true",
    }
    reopened = new_app(**app.query_params).run()
    assert_ok(reopened)
    assert page_state(reopened) == page_state(app)
    app.segmented_control(key="view").set_value("steps").run()
    app.button(key="step_next").click().run()
    app.button(key="step_next").click().run()
    steps_link = {"sentence": SENTENCE, "view": "steps", "step": "2", "merge_words": "true"}  # only what is on screen
    assert app.query_params == steps_link
    assert step_heading(new_app(**steps_link).run()).startswith("**Step 3 of")
    app.segmented_control(key="view").set_value("cross").run()  # back to a default: it leaves the URL
    assert "view" not in app.query_params and "step" not in app.query_params  # the steps are not on screen


def test_invalid_url_values_fall_back_to_defaults_and_leave_the_url(new_app):
    app = new_app(view="nope", layer="99", head="two", step="-3", presenter="maybe", device="tpu").run()
    assert_ok(app)
    defaults = page_state(new_app().run())
    assert page_state(app) == defaults
    assert app.query_params == {}


def shared_links(classroom_checkpoints: Path) -> list[dict[str, str]]:
    """Links that together set every setting of explorer.state.SETTINGS to a value other than its default.

    A setting is bound where its widget is drawn, so each link opens the view or experiment that draws
    its settings. Values that depend on the model (a candidate token, a beam node) are read off it here.
    """
    tiny = translator(classroom_checkpoints)
    free = tiny.trace(SENTENCE, beam_size=1)
    fork_step = 1
    tree = tiny.beam_tree(SENTENCE, beam_size=2)
    other_node = next(node.id for node in tree.nodes[1:] if node.id != tree.results()[0].id)
    experiments = {"sentence": SENTENCE, "view": "experiments"}
    hidden = trace_activations(tiny, free).point("decoder", 1, "feed_forward.hook_hidden")
    other_unit = next(unit for unit in range(hidden.shape[1]) if unit != viz.most_active_units(hidden, 1)[0])
    return [
        {
            "checkpoint": "toy-plain-en-de",
            "sentence": SENTENCE,
            "view": "decoder_self",
            "display": "heads",
            "layer": "1",
            "head": "2",
            "head_view_query": "1",
            "head_view_heads": "2,0",
            "device": "cpu",
            "decoding": "beam",
            "beam_size": "3",
            "max_new_tokens": "8",
            "merge_words": "true",
            "show_special": "false",
            "annotate": "true",
        },
        {"view": "encoder_self", "display": "grid", "grid_layers": "1"},  # the all-heads grid of one layer
        {
            "sentence": SENTENCE,
            "view": "steps",
            "decoding": "sampling",
            "temperature": "0.7",
            "top_k": "5",
            "top_p": "0.9",
            "seed": "3",
            "sample_draws": "4",
        },
        {"view": "positional", "positional_stack": "decoder", "positional_dimensions": "3,1", "presenter": "true"},
        {
            "sentence": SENTENCE,
            "view": "quiz",
            "quiz_head": "1",
            "quiz_layer": "0",
            "step": "1",
            "teacher_forcing": "true",
            "target": "ein mann",
        },
        {"sentence": SENTENCE, "view": "steps", "step": "2", "step_layer": "0"},
        {"view": "embedding", "stack": "decoder", "embedding_part": "token"},
        {
            "sentence": SENTENCE,
            "view": "feed_forward",
            "stack": "decoder",
            "layer": "1",
            "ff_piece": "2",
            "ff_unit": str(other_unit),  # the default is the unit most active in the sentence
        },
        {"view": "evolution", "evolution_kind": "decoder_self", "layer": "1", "head": "3"},
        {"sentence": SENTENCE, "view": "attribution", "attribution_step": "1"},
        {
            **experiments,  # the first experiment, what-if, is the default
            "fork_step": str(fork_step),
            "fork_token": str(free.target_ids[fork_step + 1]),  # the written token: valid, and not the default
            "fork_word": "park",
            "module_kind": "encoder_self",
        },
        {
            **experiments,
            "experiment": "beam",
            "decoding": "beam",
            "beam_size": "2",
            "show_pruned": "false",
            "beam_node": str(other_node),
            "layer": "1",
        },
        {**experiments, "experiment": "internals", "module_kind": "decoder_self", "layer": "1", "query_row": "2"},
        {**experiments, "experiment": "stats", "statistic": list(STATISTICS)[1], "stats_source": "file"},
        {**experiments, "experiment": "pair", "pair_sentence": "a dog runs.", "module_kind": "encoder_self"},
        {**experiments, "experiment": "ablation", "ablation_mode": "mean", "ablate": "cross.1.2,encoder_self.0.1"},
        {**experiments, "experiment": "word_order", "word_order_variant": "shuffle", "word_order_seed": "2"},
        {**experiments, "experiment": "word_order", "word_order_stacks": "decoder"},
        {
            "view": "train",
            "train_task": "sort",
            "train_shortest": "4",
            "train_longest": "9",
            "train_encoder_layers": "3",
            "train_decoder_layers": "3",
            "train_heads": "2",
            "train_d_model": "64",
            "train_positional": "none",
            "train_lr": "0.001",
            "train_steps": "500",
            "train_layer": "1",
            "train_head": "1",
            "train_all_heads": "true",
        },
    ]


@pytest.mark.slow  # a page run for every link that sets a setting
def test_a_shared_url_restores_every_setting(new_app, classroom_checkpoints):
    links = shared_links(classroom_checkpoints)
    covered = {key for link in links for key in link}
    # target_language needs a multi-target model, source_language a many-language one, authors_decoding an imported
    # one: tests/explorer/test_marian.py, test_many_languages.py and test_authors_decoding.py reopen their links
    imported_only = {"target_language", "source_language", "authors_decoding"}
    # class and seat need a class in a store: tests/explorer/test_class_page.py opens links that set them
    in_a_class = {"class", "seat"}
    assert covered == set(SETTINGS_BY_KEY) - imported_only - in_a_class, "every setting needs a link here that sets it"
    for link in links:
        app = new_app(**link).run()
        assert_ok(app)
        restored = {key: url_text(app.session_state[key]) for key in link}
        assert restored == link
        assert app.query_params == link  # nothing dropped, nothing added: the same link shares the same page
    app = new_app().run()  # and the other way: a setting changed on the page reopens from its URL
    app.segmented_control(key="view").set_value("positional").run()
    app.radio(key="positional_stack").set_value("decoder").run()
    app.multiselect(key="positional_dimensions").select(7).run()
    reopened = new_app(**app.query_params).run()
    assert reopened.session_state["positional_stack"] == "decoder"
    assert reopened.session_state["positional_dimensions"] == app.session_state["positional_dimensions"]


# Links shared before a setting was renamed, and the same links with today's names.
FORMER_LINKS = [
    (
        {"view": "experiments", "experiment": "word_order", "pe_experiment": "shuffle", "pe_seed": "2"},
        {"view": "experiments", "experiment": "word_order", "word_order_variant": "shuffle", "word_order_seed": "2"},
    ),
    (
        {"view": "experiments", "experiment": "word_order", "pe_stacks": "decoder"},
        {"view": "experiments", "experiment": "word_order", "word_order_stacks": "decoder"},
    ),
    ({"view": "positional", "positional_side": "decoder"}, {"view": "positional", "positional_stack": "decoder"}),
    ({"max_len": "7"}, {"max_new_tokens": "7"}),
    # the attention kinds' former names, which were also the stacks'
    ({"view": "decoder", "display": "grid"}, {"view": "decoder_self", "display": "grid"}),
    ({"view": "evolution", "evolution_kind": "encoder"}, {"view": "evolution", "evolution_kind": "encoder_self"}),
    (
        {"view": "experiments", "experiment": "internals", "module_kind": "decoder"},
        {"view": "experiments", "experiment": "internals", "module_kind": "decoder_self"},
    ),
    (
        {"view": "experiments", "experiment": "ablation", "ablate": "decoder.0.1,cross.1.2"},
        {"view": "experiments", "experiment": "ablation", "ablate": "decoder_self.0.1,cross.1.2"},
    ),
]


@pytest.mark.parametrize(("former", "current"), FORMER_LINKS, ids=lambda link: ",".join(link))
def test_a_link_with_a_former_setting_name_still_opens_its_page(new_app, former, current):
    """An old link opens the same page as today's, and the page rewrites the URL with today's names."""
    app = new_app(**former).run()
    assert_ok(app)
    assert {key: url_text(app.session_state[key]) for key in current} == current
    assert app.query_params == current


def test_back_and_forward_restore_the_state_of_each_url(app):
    app.segmented_control(key="view").set_value("steps").run()
    app.button(key="step_next").click().run()
    history = [dict(app.query_params)]
    app.selectbox(key="step_layer").set_value(0).run()
    app.button(key="step_next").click().run()
    history.append(dict(app.query_params))
    assert history == [{"view": "steps", "step": "1"}, {"view": "steps", "step": "2", "step_layer": "0"}]
    run_as_back_button(app, history[0])
    assert_ok(app)
    state = (
        app.segmented_control(key="view").value,
        app.selectbox(key="step_layer").value,
        app.select_slider(key="step").value,
    )
    assert state == ("steps", 1, 1)
    assert app.query_params == history[0]  # restoring does not write a new URL
    run_as_back_button(app, {})  # the page as first opened
    assert app.segmented_control(key="view").value == "cross" and "step" not in app.session_state
    run_as_back_button(app, history[1])  # Forward
    assert (app.select_slider(key="step").value, app.selectbox(key="step_layer").value) == (2, 0)
    app.run()  # an ordinary rerun with a URL that does not match keeps the widgets (they are the truth)
    app.query_params = {"view": "positional"}
    app.run()
    assert app.segmented_control(key="view").value == "steps"


# --- presenter mode ---


def test_presenter_mode_shows_one_view_large_with_keyboard_steps(app, new_app, classroom_checkpoints):
    app.toggle(key="merge_words").set_value(True).run()
    app.segmented_control(key="view").set_value("steps").run()
    app.button(key="step_next").click().run()
    app.segmented_control(key="view").set_value("encoder_self").run()
    normal_sidebar = [header.value for header in app.sidebar.header]
    app.toggle(key="presenter").set_value(True).run()  # the presentation starts: first view, first step
    assert_ok(app)
    assert normal_sidebar == ["Model", "Decoding", "Display"] and [h.value for h in app.sidebar.header] == ["Model"]
    assert not app.dataframe and not app.get("download_button") and not app.title
    assert app.segmented_control(key="view").value == "steps" and app.session_state["step"] == 0
    # the controls in the sidebar, the slide in the main area: the source goes with the translation
    assert app.sidebar.text_input(key="sentence") and app.sidebar.segmented_control(key="view")
    assert not app.main.text_input and not app.main.segmented_control
    source = app.text_input(key="sentence").value
    assert app.main.markdown[0].value.startswith(f"“{escape_markdown(source)}” → **Translation**")
    # the view on screen, alone, as one figure
    assert chart_titles(app) == ["Step 1: next token and attention, decoder layer 2"]
    assert app.query_params == {"presenter": "true", "merge_words": "true"}
    app.button(key="step_next").click().run()
    assert chart_titles(app) == ["Step 2: next token and attention, decoder layer 2"]
    assert app.query_params["step"] == "1"
    app = new_app(presenter="true", merge_words="true").run()  # a presenter link opens on the decoding steps
    assert app.segmented_control(key="view").value == "steps"
    chart = chart_titled(app, "Step 1: next token and attention, decoder layer 2")
    assert chart["layout"]["font"]["size"] == pytest.approx(12 * viz.presenter.PRESENTER_SCALE)
    # the step's attention first (the first screen of a projector), then the bars
    assert chart["layout"]["xaxis2"]["domain"][0] == 0 < chart["layout"]["xaxis"]["domain"][0]
    trace = translator(classroom_checkpoints).trace(app.text_input(key="sentence").value, beam_size=1)
    words = viz.select_tokens(trace.attention_stack("cross")[1, :, 0], None, trace.source_pieces, merge_words=True)
    assert chart["layout"]["xaxis2"]["ticktext"] == words.key_labels  # merge_words kept while its toggle is hidden
    shortcuts = {key: app.button(key=key).proto.shortcut for key in ("step_first", "step_previous", "step_next")}
    assert shortcuts == {"step_first": "home", "step_previous": "left", "step_next": "right"}  # normalised
    assert [element.proto.body for element in app.get("html")] == [PRESENTER_CSS]  # the only raw HTML
    app.segmented_control(key="view").set_value("cross").run()
    assert chart_titles(app) == ["Decoder layer 2 – cross-attention – head 1"]  # the page's first head
    app.toggle(key="presenter").set_value(False).run()
    assert app.toggle(key="merge_words").value is True and app.segmented_control(key="view").value == "cross"
    assert app.main.text_input(key="sentence").value == source and app.main.segmented_control(key="view")


def help_panels(app: AppTest) -> list:
    return [expander for expander in app.expander if expander.label == "How to read this"]


def test_how_to_read_panels_carry_the_caveat_on_every_attention_view(app):
    for view in ("encoder_self", "decoder_self", "cross", "quiz", "evolution"):
        app.segmented_control(key="view").set_value(view).run()
        assert_ok(app)
        panels = help_panels(app)
        assert panels, view
        captions = [caption.value for panel in panels for caption in panel.caption]
        assert any("not by themselves an explanation" in caption for caption in captions), view


def test_how_to_read_opens_on_the_first_view_only(app):
    """Open on every view it pushed the steps' chart and the quiz's answers below a 1280x800 screen."""
    assert [panel.proto.expanded for panel in help_panels(app)] == [True]  # the first screen's view
    app.radio(key="display").set_value("grid").run()  # the same view, shown another way: still open
    assert [panel.proto.expanded for panel in help_panels(app)] == [True]
    for view in ("steps", "quiz", "cross"):  # then folded everywhere, the first view too
        app.segmented_control(key="view").set_value(view).run()
        assert [panel.proto.expanded for panel in help_panels(app)] == [False], view


# --- quiz ---


def test_quiz_hides_the_answer_then_reveals_and_scores(app, classroom_checkpoints):
    app.text_input(key="sentence").input(SENTENCE).run()
    app.segmented_control(key="view").set_value("quiz").run()
    assert_ok(app)
    assert chart_titles(app) == []  # no step section, no output probabilities: they would give the answers away
    assert not [markdown for markdown in app.markdown if markdown.value.startswith("### ")]  # nor the translation
    model = translator(classroom_checkpoints)
    trace = model.trace(SENTENCE, beam_size=1)
    # the readable head the first screen opens on decides, and the page says so
    layer, head = readable_cross_head(batch_head_statistics(model, card_examples(model.card), beam_size=1))
    assert (app.selectbox(key="quiz_layer").value, app.selectbox(key="quiz_head").value) == (layer, head)
    assert f"decided by decoder layer {layer + 1}, head {head + 1} (the page's readable head" in quiz_rule(app)
    truth = step_truth(trace, 0, layer, head)
    assert app.pills(key="quiz_where_0").options == [escape_markdown(word) for word in truth.words]
    assert app.button(key="quiz_reveal").disabled
    wrong_token = next(piece for piece in truth.candidates if piece != truth.produced)
    app.pills(key="quiz_where_0").set_value(truth.looked_at).run()
    app.pills(key="quiz_what_0").set_value(wrong_token).run()
    app.button(key="quiz_reveal").click().run()
    assert_ok(app)
    assert score_line(app).startswith("**Score: 1 of 2** · where it looks 1/1 · what it writes 0/1")
    assert len(app.success) == 1 and len(app.error) == 1
    assert app.error[0].value.startswith("Wrong: ")  # said in words, not by the red alone
    spoken = announced(app)
    assert spoken["translation"].startswith("Translation hidden during the quiz.")  # then the tiny model's cut-off
    assert spoken["quiz"] == f"{plain(app.success[0].value)} {plain(app.error[0].value)}"  # what a reader hears
    assert chart_titles(app) == [f"Where it looked, layer {layer + 1}", "What it could write"]
    app.button(key="quiz_next").click().run()
    assert app.query_params["step"] == "1" and app.query_params["view"] == "quiz"
    second = step_truth(trace, 1, layer, head)
    wrong_word = (second.looked_at + 1) % len(second.words)
    app.pills(key="quiz_where_1").set_value(wrong_word).run()
    app.button(key="quiz_reveal").click().run()
    assert score_line(app).startswith("**Score: 1 of 3** · where it looks 1/2 · what it writes 0/1")
    app.selectbox(key="quiz_head").set_value(AVERAGE_HEADS).run()  # another rule: a new quiz
    assert score_line(app).startswith("**Score: 0 of 0**")
    assert "decided by the mean of decoder layer" in quiz_rule(app)
    app.button(key="quiz_restart").click().run()
    assert step_heading(app).startswith("**Step 1 of") and "step" not in app.query_params
    assert app.pills(key="quiz_where_0").value is None and app.pills(key="quiz_what_0").value is None


def quiz_rule(app: AppTest) -> str:
    return next(caption.value for caption in app.caption if caption.value.startswith("Where it looks is decided"))


def announced(app: AppTest) -> dict[str, str]:
    """What the page's live regions hold after this run, by name (explorer.components.assistive.announce)."""
    found = [
        element.proto for element in app.get("bidi_component") if element.proto.component_name.endswith("announcer")
    ]
    return {data["name"]: data["text"] for data in (json.loads(proto.json) for proto in found)}


def score_line(app: AppTest) -> str:
    return next(markdown.value for markdown in app.markdown if markdown.value.startswith("**Score: "))


# --- training evolution ---


def test_evolution_view_shows_the_same_head_at_each_stage_and_each_translation(app, classroom_checkpoints):
    app.text_input(key="sentence").input(SENTENCE).run()
    app.segmented_control(key="view").set_value("evolution").run()
    app.segmented_control(key="evolution_kind").set_value("decoder_self").run()
    app.selectbox(key="layer").set_value(1).run()
    app.selectbox(key="head").set_value(2).run()
    assert_ok(app)
    figure = chart_titled(app, "Decoder layer 2 – self-attention – head 3")
    # the panels name the stages short (they share a row); the table below gives their update counts
    assert [note["text"] for note in figure["layout"]["annotations"]] == [
        "untrained",
        "early in training",
        "finished model",
    ]
    final = translator(classroom_checkpoints).trace(SENTENCE, beam_size=1)
    stages = find_snapshots(classroom_checkpoints / "tiny-en-de")
    for panel, path in zip(figure["data"], stages.values(), strict=True):
        stage_translator = load_checkpoint(path, device="cpu")
        forced = stage_translator.trace(SENTENCE, beam_size=1, target_ids=final.target_ids[1:])
        assert np.allclose(plotly_array(panel["z"]), forced.attention_stack("decoder_self")[1, 2], atol=1e-6)
    table = next(frame.value for frame in app.dataframe if "stage" in frame.value.columns)
    assert list(table["stage"]) == ["untrained (update 0)", "early in training (update 10)", "finished model"]
    assert list(table["translation"]) == [
        load_checkpoint(path, device="cpu").translate(SENTENCE, beam_size=1) for path in stages.values()
    ]
    assert app.query_params["evolution_kind"] == "decoder_self"


def test_evolution_view_says_when_a_checkpoint_has_no_snapshots(new_app):
    app = new_app(checkpoint="toy-plain-en-de", view="evolution").run()
    assert_ok(app)
    assert [info.value for info in app.info] == [no_snapshots("toy-plain-en-de")]
    assert not [spec for spec in chart_specs(app) if "finished model" in str(spec["layout"].get("annotations"))]


# --- handout ---


def test_handout_holds_the_charts_on_screen(app, handout_files, classroom_checkpoints):
    app.text_input(key="sentence").input(SENTENCE).run()
    app.segmented_control(key="view").set_value("steps").run()
    app.button(key="step_next").click().run()
    assert_ok(app)
    document = handout_files["tiny-en-de-handout.html"]()
    assert not EXTERNAL_SCRIPT.search(document)
    assert document.count("Plotly.newPlot(") == len(app.get("plotly_chart"))
    sections = re.findall(r"<section><h2>(.*?)</h2>", document)
    assert sections == [title.replace("&", "&amp;") for title in chart_titles(app)]
    assert "Step 2: next token and attention, decoder layer 2" in sections
    expected = translator(classroom_checkpoints).trace(SENTENCE, beam_size=1)
    assert f"<dd>{SENTENCE}</dd>" in document and f"<dd>{expected.translation}</dd>" in document
