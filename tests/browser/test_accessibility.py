"""The page as a student with a screen reader, a keyboard or a zoomed browser meets it (docs/accessibility.md).

axe-core (the npm package in tests/browser/package.json, which `.ci/run` installs with `npm ci`) checks the WCAG 2.1
A and AA rules in every view, every experiment, presenter mode and the exported handout, in headless Chromium at
1280x800 on the shipped default checkpoint (a class's pages: tests/browser/test_replicas.py). Skipped with the
reason when Chromium or axe-core is missing, except under CI=true, where either missing fails.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from explorer import views
from explorer.components.assistive import SENTENCE_BOX
from explorer.views.experiments import EXPERIMENTS
from tests.browser.pages import (
    AXE,
    axe_source,
    blocking_violations,
    driver_sentence,
    load_page,
    open_details,
    received_messages,
    translation_text,
    wait_until,
)
from tests.browser.walk import SECTION_STATE
from tests.browser_helpers import as_new, chromium, click_button, streamlit_server
from tests.helpers import REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# A teacher's sentence, not an image caption: the page adds its out-of-domain notice, which is checked too.
SENTENCE = "The committee will publish its annual report next spring."
SETTLED = """return !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector('[data-stale="true"]') && !!document.querySelector('[data-testid="stMain"]')"""


@pytest.fixture(scope="module")
def axe_script(browser_ready) -> str:
    source = axe_source()
    if source is None:
        pytest.skip(f"{AXE.relative_to(REPO)} is missing (npm ci --prefix tests/browser)")
    return source


@pytest.fixture(scope="module")
def shipped_server(browser_ready, tmp_path_factory):
    """The app on the shipped checkpoints, as a class meets it."""
    with streamlit_server(REPO / "checkpoints", tmp_path_factory.mktemp("streamlit-log")) as url:
        yield url


@pytest.fixture(scope="module")
def browser(browser_ready):
    """One browser for the module's tests (tests/browser_helpers.py ``as_new``), recording its network log."""
    with chromium(Path(tempfile.mkdtemp(prefix="chromium-profile-")), 1280, 800, network_log=True) as shared:
        shared.set_script_timeout(120)  # axe on a whole page of charts, on a busy machine
        yield shared


@pytest.fixture
def driver(browser):
    return as_new(browser, 1280, 800)


def act_and_settle(driver, act: Callable[[], object]) -> None:
    """Do ``act`` (a click, a new address), then wait until its run has ended, the server has gone quiet (a widget's
    own rerun may follow the first run) and nothing stale (faded) is left for axe to misjudge. An act that starts no
    run (the view already shown) settles once nothing has come for a while. The driver records its network log."""
    received_messages(driver)
    act()
    received: list = []
    started = time.monotonic()

    def quiet(page) -> bool:
        new = received_messages(page)
        received.extend(new)
        finished = any(message.WhichOneof("type") == "script_finished" for message in received)
        no_run = not received and time.monotonic() - started > 1.5
        return not new and (finished or no_run) and page.execute_script(SETTLED)

    wait_until(driver, quiet, "the page never finished its run", poll_s=0.4)


def test_no_serious_violations_in_any_view_experiment_or_presenter_mode(shipped_server, driver, axe_script):
    load_page(driver, f"{shipped_server}/?sentence={SENTENCE.replace(' ', '+')}")
    assert driver.execute_script("return document.body.innerText.includes('This sentence is unlike')")  # scanned too
    click_button(driver, "Show as table")  # the first chart's table is checked too
    wait_until(driver, lambda d: d.execute_script("return !!document.querySelector('table.figure-table')"), "no table")
    open_details(driver)  # and the folded section's tokenization table and probability chart
    report: dict[str, list[str]] = {}
    for view in views.VIEWS:
        if view.presenter_only:
            continue  # scanned in presenter mode, below
        act_and_settle(driver, lambda label=view.label: click_button(driver, label))
        report[view.label] = blocking_violations(driver, axe_script)
        if view.key == "experiments":
            for experiment in EXPERIMENTS:
                act_and_settle(driver, lambda label=experiment.label: click_button(driver, label))
                report[f"Experiments / {experiment.label}"] = blocking_violations(driver, axe_script)
    act_and_settle(driver, lambda: driver.get(f"{shipped_server}/?presenter=true"))
    report["presenter mode"] = blocking_violations(driver, axe_script)
    for view in views.VIEWS:
        if view.presenter_only:  # the map of the model, large
            act_and_settle(driver, lambda label=view.label: click_button(driver, label))
            report[f"presenter mode / {view.label}"] = blocking_violations(driver, axe_script)
    assert len(report) == len(list(views.VIEWS)) + len(list(EXPERIMENTS)) + 1
    assert {state: found for state, found in report.items() if found} == {}


def test_no_serious_violations_in_the_exported_handout(handout, driver, axe_script, tmp_path):
    document, sections = handout
    path = tmp_path / "handout.html"
    path.write_text(document, encoding="utf-8")
    driver.get(path.as_uri())
    n_charts = sum(1 for section in sections if section.figure)
    wait_until(
        driver,
        lambda d: d.execute_script("return document.querySelectorAll('.js-plotly-plot .main-svg').length") >= n_charts,
        "the handout's charts were never drawn",
    )
    assert blocking_violations(driver, axe_script) == []


# What the keyboard has reached: its tag, label and text, to find the stops by name.
ACTIVE = """const e = document.activeElement;
return {tag: e.tagName, label: e.getAttribute('aria-label') || '', text: (e.innerText || '').trim()};"""
# The focused element's widget (with its focus ring, which may lie outside the element itself).
WIDGET = "return document.activeElement.closest('[data-testid=\"stElementContainer\"]') || document.activeElement;"


def focus_is_visible(driver) -> bool:
    """Whether the focused control looks different without the focus: its widget drawn focused, then blurred, then
    focused again. The text cursor (it blinks) is hidden and a selection collapsed: neither is the focus ring."""
    element = driver.execute_script(
        "const e = document.activeElement; e.style.caretColor = 'transparent';"
        "if (e.setSelectionRange) e.setSelectionRange(e.value.length, e.value.length); return e;"
    )
    focused = driver.execute_script(WIDGET).screenshot_as_png
    driver.execute_script("arguments[0].blur()", element)
    blurred = driver.execute_script("return arguments[0].closest('[data-testid=\"stElementContainer\"]')", element)
    unfocused = blurred.screenshot_as_png
    driver.execute_script("arguments[0].focus()", element)
    return focused != unfocused


def press(driver, *keys: str) -> dict:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(*keys).perform()
    time.sleep(0.2)
    return driver.execute_script(ACTIVE)


def test_keyboard_alone_translates_a_new_sentence_and_switches_the_view(shipped_server, driver):
    """Tab to the skip link, Enter, type, Enter; Tab to the view picker, an arrow key to the next view, Enter.
    Each control reached shows where the focus is."""
    from selenium.webdriver.common.keys import Keys

    load_page(driver, shipped_server)
    first = translation_text(driver)

    stops = [press(driver, Keys.TAB) for _ in range(2)]
    assert stops[-1]["text"] == "Skip to sentence", stops  # first after Streamlit's own skip link
    assert driver.execute_script("return document.activeElement.getBoundingClientRect().width") > 1  # shown
    assert press(driver, Keys.ENTER)["label"] == "Source sentence"

    press(driver, "Two cats sleep on a sofa.")  # the link selected the old sentence: typing replaces it
    press(driver, Keys.ENTER)
    wait_until(driver, lambda d: translation_text(d) not in (None, first), "Enter did not translate the new sentence")
    assert driver_sentence(driver) == "Two cats sleep on a sofa."
    assert driver.execute_script(ACTIVE)["label"] == "Source sentence"
    assert focus_is_visible(driver)
    announced = driver.execute_script(
        "return document.getElementById('attention-explorer-announcer-translation').textContent"
    )
    assert announced == f"Translation: {translation_text(driver)}"

    for _ in range(10):
        if press(driver, Keys.TAB)["text"] == "Cross-attention":
            break
    assert driver.execute_script(ACTIVE)["text"] == "Cross-attention", "Tab never reached the view picker"
    assert focus_is_visible(driver)
    assert press(driver, Keys.ARROW_RIGHT)["text"] == "Decoding steps"
    press(driver, Keys.ENTER)
    wait_until(
        driver,
        lambda d: d.execute_script("return document.querySelector('[aria-label=\"View\"] [data-selected=true]')"
                                   "?.innerText") == "Decoding steps",
        "Enter did not open the decoding steps",
    )  # fmt: skip


def test_at_200_percent_zoom_every_control_is_still_there(shipped_server, driver):
    """A 1280x800 window zoomed to 200% is a 640x400 page: nothing is cut off sideways, and the sentence box, the
    view picker and the layer and head pickers can still be reached, the sidebar's controls behind its button."""
    from selenium.webdriver.common.by import By

    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 640, "height": 400, "deviceScaleFactor": 2, "mobile": False}
    )
    load_page(driver, shipped_server)
    assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    for selector in (
        SENTENCE_BOX,
        "[aria-label='View'] button",
        "input[aria-label='Layer']",
        "input[aria-label='Head']",
    ):
        element = driver.find_element(By.CSS_SELECTOR, selector)
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
        assert element.is_displayed(), selector
        box = driver.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.left, r.right]", element)
        assert 0 <= box[0] and box[1] <= 640, (selector, box)  # inside the page, not beyond its right edge
    driver.find_element(By.CSS_SELECTOR, "[data-testid='stExpandSidebarButton']").click()
    wait_until(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, "input[aria-label='Checkpoint']").is_displayed(),
        "the sidebar's checkpoint picker never came into view",
    )


# Records how long each animation the page starts will run (its active duration, in ms), wrapping the page's own
# Element.prototype.animate.
RECORD_ANIMATIONS = """
const animate = Element.prototype.animate;
window.startedAnimations = [];
Element.prototype.animate = function (keyframes, options) {
    const animation = animate.call(this, keyframes, options);
    window.startedAnimations.push(animation.effect.getComputedTiming().activeDuration);
    return animation;
};"""
ELEMENTS_WITH_A_TRANSITION = """return [...document.querySelectorAll('*')].filter(
    element => getComputedStyle(element).transitionDuration.split(',').some(duration => parseFloat(duration) > 0)
).length"""


def fold_and_open_a_section(driver) -> tuple[list[float], int]:
    """Press the first "How to read this" twice, waiting each time until it shows as pressed (folded or open, its
    content hidden or shown): the animations' durations and how many elements have a CSS transition."""
    from selenium.webdriver.common.by import By

    driver.execute_script("window.startedAnimations = []")
    summary = driver.find_element(By.XPATH, "//summary[.//*[contains(text(), 'How to read this')]]")
    for _ in range(2):
        wanted = "folded" if driver.execute_script(SECTION_STATE, summary) == "open" else "open"
        summary.click()
        wait_until(driver, lambda d, w=wanted: d.execute_script(SECTION_STATE, summary) == w, f"not {wanted}")
    return driver.execute_script("return window.startedAnimations"), driver.execute_script(ELEMENTS_WITH_A_TRANSITION)


def test_sections_open_at_once_when_the_system_asks_for_less_motion_and_slide_otherwise(shipped_server, driver):
    """With prefers-reduced-motion: reduce (WCAG 2.3.3; the suite's browsers ask for it, tests/browser_helpers.py) a
    section folds and opens, its content hidden and shown, with animations of no duration, and no element of the
    page keeps a CSS transition; with no preference the page is Streamlit's own, sliding. The page follows the
    setting as it changes, without a reload."""

    def asking(motion: str) -> None:
        features = [{"name": "prefers-reduced-motion", "value": motion}] if motion else []
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": features})

    asking("reduce")
    try:
        load_page(driver, shipped_server)
        wait_until(driver, lambda d: d.execute_script("return !!window.attentionExplorerReducedMotion"), "not mounted")
        driver.execute_script(RECORD_ANIMATIONS)
        reduced_durations, reduced_moving = fold_and_open_a_section(driver)
        asking("no-preference")
        own_durations, own_moving = fold_and_open_a_section(driver)
    finally:
        asking("")
    assert len(reduced_durations) == 2 and set(reduced_durations) == {0} and reduced_moving == 0
    assert len(own_durations) == 2 and min(own_durations) > 0 and own_moving > 0
