"""What the browser tests read from a page in headless Chromium: its charts, translation, step and sentence box,
its console errors, axe-core's accessibility violations, and waiting for it (tests/browser/test_browser.py,
test_many_pages.py, test_replicas.py, test_accessibility.py)."""

from __future__ import annotations

import os

from explorer.page import DETAILS_LABEL
from model.trace import Trace
from tests.helpers import REPO
from viz.tokens import display_labels

# axe-core, the npm package in tests/browser/package.json (.ci/run installs it with npm ci), and how it is run: the
# WCAG 2.1 A and AA rules; serious and critical violations fail
AXE = REPO / "tests" / "browser" / "node_modules" / "axe-core" / "axe.min.js"
WCAG_21_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING = ("serious", "critical")
RUN_AXE = """const done = arguments[arguments.length - 1];
axe.run(document, {runOnly: {type: 'tag', values: arguments[0]}}).then(result => done(result.violations));"""
WAIT_S = 90  # an upper bound for the page to react on a busy 2-core machine, not a timing assertion
# JavaScript that reads what plotly drew: each chart's title and tick labels from its graph div (a figure of panels:
# its first panel's, and its third panel's columns).
READ_CHARTS = """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    title: (gd.layout.title && gd.layout.title.text) || '',
    x: (gd.layout.xaxis && gd.layout.xaxis.ticktext) || [],
    y: (gd.layout.yaxis && gd.layout.yaxis.ticktext) || [],
    x3: (gd.layout.xaxis3 && gd.layout.xaxis3.ticktext) || [],  // a third panel's (a decoding step's self-attention)
}));
"""


def wait_until(driver, condition, message: str, poll_s: float = 0.5):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    # A page script that outlasts the driver's script timeout means a renderer starved of CPU (four pages on two slow
    # cores), not a wrong page: poll again until WAIT_S is spent.
    return WebDriverWait(driver, WAIT_S, poll_frequency=poll_s, ignored_exceptions=[TimeoutException]).until(
        condition, message
    )


def charts(driver) -> list[dict]:
    return driver.execute_script(READ_CHARTS)


def chart(driver, title_start: str) -> dict | None:
    matches = [found for found in charts(driver) if found["title"].startswith(title_start)]
    return matches[0] if len(matches) == 1 else None


def drawn_titles(driver) -> list[str]:
    """The titles of plotly's charts and of the head view (our component draws its title in its SVG)."""
    head_views = driver.execute_script(
        "return [...document.querySelectorAll('.hv-figure')].map(svg => svg.getAttribute('aria-label'))"
    )
    return [found["title"] for found in charts(driver)] + head_views


def translation_text(driver) -> str | None:
    from selenium.webdriver.common.by import By

    headings = driver.find_elements(By.CSS_SELECTOR, "[data-testid='stMarkdownContainer'] h3")
    return headings[0].text.strip() if headings else None


def step_text(driver) -> str:
    from selenium.webdriver.common.by import By

    paragraphs = driver.find_elements(By.XPATH, "//p[strong[starts-with(normalize-space(.), 'Step ')]]")
    return paragraphs[0].text if paragraphs else ""


def load_page(driver, url: str) -> None:
    driver.get(url)
    wait_until(driver, lambda d: chart(d, "Decoder layer") and translation_text(d), "page never drew its charts")


def console_errors(driver) -> list[dict]:
    """Every SEVERE console entry. Nothing is filtered: Streamlit and plotly log no errors on this page."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def driver_sentence(driver) -> str | None:
    """The sentence box's text, or None while the page shows no box (or is replacing it)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    boxes = driver.find_elements(By.CSS_SELECTOR, "input[aria-label='Source sentence']")
    try:
        return boxes[0].get_attribute("value") if boxes else None
    except StaleElementReferenceException:
        return None


def shown_sentence(driver) -> str:
    """The sentence box's text, waiting for the box: a drawn chart or head view does not mean the box is there.

    CI once read no box at all right after the head view drew (a run replacing the page's elements).
    """

    def read(page) -> list[str] | None:
        sentence = driver_sentence(page)
        return None if sentence is None else [sentence]  # in a list, so that an empty sentence counts as read

    return wait_until(driver, read, "the page shows no sentence box")[0]


# One round trip for everything a classroom page is checked on: four pages poll at once on two cores.
READ_PAGE = """
const box = document.querySelector("input[aria-label='Source sentence']");
const heading = document.querySelector("[data-testid='stMarkdownContainer'] h3");
const step = Array.from(document.querySelectorAll('p > strong'))
    .find(strong => strong.innerText.trim().startsWith('Step '));
const stepFigure = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .find(gd => ((gd.layout.title && gd.layout.title.text) || '').startsWith('Step '));
return {
    sentence: box ? box.value : null,
    translation: heading ? heading.innerText.trim() : null,
    step: step ? step.parentElement.innerText : '',
    source: stepFigure && stepFigure.layout.xaxis2 ? stepFigure.layout.xaxis2.ticktext : null,  // its cross-attention
};
"""


def shows(driver, sentence: str, expected: Trace, step: int) -> bool:
    """The page holds this sentence, its translation, its source tokens and this decoding step."""
    page = driver.execute_script(READ_PAGE)
    return (
        page["sentence"] == sentence
        and page["translation"] == expected.translation
        and page["source"] == display_labels(expected.source_pieces)
        and page["step"].startswith(f"Step {step + 1} of {expected.n_steps}.")
    )


def open_details(driver) -> None:
    """Open the page's folded section and wait for its tokenization table (drawn only once the section is open)."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.XPATH, f"//summary[.//*[normalize-space()='{DETAILS_LABEL}']]").click()
    wait_until(
        driver,
        lambda d: d.execute_script(
            "return [...document.querySelectorAll('caption')].some(c => c.textContent.startsWith('Tokenization'))"
        ),
        "the details never opened",
    )


def in_parallel(function, *argument_lists) -> list:
    """Run ``function`` once per page, each in its own thread; re-raise the first failure."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(argument_lists[0])) as pool:
        return list(pool.map(function, *argument_lists))


def received_messages(driver) -> list:
    """The Streamlit messages (ForwardMsg protobufs) the page received since this was last called; the driver must
    record its network log (``chromium(..., network_log=True)``). A delta names the fragment it belongs to
    (``delta.fragment_id``, empty for a whole-page run's element) and where it goes (``metadata.delta_path``, whose
    first number is the root container: 0 the main area, 1 the sidebar); ``script_finished`` ends each run."""
    import base64
    import json

    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    messages = []
    for entry in driver.get_log("performance"):
        event = json.loads(entry["message"])["message"]
        if event["method"] == "Network.webSocketFrameReceived" and event["params"]["response"]["opcode"] == 2:
            messages.append(ForwardMsg.FromString(base64.b64decode(event["params"]["response"]["payloadData"])))
    return messages


def received_deltas(driver) -> list:
    """The deltas among ``received_messages``."""
    return [message for message in received_messages(driver) if message.WhichOneof("type") == "delta"]


def wait_for_run_end(driver, what: str) -> list:
    """Wait for the server to say a run has finished (``received_messages`` drained first, before the run starts);
    returns the messages read meanwhile."""
    received: list = []

    def finished(page) -> bool:
        received.extend(received_messages(page))
        return any(message.WhichOneof("type") == "script_finished" for message in received)

    wait_until(driver, finished, f"{what}: the run never finished", poll_s=0.1)
    return received


def wait_for_page_run(driver, message: str) -> None:
    """Wait for a whole-page run: one that draws the sidebar (``delta_path[0] == 1``) outside any fragment."""
    received: list = []
    wait_until(
        driver,
        lambda d: (
            received.extend(received_deltas(d))
            or any(not delta.delta.fragment_id and delta.metadata.delta_path[0] == 1 for delta in received)
        ),
        message,
    )


def axe_source() -> str | None:
    """axe-core's script; None when it is not installed, except in CI, where that fails the test."""
    import pytest

    if not AXE.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"accessibility tests must run in CI: {AXE.relative_to(REPO)} is missing (npm ci)")
        return None
    return AXE.read_text(encoding="utf-8")


def blocking_violations(driver, axe_script: str) -> list[str]:
    """axe's serious and critical violations of the WCAG 2.1 A/AA rules on the page now, one line each."""
    if not driver.execute_script("return typeof axe !== 'undefined'"):
        driver.execute_script(axe_script)
    found = driver.execute_async_script(RUN_AXE, WCAG_21_AA)
    return [
        f"{violation['id']} ({violation['impact']}): {violation['help']}: "
        + " | ".join(node["html"][:120] for node in violation["nodes"][:5])
        for violation in found
        if violation["impact"] in BLOCKING
    ]
