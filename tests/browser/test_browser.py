"""The app in a real headless Chromium: it translates, redraws on a new sentence, steps, and logs no errors.

Starts `streamlit run app.py` on a free local port with a small random checkpoint. Skipped
with the reason when Selenium or Debian's chromium/chromedriver are missing, except in CI
(CI=true), where a missing browser fails. Screenshots go to test-output/.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest

import viz
from explorer.wording import card_examples
from model import load_checkpoint
from model.analysis.head_stats import batch_head_statistics, readable_cross_head
from model.heads import KIND_TITLES, head_title, layer_label
from model.trace import Trace
from tests.browser.pages import (
    chart,
    console_errors,
    drawn_titles,
    load_page,
    received_deltas,
    received_messages,
    shown_sentence,
    step_text,
    translation_text,
    wait_for_page_run,
    wait_for_run_end,
    wait_until,
)
from tests.browser.walk import outside_requests
from tests.browser_helpers import as_new, chromium, click_button, streamlit_server
from tests.helpers import BAD_INPUTS, REPO
from viz.tokens import display_labels

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OUTPUT = REPO / "test-output"
NEW_SENTENCE = "the girl sits."


@pytest.fixture(scope="module")
def browser(browser_ready):
    """One browser for the module's tests (tests/browser_helpers.py ``as_new``), recording its network log: some
    tests read the Streamlit messages the page receives."""
    with chromium(Path(tempfile.mkdtemp(prefix="chromium-profile-")), network_log=True) as shared:
        yield shared


@pytest.fixture
def driver(browser):
    return as_new(browser, 1400, 2200)


def test_translates_redraws_and_steps(server, driver, translator):
    load_page(driver, server)
    first = translator.trace(shown_sentence(driver), beam_size=1)
    assert translation_text(driver) == first.translation
    assert chart(driver, "Decoder layer")["x"] == display_labels(first.source_pieces)
    OUTPUT.mkdir(exist_ok=True)
    driver.save_screenshot(str(OUTPUT / "browser-main-view.png"))

    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, "input[aria-label='Source sentence']")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(NEW_SENTENCE)
    box.send_keys(Keys.ENTER)  # plain Enter translates
    second = translator.trace(NEW_SENTENCE, beam_size=1)
    new_labels = display_labels(second.source_pieces)
    wait_until(driver, lambda d: (chart(d, "Decoder layer") or {}).get("x") == new_labels, "chart not redrawn")
    wait_until(driver, lambda d: translation_text(d) == second.translation, "translation not updated")

    click_button(driver, "Decoding steps")  # one click away from the first screen
    wait_until(driver, lambda d: step_text(d).startswith("Step 1 of"), "the steps view did not open")
    click_button(driver, "Next")
    wait_until(driver, lambda d: step_text(d).startswith("Step 2 of"), "the step did not move")
    read_so_far = display_labels(second.target_pieces[:2])  # <s> and the first output token
    wait_until(
        driver,
        lambda d: (chart(d, "Step 2: next token and attention") or {}).get("x3") == read_so_far,
        "the step's decoder self-attention was not redrawn",
    )
    driver.save_screenshot(str(OUTPUT / "browser-after-step.png"))
    assert console_errors(driver) == []


def test_a_new_head_redraws_the_view_alone_and_keeps_the_link(server, driver):
    """The attention view is a fragment: a head picked reruns it, not the page (every element the server sends
    belongs to the fragment, none goes to the sidebar), and the link follows. A new sentence, a whole-page run,
    shows that the frames read are the page's: it redraws the sidebar outside any fragment."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    load_page(driver, server)
    shown = next(title for title in drawn_titles(driver) if title.startswith("Decoder layer"))
    head = next(head for head in range(1, 5) if not shown.endswith(f"head {head}"))  # as the page counts, from 1
    received_deltas(driver)
    path = "//div[@data-testid='stSelectbox'][.//label[normalize-space()='Head']]//input"
    picker = driver.find_element(By.XPATH, path)
    picker.click()
    picker.send_keys(f"head {head}", Keys.ENTER)
    wait_until(driver, lambda d: chart(d, shown.rsplit(" ", 1)[0] + f" {head}") is not None, "the head not redrawn")
    wait_until(driver, lambda d: f"head={head - 1}" in d.current_url, "the link did not follow the head")  # from 0
    fragment_run = received_deltas(driver)
    assert fragment_run and all(delta.delta.fragment_id for delta in fragment_run)
    box = driver.find_element(By.CSS_SELECTOR, "input[aria-label='Source sentence']")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(NEW_SENTENCE, Keys.ENTER)
    wait_for_page_run(driver, "a whole-page run sent no sidebar element")
    assert console_errors(driver) == []


def test_a_switch_between_views_of_the_sentence_reruns_the_view_alone(server, driver, tmp_path):
    """The view picker and the view are a fragment (explorer.main_area.view_area): a switch between views of the
    sentence reruns it alone (every element sent belongs to a fragment), the link drops the last view's settings and
    the handout holds the view now drawn, not the last one's chart. A switch to the quiz, which hides the
    translation, runs the page."""
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    load_page(driver, server)
    received_deltas(driver)
    click_button(driver, "Decoding steps")
    wait_until(driver, lambda d: step_text(d).startswith("Step 1 of"), "the steps view did not open")
    click_button(driver, "Next")
    wait_until(driver, lambda d: "step=1" in d.current_url, "the link did not follow the step")
    click_button(driver, KIND_TITLES["encoder_self"])
    wait_until(driver, lambda d: chart(d, "Encoder layer") is not None, "the encoder's view did not open")
    wait_until(driver, lambda d: "view=encoder" in d.current_url, "the link did not follow the view")
    assert "step=" not in driver.current_url
    view_runs = received_deltas(driver)
    assert view_runs and all(delta.delta.fragment_id for delta in view_runs)
    click_button(driver, "Download handout (HTML)")
    saved = tmp_path / "tiny-en-de-handout.html"
    wait_until(driver, lambda d: saved.exists() and saved.stat().st_size > 0, "the handout never arrived")
    handout = saved.read_text(encoding="utf-8")
    assert "Encoder layer" in handout and "Step 2:" not in handout
    click_button(driver, "Quiz")
    wait_for_page_run(driver, "the switch to the quiz sent no sidebar element: the page around it was not redrawn")
    wait_until(driver, lambda d: translation_text(d) is None, "the quiz shows the translation")
    assert console_errors(driver) == []


# Each plotly chart's left and bottom margins as the figure asks for them and as plotly.js drew them (its automargin
# grows them, and draws the chart again, where labels stick out).
CHART_MARGINS = """
return [...document.querySelectorAll('.js-plotly-plot')].filter(gd => gd._fullLayout && gd._fullLayout._size)
    .map(gd => ({title: gd.layout.title ? gd.layout.title.text : '', asked: [gd.layout.margin.l, gd.layout.margin.b],
                 drawn: [gd._fullLayout._size.l, gd._fullLayout._size.b]}));
"""


def test_charts_are_drawn_once_their_margins_holding_their_labels(server, driver):
    """viz.fit_margins leaves plotly's automargin nothing to grow (which would draw the chart a second time): in the
    first view, the decoding steps, the all-heads grid and presenter mode's larger fonts."""
    for query in ("", "?view=steps&step=2", "?display=grid", "?presenter=true&view=cross"):
        driver.get(f"{server}/{query}")
        drawn = wait_until(driver, lambda d: d.execute_script(CHART_MARGINS), f"{query or 'the page'}: no chart drawn")
        for margins in drawn:
            assert margins["drawn"] == margins["asked"], (query, margins)
    assert console_errors(driver) == []


# Opens two connections to the page's server the way Streamlit's reconnection does, 50 ms apart.
TWO_RECONNECTIONS = """
const url = location.origin.replace(/^http/, 'ws') + '/_stcore/stream';
window.__extraSockets = [new WebSocket(url)];
setTimeout(() => window.__extraSockets.push(new WebSocket(url)), 50);
"""


def test_a_burst_of_reconnections_asks_for_one_page_run(server, driver):
    """explorer/components/reconnect.js asks for a whole-page run once a burst of reconnections has settled, not once
    per connection (each run would replace the last, and a fragment's run asked for meanwhile)."""
    load_page(driver, server)
    received_messages(driver)
    driver.execute_script(TWO_RECONNECTIONS)
    received = wait_for_run_end(driver, "the reconnection")
    time.sleep(1.5)  # long enough for a second run, asked for 50 ms after the first, to have come
    received.extend(received_messages(driver))
    assert [message.WhichOneof("type") for message in received].count("new_session") == 1


def test_trace_downloads_as_json(server, driver, translator, tmp_path):
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    load_page(driver, server)
    click_button(driver, "Download trace (JSON)")
    saved = tmp_path / "tiny-en-de.json"
    wait_until(driver, lambda d: saved.exists() and saved.stat().st_size > 0, "the JSON file never arrived")
    downloaded = Trace.from_json(saved.read_text(encoding="utf-8"))
    expected = translator.trace(shown_sentence(driver), beam_size=1)
    assert downloaded.translation == expected.translation
    assert downloaded.source_pieces == expected.source_pieces
    assert downloaded.attention.keys() == expected.attention.keys()
    assert console_errors(driver) == []


# JavaScript that reads the head view's lines on screen: (head, query, key) of each one not hidden.
SHOWN_LINES = """
return [...document.querySelectorAll('.hv-figure line')].filter(line => line.style.display !== 'none')
    .map(line => ['head', 'query', 'key'].map(name => Number(line.dataset[name])));
"""


def test_head_view_points_keeps_switches_heads_and_downloads_svg(server, driver, translator, tmp_path):
    """Like BertViz's head view: one readable head at first, a token's lines on pointing, chips switch heads."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    driver.get(f"{server}/?display=heads")
    wait_until(driver, lambda d: d.execute_script(SHOWN_LINES), "the head view drew no lines")
    layer, head = readable_cross_head(batch_head_statistics(translator, card_examples(translator.card), beam_size=1))
    trace = translator.trace(shown_sentence(driver), beam_size=1)
    axes = viz.attention_axes(trace, "cross")
    data = viz.head_view_data(axes.stack[layer], axes.query_pieces, axes.key_pieces)
    weights = np.array(data["weights"])
    lines_of = {h: {(h, q, k) for (q, k), w in np.ndenumerate(weights[h]) if w > 0} for h in range(len(weights))}
    assert set(map(tuple, driver.execute_script(SHOWN_LINES))) == lines_of[head]  # the page's head alone

    query = 1
    ActionChains(driver).move_to_element(driver.find_elements(By.CSS_SELECTOR, ".hv-query")[query]).perform()
    pointed = {line for line in lines_of[head] if line[1] == query}
    wait_until(driver, lambda d: set(map(tuple, d.execute_script(SHOWN_LINES))) == pointed, "pointing showed more")
    driver.find_elements(By.CSS_SELECTOR, ".hv-query")[query].click()  # keeps them, in the URL too
    wait_until(driver, lambda d: f"head_view_query={query}" in d.current_url, "the kept token is not in the URL")
    hint = driver.find_element(By.CSS_SELECTOR, ".hv-hint")
    ActionChains(driver).move_to_element(hint).perform()  # away from the tokens: the kept token's lines stay
    assert set(map(tuple, driver.execute_script(SHOWN_LINES))) == pointed

    other = (head + 1) % len(weights)
    driver.find_elements(By.CSS_SELECTOR, ".hv-chip")[other].click()  # a second head comes on
    both = ",".join(map(str, sorted([head, other])))
    wait_until(driver, lambda d: f"head_view_heads={both.replace(',', '%2C')}" in d.current_url, "chip ignored")
    expected = {line for h in (head, other) for line in lines_of[h] if line[1] == query}
    wait_until(driver, lambda d: set(map(tuple, d.execute_script(SHOWN_LINES))) == expected, "the head is not on")
    ActionChains(driver).double_click(driver.find_elements(By.CSS_SELECTOR, ".hv-chip")[other]).perform()
    wait_until(driver, lambda d: f"head_view_heads={other}" in d.current_url, "double-click did not isolate")
    alone = {line for line in lines_of[other] if line[1] == query}
    wait_until(driver, lambda d: set(map(tuple, d.execute_script(SHOWN_LINES))) == alone, "not that head alone")

    driver.find_element(By.CSS_SELECTOR, ".hv-download-svg").click()
    saved = tmp_path / f"tiny-en-de-cross-heads-L{layer}.svg"
    wait_until(driver, lambda d: saved.exists() and saved.stat().st_size > 0, "the head view's SVG never arrived")
    drawing = ElementTree.parse(saved).getroot()
    assert drawing.tag == "{http://www.w3.org/2000/svg}svg"
    assert f"{head_title('cross', layer)} – all heads" in "".join(drawing.itertext())

    click_button(driver, "Single head")  # a plotly chart: its toolbar's SVG button, beside the camera
    wait_until(driver, lambda d: chart(d, head_title("cross", layer, head)), "the single head never drew")
    figure = driver.find_element(By.CSS_SELECTOR, ".js-plotly-plot")
    ActionChains(driver).move_to_element(figure).perform()
    button = wait_until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .svg-download"), "no SVG")
    button[0].click()
    saved = tmp_path / f"tiny-en-de-cross-single-L{layer}H{head}.svg"
    wait_until(driver, lambda d: saved.exists() and saved.stat().st_size > 0, "the chart's SVG never arrived")
    chart_drawing = ElementTree.parse(saved).getroot()
    assert chart_drawing.tag == "{http://www.w3.org/2000/svg}svg" and "main-svg" in chart_drawing.get("class")

    # one-letter tokens: the title is wider than the lines and tokens, and the drawing is as wide as the title
    driver.get(f"{server}/?sentence=a.&view=encoder&display=heads")
    wait_until(driver, lambda d: d.execute_script(HEAD_VIEW_OVERHANG) is not None, "the short head view never drew")
    assert driver.execute_script(HEAD_VIEW_OVERHANG) == []
    assert console_errors(driver) == []


# JavaScript that finds what of the head view (its title, its colour chips) reaches past the drawing's right edge.
HEAD_VIEW_OVERHANG = """
const svg = [...document.querySelectorAll('.hv-figure')].find(s => s.getAttribute('aria-label').startsWith('Encoder'));
if (!svg) return null;
const right = svg.getBoundingClientRect().right + 0.5;
return [...svg.querySelectorAll('.hv-title, .hv-chip')].filter(part => part.getBoundingClientRect().right > right)
    .map(part => part.textContent);
"""


# JavaScript that measures each plotly chart's title against its chart: [title, title's right edge, chart width].
TITLE_FITS = """
return [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
    const title = gd.querySelector('.gtitle'), chart = gd.querySelector('.main-svg').getBoundingClientRect();
    return title ? [title.textContent, title.getBoundingClientRect().right - chart.left, chart.width] : null;
}).filter(found => found);
"""
# JavaScript that finds panel titles (subplot annotations on one line) running into each other or out of their chart.
PANEL_TITLE_CLASHES = """
const clashes = [];
for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const chart = gd.querySelector('.main-svg').getBoundingClientRect();
    const boxes = [...gd.querySelectorAll('.annotation-text')].map(t => [t.textContent, t.getBoundingClientRect()]);
    for (const [text, box] of boxes) {
        if (box.left < chart.left - 1 || box.right > chart.right + 1) clashes.push(text);
    }
    boxes.forEach(([a, first], i) => boxes.slice(i + 1).forEach(([b, second]) => {
        const sameLine = Math.abs(first.top - second.top) < 4;
        if (sameLine && first.left < second.right && second.left < first.right) clashes.push(a + ' / ' + b);
    }));
}
return clashes;
"""
NARROW_CHARTS = [  # views that put charts side by side or in a column beside the controls (the details folded)
    ("", 1),
    ("view=steps", 1),
    ("view=experiments&experiment=whatif", 3),
    ("view=experiments&experiment=stats", 1),
    ("view=experiments&experiment=internals", 10),
    ("view=attribution", 3),
    ("view=encoder&display=aggregates", 1),
    ("presenter=true", 1),
    ("presenter=true&view=experiments&experiment=stats", 1),
]


def test_chart_titles_fit_their_charts_at_1280x800(server, browser):
    """Titles are never cut off: each chart's title ends inside the chart and panel titles neither leave their chart
    nor run into each other, in every view that narrows charts."""
    driver = as_new(browser, 1280, 800)
    for query, charts_drawn in NARROW_CHARTS:
        driver.get(f"{server}/?{query}")
        readings: list = [None]

        def settled(d, n=charts_drawn, readings=readings) -> bool:
            """Every chart drawn and measured the same twice in a row: the last charts settle their widths."""
            readings.append(d.execute_script(TITLE_FITS))
            return len(readings[-1]) >= n and readings[-1] == readings[-2]

        wait_until(driver, settled, f"{query}: its charts never drew", poll_s=0.3)
        measured = readings[-1]
        assert [(query, title) for title, right, width in measured if right > width] == []
        assert driver.execute_script(PANEL_TITLE_CLASHES) == [], query
        assert console_errors(driver) == []


def test_another_kind_keeps_the_layer_and_head_and_draws_each_display(server, driver, translator):
    """Every view of every checkpoint is opened and every display pressed by the walk (tests/browser/test_walk.py),
    which also fails on console errors and requests outside the server; here the titles say what is drawn."""
    view, kind = "Decoder self-attention", "decoder_self"
    load_page(driver, server)
    click_button(driver, view)
    # the page opened on cross-attention's readable head; its layer and head stay when the view changes
    examples = card_examples(translator.card)
    layer, head = readable_cross_head(batch_head_statistics(translator, examples, beam_size=1))
    wait_until(driver, lambda d: chart(d, head_title(kind, layer, head)), f"{view} view never drew")
    displays = {
        "All heads": view,
        "Head view": f"{head_title(kind, layer)} – all heads",
        "Aggregates": f"{view}, {layer_label(layer)}: aggregates",
    }
    for display, title in displays.items():
        click_button(driver, display)
        wait_until(driver, lambda d, t=title: t in drawn_titles(d), f"{display} never drew")
    assert console_errors(driver) == []
    assert outside_requests(driver) == [], "the page fetched something from outside the local server"


# Sets the sentence box the way typing does (React's value setter, an input event, then blur), so that
# characters chromedriver cannot type (outside the BMP, NUL) still reach the page.
SET_SENTENCE = """
const box = document.querySelector("input[aria-label='Source sentence']");
box.focus();
const text = String.fromCharCode(...arguments[0]);  // UTF-16 code units: NUL survives
Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(box, text);
box.dispatchEvent(new Event('input', {bubbles: true}));
box.blur();  // Streamlit commits a text input on blur (as on Enter)
"""
# The page shows a translation or the message asking for a sentence.
PAGE_SHOWS_A_SENTENCE = """
const heading = document.querySelector("[data-testid='stMarkdownContainer'] h3");
return heading !== null || document.body.innerText.includes('Type a sentence');
"""
# Anything from the hostile inputs that a browser would have turned into live markup.
READ_INJECTED = """
return {
    images: document.querySelectorAll("img[src='x']").length,
    scripts: Array.from(document.scripts).filter(s => s.text.includes('alert')).length,
    bold: Array.from(document.querySelectorAll('b')).filter(b => b.innerText === 'bold').length,
    headings: Array.from(document.querySelectorAll('h1')).filter(h => h.innerText.trim() === 'Title').length,
    page: document.body.innerText,
};
"""


def test_bad_inputs_in_a_real_page_render_as_text(server, driver):
    """Every entry of tests.helpers.BAD_INPUTS typed into the page: each run ends with its translation or a message,
    no element the browser built from markup, no console error. (The toy tokenizer reads markup characters as <unk>:
    that every piece, output and sentence is escaped is asserted element by element in
    tests/explorer/test_app_reliability.py, which fails when escaping is removed.)

    Lone surrogates are left out: no keyboard or clipboard yields them, and the one way in, a script setting the
    box, makes Streamlit's frontend send bad UTF-8 that its server refuses (the run never starts). What our code
    does with them is tested without a browser (tests/explorer, tests/model)."""
    load_page(driver, server)
    for name, text in BAD_INPUTS.items():
        if name == "lone surrogates":
            continue
        received_messages(driver)
        units = text.encode("utf-16-le", "surrogatepass")
        driver.execute_script(
            SET_SENTENCE, [int.from_bytes(units[i : i + 2], "little") for i in range(0, len(units), 2)]
        )
        wait_for_run_end(driver, name)
        assert driver.execute_script(PAGE_SHOWS_A_SENTENCE), f"{name}: no translation or message"
        injected = driver.execute_script(READ_INJECTED)
        assert (injected["images"], injected["scripts"], injected["bold"], injected["headings"]) == (0, 0, 0, 0), name
    assert console_errors(driver) == []


# Where the first chart's cross-attention lies in the viewport, and the page's first viewport size: the first drawn
# chart in page order (its cross-attention panel x2y2 where it has panels: the decoding step's figure), read once a
# chart holding cross-attention has drawn (under load a chart further down, the token probabilities, can draw
# before the first one, which is then not yet a plotly plot).
FIRST_CHART_BOX = """
const drawn = Array.from(document.querySelectorAll('.js-plotly-plot')).filter(gd => gd.querySelector('.nsewdrag'));
const title = gd => (gd.layout.title && gd.layout.title.text) || '';
const heading = document.querySelector("[data-testid='stMarkdownContainer'] h3");
const crossAttention = gd => title(gd).includes('cross-attention') || title(gd).startsWith('Step ');
if (!heading || !drawn.some(crossAttention)) return null;
const gd = drawn[0];
const [panel, x, y] = gd.layout.xaxis2 ? ['x2y2', 'xaxis2', 'yaxis2'] : ['xy', 'xaxis', 'yaxis'];
const box = gd.querySelector(`.nsewdrag[data-subplot="${panel}"]`).getBoundingClientRect();
return {title: title(gd), top: box.top, bottom: box.bottom, rows: gd.layout[y].ticktext,
        columns: gd.layout[x].ticktext, translation_bottom: heading.getBoundingClientRect().bottom,
        labels_bottom: gd.querySelector(`.subplot.${panel} .xaxislayer-above`).getBoundingClientRect().bottom,
        viewport: [window.innerWidth, window.innerHeight]};
"""


PRESENTER_TOP = """
const header = document.querySelector("[data-testid='stHeader']").getBoundingClientRect();
const slide = document.querySelector("[data-testid='stMain'] [data-testid='stMarkdownContainer']");
const sidebar = document.querySelector("[data-testid='stSidebar']");
const box = sidebar.querySelector("input[aria-label='Source sentence']");
return [header.bottom, slide.getBoundingClientRect().top, slide.innerText, box && box.value];
"""


def test_first_screen_at_1280x800_shows_the_translation_and_cross_attention_and_enter_translates(
    browser, tmp_path_factory
):
    """The shipped default checkpoint, as a class first sees it: no scrolling, true labels, Enter; presenter mode's
    keys, also through a sampled translation."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    shipped = REPO / "checkpoints" / "multi30k-en-de"
    if not (shipped / "model.safetensors").exists():
        pytest.skip("checkpoints/multi30k-en-de is not shipped")
    translator = load_checkpoint(shipped, device="cpu")
    folder = tmp_path_factory.mktemp("first-screen")
    (folder / "multi30k-en-de").symlink_to(shipped)
    with streamlit_server(folder, tmp_path_factory.mktemp("streamlit-log")) as url:
        driver = as_new(browser, 1280, 800)
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(url)
        box = wait_until(driver, lambda d: d.execute_script(FIRST_CHART_BOX), "no cross-attention chart ever drew")
        expected = translator.trace(shown_sentence(driver), beam_size=1)
        assert box["viewport"] == [1280, 800]
        assert box["title"].startswith("Decoder layer") and "cross-attention" in box["title"]
        assert 0 < box["translation_bottom"] < box["top"] < box["bottom"] <= 800  # all of it, without scrolling
        assert box["rows"] == display_labels(expected.target_pieces[1:])  # first output piece first, </s> last
        assert box["rows"][-1] == display_labels(["</s>"])[0]
        assert box["columns"] == display_labels(expected.source_pieces)
        new_sentence = "Two dogs are playing in the snow."
        field = driver.find_element(By.CSS_SELECTOR, "input[aria-label='Source sentence']")
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(new_sentence, Keys.ENTER)  # plain Enter: no Ctrl, no button
        second = translator.trace(new_sentence, beam_size=1)
        wait_until(
            driver,
            lambda d: (d.execute_script(FIRST_CHART_BOX) or {}).get("columns") == display_labels(second.source_pieces),
            "Enter did not translate the new sentence",
        )
        assert translation_text(driver) == second.translation
        assert console_errors(driver) == []
        # presenter mode opens the presentation on the decoding steps: the step's cross-attention is on the first screen
        driver.get(f"{url}/?presenter=true")
        wait_until(driver, lambda d: step_text(d).startswith("Step 1 of"), "presenter mode did not start at step 1")
        box = wait_until(driver, lambda d: d.execute_script(FIRST_CHART_BOX), "the step's chart never drew")
        assert box["title"].startswith("Step 1: next token and attention")
        assert box["translation_bottom"] < box["top"] < box["bottom"] <= 800  # every head's row in view
        assert box["bottom"] < box["labels_bottom"] <= 800  # and the source pieces under them
        header_bottom, slide_top, slide_first_line, sidebar_sentence = driver.execute_script(PRESENTER_TOP)
        assert header_bottom <= slide_top  # nothing of the slide under Streamlit's header
        assert sidebar_sentence and slide_first_line.startswith(f"“{sidebar_sentence}” →")  # the source on the slide
        assert console_errors(driver) == []
        # a sampled translation steps by the same keys, each step saying how its token was drawn
        driver.get(f"{url}/?presenter=true&decoding=sampling&temperature=1.5&seed=2")
        wait_until(driver, lambda d: chart(d, "Step 1: how the token was drawn"), "the first draw was never shown")
        driver.execute_script("document.activeElement && document.activeElement.blur()")
        ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()  # the Next button's shortcut
        wait_until(driver, lambda d: chart(d, "Step 2: how the token was drawn"), "the Right key did not step")
        assert step_text(driver).startswith("Step 2 of") and console_errors(driver) == []
