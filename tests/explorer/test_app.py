"""app.py under streamlit.testing.v1.AppTest, reading small random checkpoints from a temporary folder."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

import viz
from explorer.state import ALL_QUERIES, SAMPLING_SETTINGS
from explorer.wording import ATTRIBUTION_NAMES, card_examples
from model import load_checkpoint
from model.analysis.attribution import attribute
from model.analysis.head_stats import batch_head_statistics, readable_cross_head
from model.analysis.samples import explain_sampled_trace
from model.checkpoint import read_card
from model.decoding import Sampling
from model.decoding.search import DEFAULT_BEAM_SIZE
from model.heads import head_title
from model.translator import Translator
from tests.app_helpers import (
    assert_ok,
    chart_specs,
    chart_titled,
    chart_titles,
    component_data,
    open_details,
    plotly_array,
    read_table,
    shown_tokenization,
)
from tests.helpers import APP, CHECKPOINTS_ENV, REPO
from viz.tokens import display_labels, plain_text

SHORT_SENTENCE = "the girl sits."


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny_checkpoint) -> Path:
    """tiny-en-de, a de->en copy of it with its own card, and a broken folder the picker must skip."""
    folder = tmp_path_factory.mktemp("app-checkpoints")
    shutil.copytree(tiny_checkpoint, folder / "tiny-en-de")
    shutil.copytree(tiny_checkpoint, folder / "toy-de-en")
    card = {"source_language": "de", "target_language": "en", "scores": {"test_2016_flickr": {"bleu": 12.5}}}
    (folder / "toy-de-en" / "card.json").write_text(json.dumps(card))
    (folder / "broken").mkdir()
    (folder / "broken" / "card.json").write_text("{}")
    return folder


@pytest.fixture
def app(monkeypatch, checkpoints) -> AppTest:
    monkeypatch.setenv(CHECKPOINTS_ENV, str(checkpoints))
    return AppTest.from_file(APP, default_timeout=60).run()


def translation_shown(app: AppTest) -> str:
    headings = [markdown.value for markdown in app.markdown if markdown.value.startswith("### ")]
    assert len(headings) == 1
    text = headings[0].removeprefix("### ")
    if text.startswith(":orange["):  # a typed target, styled apart from translations
        text = text.removeprefix(":orange[").removesuffix("]")
    return text.replace("\\", "")


def test_starts_and_shows_translation_tokens_and_figures(app, checkpoints):
    assert_ok(app)
    translator = load_checkpoint(checkpoints / "tiny-en-de", device="cpu")
    sentence = app.text_input(key="sentence").value
    expected = translator.trace(sentence, beam_size=1)
    assert translation_shown(app) == expected.translation
    assert app.selectbox(key="checkpoint").value == "tiny-en-de"  # no multi30k-en-de here: the first valid folder
    # the page opens on cross-attention, on the head that reads most like an alignment over the card's examples
    examples = card_examples(read_card(checkpoints / "tiny-en-de"))
    layer, head = readable_cross_head(batch_head_statistics(translator, examples, beam_size=1))
    assert app.segmented_control(key="view").value == "cross"
    assert (app.selectbox(key="layer").value, app.selectbox(key="head").value) == (layer, head)
    assert chart_titles(app)[0] == head_title("cross", layer, head)  # the first chart on the page
    cross = chart_titled(app, head_title("cross", layer, head))
    assert cross["layout"]["xaxis"]["ticktext"] == display_labels(expected.source_pieces)
    assert cross["layout"]["yaxis"]["ticktext"] == display_labels(expected.target_pieces[1:])  # what each step wrote
    # the page runs on the default device (a GPU where there is one) and the expectation on the CPU: equal within
    # float32 sums in another order
    np.testing.assert_allclose(plotly_array(cross["data"][0]["z"]), expected.attention_stack("cross")[layer, head],
                               rtol=0, atol=1e-5)  # fmt: skip
    assert app.query_params == {}  # the readable head is the default: a plain link opens it
    assert chart_titles(app) == [head_title("cross", layer, head)]  # no more: the details are folded
    assert not [element for element in app.get("html") if "<caption>Tokenization" in element.proto.body]
    open_details(app)
    assert shown_tokenization(app)["piece"] == expected.source_pieces
    assert chart_titles(app) == [head_title("cross", layer, head), "Probability of each output token"]
    probabilities = chart_titled(app, "Probability of each output token")
    np.testing.assert_allclose(plotly_array(probabilities["data"][0]["y"]), expected.step_probs, rtol=0, atol=1e-5)


def test_every_checkpoint_folder_is_listed_with_its_card_or_why_it_was_skipped(app, checkpoints):
    listed = [markdown.value.replace("\\", "") for markdown in app.sidebar.expander[0].markdown]
    parameters = json.loads((checkpoints / "tiny-en-de" / "card.json").read_text())["parameters"]
    assert listed[0].startswith(f"**tiny-en-de**: English → German · {parameters:,} parameters")
    assert listed[1].startswith("**toy-de-en**: German → English") and "BLEU 12.5 (test_2016_flickr)" in listed[1]
    assert listed[2].startswith("Skipped **broken**: ") and listed[2].endswith("broken/config.json: file is missing")
    assert app.selectbox(key="checkpoint").options == ["tiny-en-de", "toy-de-en"]


def test_every_chart_exports_png(app):
    for chart in app.get("plotly_chart"):
        config = json.loads(chart.proto.config)
        assert config["toImageButtonOptions"]["format"] == "png"
        assert config["toImageButtonOptions"]["filename"].startswith("tiny-en-de")


def test_editing_the_sentence_changes_translation_and_figures(app, checkpoints):
    before_translation = translation_shown(app)
    before_specs = chart_specs(app)
    app.text_input(key="sentence").input(SHORT_SENTENCE).run()
    assert_ok(app)
    expected = load_checkpoint(checkpoints / "tiny-en-de", device="cpu").trace(SHORT_SENTENCE, beam_size=1)
    assert translation_shown(app) == expected.translation != before_translation
    assert chart_specs(app) != before_specs
    view = chart_titled(app, "Decoder layer")
    assert view["layout"]["xaxis"]["ticktext"] == display_labels(expected.source_pieces)
    assert view["layout"]["yaxis"]["ticktext"] == display_labels(expected.target_pieces[1:])


def test_example_picker_fills_the_sentence(app):
    example = app.selectbox(key="example").options[1]
    app.selectbox(key="example").set_value(example).run()
    assert_ok(app)
    assert app.text_input(key="sentence").value == example
    assert app.selectbox(key="example").value is None  # ready to pick again


def n_steps_shown(app: AppTest) -> int:
    return len(app.select_slider(key="step").options)


def step_heading(app: AppTest) -> str:
    return next(markdown.value for markdown in app.markdown if markdown.value.startswith("**Step "))


def test_step_buttons_move_the_step(app):
    app.segmented_control(key="view").set_value("steps").run()  # one click away from the first screen
    assert step_heading(app).startswith("**Step 1 of")
    step = chart_titled(app, "Step 1: next token and attention")
    assert step["layout"]["xaxis3"]["ticktext"] == display_labels(["<s>"])  # the self-attention panel's keys
    app.button(key="step_next").click().run()
    assert_ok(app)
    assert step_heading(app).startswith("**Step 2 of")
    assert app.select_slider(key="step").value == 1
    step = chart_titled(app, "Step 2: next token and attention")
    assert len(step["layout"]["xaxis3"]["ticktext"]) == 2  # <s> and the first output token
    # the step line writes the pieces as the charts do: no "▁", a continuation marked "·"
    written = [plain_text(label) for label in step["layout"]["xaxis3"]["ticktext"]]
    assert step_heading(app).startswith(
        f"**Step 2 of {n_steps_shown(app)}.** Decoder input so far: `` <s> `` `` {written[1]} ``"
    )
    assert "\u2581" not in step_heading(app)
    app.button(key="step_last").click().run()
    n_steps = len(app.select_slider(key="step").options) - 1
    assert app.select_slider(key="step").options[:2] == ["1", "2"]  # counted as the step line counts
    assert step_heading(app).startswith(f"**Step {n_steps + 1} of {n_steps + 1}")
    app.button(key="step_next").click().run()  # already at the end: stays there
    assert app.select_slider(key="step").value == n_steps
    app.button(key="step_first").click().run()
    assert app.select_slider(key="step").value == 0


@pytest.mark.parametrize("view", ["encoder_self", "decoder_self", "cross"])
@pytest.mark.parametrize("display", ["single", "grid", "heads", "aggregates"])
def test_every_attention_view_draws(app, view, display):
    app.segmented_control(key="view").set_value(view).run()
    app.radio(key="display").set_value(display).run()
    assert_ok(app)
    titles = [spec["layout"]["title"]["text"] for spec in chart_specs(app)]
    around_the_view = ("Probability of each output token", "Step ")
    view_titles = [title for title in titles if not title.startswith(around_the_view)]
    if display == "heads":  # drawn by our component in the browser, not by plotly
        view_titles.append(component_data(app, "attention_explorer.head_view")["title"])
    assert len(view_titles) == 1, titles


def test_head_view_opens_on_the_picked_head_and_draws_the_chosen_heads_and_query(app):
    app.segmented_control(key="view").set_value("cross").run()
    # the pickers count as people do, from 1, where the link and the code count from 0
    assert app.selectbox(key="layer").options[0] == "layer 1" and app.selectbox(key="head").options[0] == "head 1"
    app.selectbox(key="layer").set_value(0).run()
    app.selectbox(key="head").set_value(2).run()
    app.radio(key="display").set_value("heads").run()
    assert_ok(app)
    drawn = component_data(app, "attention_explorer.head_view")
    assert drawn["title"] == "Decoder layer 1 – cross-attention – all heads"
    assert (drawn["heads"], drawn["query"]) == ([2], ALL_QUERIES)  # one readable head, every query token
    app.selectbox(key="head").set_value(3).run()  # untouched, the head view follows the picker
    assert component_data(app, "attention_explorer.head_view")["heads"] == [3]
    assert all("all heads" not in title for title in chart_titles(app))  # drawn by the component, not plotly
    weights = np.array(drawn["weights"])
    assert weights.shape == (4, len(drawn["queries"]), len(drawn["keys"]))
    assert drawn["keys"][-1] == {"text": "</s>", "special": True}  # the source's end, drawn as a special token
    # what the component's click and chip callbacks do: set the page's settings, which the URL keeps
    app.session_state["head_view_heads"] = [1, 3]
    app.session_state["head_view_query"] = 2
    app.run()
    drawn = component_data(app, "attention_explorer.head_view")
    assert (drawn["heads"], drawn["query"]) == ([1, 3], 2)
    assert app.query_params["head_view_heads"] == "1,3" and app.query_params["head_view_query"] == "2"
    app.selectbox(key="layer").set_value(1).run()  # another layer or head picked: the chosen heads stay
    app.selectbox(key="head").set_value(0).run()
    assert component_data(app, "attention_explorer.head_view")["heads"] == [1, 3]


def shown_tables(app: AppTest) -> list[np.ndarray]:
    """The numbers of every table the page's "Show as table" switches drew, one array each (the tokenization table,
    always shown, is not one of them)."""
    arrays = []
    for element in app.get("html"):
        markup = element.proto.body
        for table in markup.split("</table>")[:-1]:
            reader = read_table(table + "</table>")
            if not reader.caption.startswith("Tokenization"):
                arrays.append(np.array([[float(text) for _, _, text in row[1:]] for row in reader.rows[1:]]))
    return arrays


def test_show_as_table_gives_the_figures_numbers_in_the_single_head_and_head_views(app, checkpoints):
    app.segmented_control(key="view").set_value("cross").run()
    app.selectbox(key="layer").set_value(1).run()
    app.selectbox(key="head").set_value(2).run()
    assert shown_tables(app) == []  # off until asked for
    [switch] = [toggle for toggle in app.toggle if toggle.label == "Show as table" and "L1H2" in toggle.key]
    switch.set_value(True).run()
    assert_ok(app)
    chart = chart_titled(app, "Decoder layer 2 – cross-attention – head 3")
    [table] = shown_tables(app)
    np.testing.assert_allclose(table, plotly_array(chart["data"][0]["z"]), atol=5e-4)  # shown to three decimals

    app.radio(key="display").set_value("heads").run()
    app.session_state["head_view_heads"] = [0, 3]
    app.run()
    [switch] = [toggle for toggle in app.toggle if toggle.label == "Show as table" and toggle.key.endswith("-L1")]
    switch.set_value(True).run()
    assert_ok(app)
    translator = load_checkpoint(checkpoints / "tiny-en-de", device="cpu")
    axes = viz.attention_axes(translator.trace(app.text_input(key="sentence").value, beam_size=1), "cross")
    tables = shown_tables(app)
    assert len(tables) == 2  # one per head drawn
    for table, head in zip(tables, [0, 3], strict=True):
        np.testing.assert_allclose(table, viz.head_heatmap(axes, 1, head).data[0].z, atol=5e-4)


def test_attribution_view_shows_each_method_for_the_picked_word(app, checkpoints):
    app.segmented_control(key="view").set_value("attribution").run()
    assert_ok(app)
    app.segmented_control(key="attribution_step").set_value(1).run()
    assert_ok(app)
    translator = load_checkpoint(checkpoints / "tiny-en-de", device="cpu")
    trace = translator.trace(app.text_input(key="sentence").value, beam_size=1)
    figure = chart_titled(app, "Where “")
    assert "(step 2)" in figure["layout"]["title"]["text"]
    methods = ["attention", "value_norm", "grad_attention", "alti_plus"]
    assert figure["layout"]["yaxis"]["ticktext"] == [ATTRIBUTION_NAMES[method] for method in methods]
    shown = plotly_array(figure["data"][0]["z"])
    for row, method in enumerate(methods):
        assert shown[row] == pytest.approx(attribute(translator, trace, method).source[1], abs=1e-6)
    maps = chart_titled(app, "Every output word")["layout"]["annotations"]
    assert [note["text"] for note in maps] == [ATTRIBUTION_NAMES[method] for method in methods]
    bars = chart_titled(app, "Source or own words?")["data"]
    from_source = attribute(translator, trace, "alti_plus").source.sum(axis=1)
    assert plotly_array(bars[0]["y"]) == pytest.approx(from_source, abs=1e-6)
    assert plotly_array(bars[0]["y"]) + plotly_array(bars[1]["y"]) == pytest.approx(1.0)
    assert app.query_params["attribution_step"] == "1"


def test_cross_attention_view_merges_words_and_hides_specials(app):
    sentence = "a man rides a blue bike in the park."  # words the toy tokenizer knows, so no <unk>
    app.text_input(key="sentence").input(sentence).run()
    app.segmented_control(key="view").set_value("cross").run()
    app.selectbox(key="layer").set_value(0).run()
    app.selectbox(key="head").set_value(0).run()
    app.toggle(key="merge_words").set_value(True).run()
    app.toggle(key="show_special").set_value(False).run()
    assert_ok(app)
    cross = chart_titled(app, "Decoder layer 1 – cross-attention – head 1")
    assert cross["layout"]["xaxis"]["ticktext"] == sentence.split()  # "park." is one word: "." continues it
    assert not any("&lt;s&gt;" in label for label in cross["layout"]["yaxis"]["ticktext"])


def test_positional_view(app):
    app.segmented_control(key="view").set_value("positional").run()
    assert_ok(app)
    titles = [spec["layout"]["title"]["text"] for spec in chart_specs(app)]
    assert "Positional encoding added at each position" in titles and "Size of position vs. size of token" in titles
    app.radio(key="positional_stack").set_value("decoder").run()
    assert_ok(app)


def test_switching_checkpoints_uses_the_card(app):
    app.selectbox(key="checkpoint").set_value("toy-de-en").run()
    assert_ok(app)
    captions = [caption.value for caption in app.sidebar.caption]
    assert any("German → English" in caption and "12.5" in caption for caption in captions)
    assert app.selectbox(key="example").options[0].startswith("Ein ")


def test_device_choice_and_cuda_fallback(app):
    app.radio(key="device").set_value("cpu").run()
    assert_ok(app)
    assert "Running on: **cpu**" in [caption.value for caption in app.sidebar.caption]
    app.radio(key="device").set_value("cuda").run()
    assert_ok(app)
    captions = [caption.value for caption in app.sidebar.caption]
    if torch.cuda.is_available():
        assert any(caption.startswith("Running on: **cuda") for caption in captions)
    else:
        assert "Running on: **cpu**" in captions
        assert any("CUDA was requested but is not available" in warning.value for warning in app.sidebar.warning)


def test_beam_search_and_length_limit(app):
    app.radio(key="decoding").set_value("beam").run()
    app.number_input(key="max_new_tokens").set_value(3).run()
    assert_ok(app)
    assert any(markdown.value == "**Translation** (beam search, beam 5)" for markdown in app.markdown)
    probabilities = chart_titled(open_details(app), "Probability of each output token")
    assert len(probabilities["layout"]["xaxis"]["ticktext"]) <= 4  # at most 3 tokens, then </s>


def test_sampling_shows_the_translation_its_seed_draws_and_bad_link_values_fall_back(app, checkpoints):
    app.radio(key="decoding").set_value("sampling").run()
    app.slider(key="temperature").set_value(1.5).run()
    app.number_input(key="top_k").set_value(5).run()
    app.number_input(key="seed").set_value(7).run()
    assert_ok(app)
    sentence = app.text_input(key="sentence").value
    sampling = Sampling(temperature=1.5, top_k=5, seed=7)
    translator = load_checkpoint(checkpoints / "tiny-en-de", device="cpu")
    expected = translator.trace(sentence, sampling=sampling)
    assert expected.translation != translator.translate(sentence, beam_size=1)  # drawn, not searched
    assert translation_shown(app) == expected.translation
    shown = [markdown.value for markdown in app.markdown]
    assert "**Translation** (sampling at temperature 1.5, top-k 5, seed 7)" in shown
    assert {key: app.query_params[key] for key in ("decoding", "temperature", "top_k", "seed")} == {
        "decoding": "sampling",
        "temperature": "1.5",
        "top_k": "5",
        "seed": "7",
    }
    # a link with values out of range opens with the defaults, and nothing crashes
    bad = AppTest.from_file(APP, default_timeout=60)
    bad.query_params.update({"decoding": "sampling", "temperature": "0", "top_k": "-1", "top_p": "nan", "seed": "x"})
    bad.run()
    assert_ok(bad)
    assert [bad.session_state[key] for key in SAMPLING_SETTINGS] == [1.0, 0, 1.0, 0]


def test_a_sampled_step_shows_how_its_token_was_drawn_and_sample_again_lists_the_draws(app, checkpoints):
    app.radio(key="decoding").set_value("sampling").run()
    app.slider(key="temperature").set_value(1.5).run()
    app.segmented_control(key="view").set_value("steps").run()
    app.button(key="step_next").click().run()
    assert_ok(app)
    translator = load_checkpoint(checkpoints / "tiny-en-de", device="cpu")
    trace = translator.trace(app.text_input(key="sentence").value, sampling=Sampling(temperature=1.5))
    draw = explain_sampled_trace(translator, trace)[1]
    bars = chart_titled(app, "Step 2: how the token was drawn")
    for series, expected in zip(bars["data"], (draw.model_probs, draw.tempered_probs, draw.drawn_probs), strict=True):
        np.testing.assert_allclose(plotly_array(series["x"]), expected, atol=1e-6)
    assert any(
        markdown.value.startswith("**Drawn:**") and f"number {draw.rank}," in markdown.value
        for markdown in app.markdown
    )
    assert not app.dataframe  # the draws only once asked for
    app.number_input(key="sample_draws").set_value(6).run()
    app.button(key="sample_again").click().run()
    assert_ok(app)
    table = app.dataframe[0].value
    assert list(table["found by"][:2]) == ["greedy search", "beam search"]
    assert table["times drawn"][2:].sum() == 6  # the sampled rows; greedy's and the beam's count their draws too
    assert app.query_params["sample_draws"] == "6"


def test_teacher_forcing_shows_the_typed_target(app):
    translation = translation_shown(app)
    app.toggle(key="teacher_forcing").set_value(True).run()
    assert app.text_input(key="target").value == translation  # starts from the model's own output
    app.text_input(key="target").input("two dogs").run()
    assert_ok(app)
    assert translation_shown(app) == "two dogs"
    heading = next(markdown.value for markdown in app.markdown if markdown.value.startswith("### "))
    assert heading == "### :orange[two dogs]"  # styled apart from the model's own translations
    assert any(markdown.value.startswith("**Your target** (teacher forcing") for markdown in app.markdown)
    probabilities = chart_titled(open_details(app), "Probability of each output token")
    assert probabilities["layout"]["xaxis"]["ticktext"][-1] == display_labels(["</s>"])[0]


def cut_off_notices(app: AppTest) -> list[str]:
    return [warning.value for warning in app.warning if "was cut off" in warning.value]


def test_a_translation_stopped_by_the_limit_says_so_and_a_typed_target_does_not(app):
    [notice] = cut_off_notices(app)  # the tiny random model never writes </s>: every output is cut off
    assert notice.startswith("The translation was cut off: it reached the limit of ")
    app.number_input(key="max_new_tokens").set_value(3).run()
    assert cut_off_notices(app) == [
        "The translation was cut off: it reached the limit of 3 output tokens before the model ended it. "
        "Raise *Max output tokens* in the sidebar to let it finish."
    ]
    app.toggle(key="teacher_forcing").set_value(True).run()
    app.text_input(key="target").input("two dogs").run()
    assert cut_off_notices(app) == []


def test_stepping_and_switching_views_never_run_the_model_again(app, monkeypatch):
    runs = []
    original = Translator.trace

    def counting_trace(self, *args, **kwargs):
        runs.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Translator, "trace", counting_trace)
    app.segmented_control(key="view").set_value("steps").run()
    app.button(key="step_next").click().run()
    app.segmented_control(key="view").set_value("cross").run()
    app.radio(key="display").set_value("grid").run()
    app.toggle(key="merge_words").set_value(True).run()
    assert_ok(app)
    assert runs == []
    app.text_input(key="sentence").input("a cat sits on the red ball in the water.").run()
    assert runs == [("a cat sits on the red ball in the water.",)]


def test_each_setting_recomputes_exactly_what_depends_on_it(app, monkeypatch):
    """Counted calls: a new sentence, decoding setting, teacher-forced target or checkpoint traces once (and a new
    checkpoint loads once); going back to an earlier one, or changing what is only drawn (view, display, layer,
    head, a table), runs nothing. Sentences no other test uses, so the shared caches cannot answer in advance."""
    from explorer import compute

    traces, loads = [], []
    trace, load = Translator.trace, compute.load_checkpoint

    def counting_trace(self, text, **settings):
        traces.append((self.name, text, settings["beam_size"], settings["max_new_tokens"]))
        return trace(self, text, **settings)

    def counting_load(path, *args, **kwargs):
        loads.append(Path(path).name)
        return load(path, *args, **kwargs)

    monkeypatch.setattr(Translator, "trace", counting_trace)
    monkeypatch.setattr(compute, "load_checkpoint", counting_load)
    first, second = "the small boy sits on a green bike today.", "two old women walk with a dog today."

    def changed(step) -> tuple[list, list]:
        traces.clear()
        loads.clear()
        step()
        assert_ok(app)
        return list(traces), list(loads)

    assert changed(lambda: app.text_input(key="sentence").input(first).run()) == ([("tiny-en-de", first, 1, None)], [])
    assert changed(lambda: app.text_input(key="sentence").input(second).run())[0] == [("tiny-en-de", second, 1, None)]
    assert changed(lambda: app.text_input(key="sentence").input(first).run()) == ([], [])  # cached
    beam = DEFAULT_BEAM_SIZE  # the beam size slider's default
    assert changed(lambda: app.radio(key="decoding").set_value("beam").run())[0] == [("tiny-en-de", first, beam, None)]
    assert changed(lambda: app.number_input(key="max_new_tokens").set_value(5).run())[0] == [
        ("tiny-en-de", first, beam, 5)
    ]
    for only_drawn in (
        lambda: app.segmented_control(key="view").set_value("encoder_self").run(),
        lambda: app.radio(key="display").set_value("grid").run(),
        lambda: app.toggle(key="merge_words").set_value(True).run(),
        lambda: app.toggle(key="show_special").set_value(False).run(),
        lambda: app.segmented_control(key="view").set_value("cross").run(),
        lambda: app.radio(key="display").set_value("single").run(),
        lambda: app.selectbox(key="layer").set_value(1).run(),
        lambda: app.selectbox(key="head").set_value(3).run(),
        lambda: next(t for t in app.toggle if t.label == "Show as table").set_value(True).run(),
    ):
        assert changed(only_drawn) == ([], [])
    app.toggle(key="teacher_forcing").set_value(True).run()
    forced = changed(lambda: app.text_input(key="target").input("zwei alte frauen").run())[0]
    assert [(name, text) for name, text, *_ in forced] == [("tiny-en-de", first)]
    assert changed(lambda: app.text_input(key="target").input("zwei alte frauen").run()) == ([], [])
    app.toggle(key="teacher_forcing").set_value(False).run()
    compute.open_models.clear()  # the other checkpoint may be open from an earlier test
    switched_traces, switched_loads = changed(lambda: app.selectbox(key="checkpoint").set_value("toy-de-en").run())
    assert switched_loads == ["toy-de-en"]  # loaded once, then its sentence and its readable head's examples traced
    assert switched_traces and {name for name, *_ in switched_traces} == {"toy-de-en"}
    assert changed(lambda: app.selectbox(key="checkpoint").set_value("tiny-en-de").run())[1] == ["tiny-en-de"]
    assert changed(lambda: app.selectbox(key="checkpoint").set_value("toy-de-en").run())[1] == []  # both open


def test_trace_downloads(app):
    labels = [button.proto.label for button in app.get("download_button")]
    assert labels == ["Download trace (JSON)", "Download trace (NPZ)", "Download handout (HTML)"]


def test_real_default_checkpoint(monkeypatch):
    if not (REPO / "checkpoints" / "multi30k-en-de" / "model.safetensors").exists():
        pytest.skip("checkpoints/multi30k-en-de is not shipped yet")
    monkeypatch.delenv(CHECKPOINTS_ENV, raising=False)
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert_ok(app)
    assert app.selectbox(key="checkpoint").value == "multi30k-en-de"
    assert translation_shown(app)
    shipped = REPO / "checkpoints" / "multi30k-en-de"
    examples = card_examples(read_card(shipped))
    readable = readable_cross_head(batch_head_statistics(load_checkpoint(shipped, device="cpu"), examples, beam_size=1))
    cross = chart_titles(app)[0]
    assert cross == head_title("cross", *readable)  # the first chart: the measured readable head
    figure = chart_titled(app, cross)
    assert figure["layout"]["xaxis"]["ticktext"][0] == "A" and figure["layout"]["yaxis"]["ticktext"][0] == "Ein"


@pytest.mark.slow  # two page runs of every attribution method on a toy checkpoint
def test_word_sources_say_where_alti_plus_fell_back(tmp_path, monkeypatch):
    """A row where nothing scores above ALTI+'s tolerance keeps its position; the page says so, and only then."""
    from model.training.toy_tasks import TASKS, Lengths, generate_pairs

    (tmp_path / "toy-reverse").symlink_to(REPO / "checkpoints" / "toy-reverse")
    translator = load_checkpoint(tmp_path / "toy-reverse", device="cpu")
    by_fallback = {}
    for source, _ in generate_pairs(TASKS["reverse"], 20, random.Random(5), Lengths()):
        trace = translator.trace(source, beam_size=1)
        fell_back = sum(attribute(translator, trace, "alti_plus").params["fallback_rows"].values()) > 0
        by_fallback.setdefault(fell_back, source)
    assert set(by_fallback) == {True, False}
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path))
    for fell_back, source in by_fallback.items():
        app = AppTest.from_file(APP, default_timeout=60)
        app.query_params.update({"checkpoint": "toy-reverse", "sentence": source, "view": "attribution"})
        app.run()
        assert_ok(app)
        notices = [caption.value for caption in app.caption if caption.value.startswith("ALTI+ fell back in")]
        assert len(notices) == int(fell_back), (source, notices)
