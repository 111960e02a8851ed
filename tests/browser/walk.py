"""A walk through the whole page as a person would take it: every view of the picker and, in each, every control it
offers (button, toggle, radio, select, multiselect, slider, pills, number box, folded section, download), one value
change each; presenter mode on and off; the decoding steps' keys.

The controls are found in the page as Streamlit draws them (by their ``data-testid``), not from a list kept here: a
control added to the page is pressed by the next walk without a new test. After every action the walk waits for the
run it started to end (the ``script_finished`` message) and records as a problem an exception element, a console
error, a download that never arrives, a run that never ends, a section stuck between open and folded (its content
not shown), or text cut off (a control's label ended with an ellipsis, a chart's text outside the chart)
(tests/browser/test_walk.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from explorer.main_area import VIEW_KEY
from tests.browser.pages import WAIT_S, console_errors, received_messages

# the browser keeps 250 resource timings by default and drops later ones: a walk keeps them all for outside_requests
KEEP_EVERY_REQUEST = "performance.setResourceTimingBufferSize(100000)"
QUIET_S = 0.15  # a run is over when no message came for this long after its script_finished
STALE_RETRIES = 3  # a control replaced by the page's own redraw while being pressed is found again this often
NO_RUN_S = 1.0  # an action that starts no run (a folded section, a download) shows no message for this long
MAX_ACTIONS_PER_VIEW = 60  # a bound on one view's walk: a control that came back new after every press would loop
# Pickers whose options are parts of the page with controls of their own: each option is opened and walked.
PARTS_PICKERS = {("choice", "Experiment")}
# Controls whose one value change would end the walk rather than test a view: the walk's own picker and the
# checkpoint, which the walk is run on (tests/browser/test_walk.py opens each). Presenter mode is walked on its own
# (walk_page), with the keys it is for.
NOT_WALKED = {
    ("around", "choice", "View"),
    ("sidebar", "choice", "View"),
    ("sidebar", "select", "Checkpoint"),
    ("sidebar", "toggle", "Presenter mode"),
}

SELECTORS = {
    "button": '[data-testid="stButton"] button',
    "download": '[data-testid="stDownloadButton"] button',
    "toggle": '[data-testid="stCheckbox"]',
    "radio": '[data-testid="stRadio"]',
    "select": '[data-testid="stSelectbox"]',
    "multiselect": '[data-testid="stMultiSelect"]',
    "slider": '[data-testid="stSlider"]',
    "choice": '[data-testid="stButtonGroup"]',
    "number": '[data-testid="stNumberInput"]',
    "section": '[data-testid="stExpander"] summary',
}
RIGHT, LEFT = "\ue014", "\ue012"  # selenium's Keys.ARROW_RIGHT and ARROW_LEFT
KEY_NAMES = {RIGHT: "Right", LEFT: "Left"}
# What the server sends for a run; a deferred download's file or a heartbeat's answer is no run.
RUN_MESSAGES = {"new_session", "session_status_changed", "delta", "script_finished"}
# Where the walk looks: the sidebar; the view (explorer.main_area.VIEW_KEY's container); the view's surroundings, the
# translation and the details, the same for every view and so walked once.
VIEW = f".st-key-{VIEW_KEY}"
ROOTS = {"sidebar": '[data-testid="stSidebar"]', "view": VIEW, "around": '[data-testid="stMain"]'}
# What a person reads as a control's name: a button's or toggle's text, else the widget's label; where a control is.
LABEL_OF = """
function labelOf(kind, node) {
    if (['button', 'download', 'section', 'toggle'].includes(kind)) {  // its text, not its icon's ligature name
        const text = node.querySelector('[data-testid="stMarkdownContainer"]');
        return ((text && text.innerText) || node.getAttribute('aria-label') || '').trim();
    }
    const label = node.querySelector('[data-testid="stWidgetLabel"]');
    return label ? label.innerText.trim() : '';
}
// drawn: not hidden, not inside a folded section (whose content keeps its boxes but is not rendered)
function drawn(node) { return node.getClientRects().length > 0 && node.checkVisibility({contentVisibilityAuto: true}); }
function inRoot(where, node) { return where !== 'around' || !node.closest('VIEW'); }
""".replace("'VIEW'", repr(VIEW))
# Every control on the page, in the page's order: {where, kind, label, index, enabled}; ``index`` tells apart
# controls of one kind that share a label.
FIND_CONTROLS = (
    LABEL_OF
    + """
const [roots, selectors] = arguments;
const out = [];
for (const [where, rootSelector] of Object.entries(roots)) {
    const root = document.querySelector(rootSelector);
    if (!root) continue;
    for (const [kind, query] of Object.entries(selectors)) {
        const seen = {};
        for (const node of [...root.querySelectorAll(query)].filter(drawn).filter(node => inRoot(where, node))) {
            const label = labelOf(kind, node);
            seen[label] = (seen[label] || 0) + 1;
            const enabled = kind === 'button' || kind === 'download' ? !node.disabled
                : !node.querySelector('input:disabled, [aria-disabled="true"]');
            out.push({where, kind, label, index: seen[label] - 1, enabled});
        }
    }
}
return out;
"""
)
# Text a person cannot read whole: a control's label that Streamlit ended with an ellipsis, and a chart's text
# (title, axis or colour bar title, tick label) that runs outside the chart, where the browser cuts it off.
FIND_CUT_TEXT = """
const cut = [];
for (const label of document.querySelectorAll(
        '[data-testid="stCheckbox"] .stMarkdownEllipsis, [data-testid="stWidgetLabel"] .stMarkdownEllipsis')) {
    if (label.checkVisibility() && label.scrollWidth > label.clientWidth + 1) cut.push(`label "${label.innerText}"`);
}
for (const chart of document.querySelectorAll('.js-plotly-plot')) {
    if (!chart.checkVisibility()) continue;
    const box = chart.querySelector('.main-svg').getBoundingClientRect();
    const title = (chart.layout.title && chart.layout.title.text) || '';
    const texts = '.gtitle, .g-xtitle text, .g-ytitle text, .cbtitle text, .xtick text, .ytick text';
    for (const text of chart.querySelectorAll(texts)) {
        const own = text.getBoundingClientRect();
        if (own.width && (own.left < box.left - 1 || own.right > box.right + 1 || own.top < box.top - 1
                          || own.bottom > box.bottom + 1)) {
            cut.push(`chart "${title}": "${text.textContent}"`);
        }
    }
}
return cut;
"""
# A folded section as a person sees it after a press: open with its content shown, or folded to its summary; in
# between while it slides (the summary: arguments[0]).
SECTION_STATE = """const summary = arguments[0], details = summary.parentElement;
const content = details.getBoundingClientRect().height - summary.getBoundingClientRect().height;
return details.open && content > 20 ? 'open' : !details.open && content < 5 ? 'folded' : 'between';"""
SECTION_SETTLE_S = 5.0  # Streamlit slides a section open or folded in half a second
# The element of one control, found again as FIND_CONTROLS found it: a run may have replaced the one seen before.
FIND_ONE = (
    LABEL_OF
    + """
const [where, rootSelector, query, kind, label, index] = arguments;
const root = document.querySelector(rootSelector);
if (!root) return null;
return [...root.querySelectorAll(query)].filter(drawn).filter(node => inRoot(where, node))
    .filter(node => labelOf(kind, node) === label)[index] || null;
"""
)


@dataclass(frozen=True)
class Control:
    where: str  # a key of ROOTS
    kind: str
    label: str
    index: int = 0

    def __str__(self) -> str:
        suffix = f" #{self.index + 1}" if self.index else ""
        return f"{self.where} {self.kind} {self.label!r}{suffix}"


@dataclass
class Walk:
    """What a walk did, in order, and what it found wrong (each problem says after which action)."""

    driver: object
    downloads: Path
    log: Callable[[str], None] | None = None  # told each action as it is done (a walk takes minutes)
    pressed: list[str] = field(default_factory=list)  # every action, in words, in order
    problems: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=list)  # the views opened
    changed: list[Control] = field(default_factory=list)  # the controls whose value the walk changed
    keys_pressed: list[str] = field(default_factory=list)
    cut: set[str] = field(default_factory=set)  # the cut-off texts found so far (each reported once)

    def controls(self) -> list[tuple[Control, bool]]:
        found = self.driver.execute_script(FIND_CONTROLS, ROOTS, SELECTORS)
        return [(Control(c["where"], c["kind"], c["label"], c["index"]), c["enabled"]) for c in found]

    def element(self, control: Control):
        return self.driver.execute_script(
            FIND_ONE,
            control.where,
            ROOTS[control.where],
            SELECTORS[control.kind],
            control.kind,
            control.label,
            control.index,
        )

    def act(self, context: str, control: Control, option: str | None = None) -> None:
        """One value change of ``control`` (to ``option``, for a choice), then wait for its run and note what went
        wrong."""
        received_messages(self.driver)  # drained: what comes now belongs to this action
        before = set(self.downloads.iterdir())
        what = f"{context}: {control}"
        done = self.change(control, option)
        if done is None:
            self.pressed.append(f"{what} (nothing to change)")
            return
        self.pressed.append(f"{what} -> {done}")
        self.changed.append(control)
        if self.log is not None:
            self.log(self.pressed[-1])
        self.settle(what, expect_run=control.kind not in ("section", "download"))
        if control.kind == "download":
            self.wait_for_download(what, before)
        if control.kind == "section":
            self.wait_for_section(what, control)

    def change(self, control: Control, option: str | None) -> str | None:
        """Find the control and change it. A page that redraws by itself (the Train view while a training runs, once
        a second) may replace the control between finding and pressing it: it is found again, as a person would
        press the redrawn one."""
        from selenium.common.exceptions import StaleElementReferenceException

        for attempt in range(STALE_RETRIES + 1):
            element = self.element(control)
            try:
                if option:
                    return pick_choice(self.driver, element, option)
                return ACTIONS[control.kind](self.driver, element)
            except StaleElementReferenceException:
                if attempt == STALE_RETRIES:
                    raise
        return None

    def keys(self, context: str, *keys: str) -> None:
        """Press keys on the page (its keyboard shortcuts), each followed by the run it starts."""
        from selenium.webdriver.common.action_chains import ActionChains

        for key in keys:
            received_messages(self.driver)
            self.driver.execute_script("document.activeElement && document.activeElement.blur()")
            ActionChains(self.driver).send_keys(key).perform()
            name = KEY_NAMES.get(key, key)
            self.pressed.append(f"{context}: key {name}")
            self.keys_pressed.append(name)
            self.settle(f"{context}: key {name}", expect_run=True)

    def settle(self, what: str, expect_run: bool) -> None:
        """Wait until the runs this action started have ended and the page is quiet; note exceptions and console
        errors. A run is expected after a widget's change (Streamlit reruns on every one)."""
        first_wait = WAIT_S if expect_run else NO_RUN_S
        start = time.monotonic()
        received: list = []
        while not received and time.monotonic() - start < first_wait:
            received = run_messages(self.driver)
            time.sleep(0.05)
        if not received:
            if expect_run:
                self.problems.append(f"{what}: no run started within {WAIT_S} s")
            self.check(what)
            return
        started = last_message = time.monotonic()
        finished = any(message.WhichOneof("type") == "script_finished" for message in received)
        while not finished or time.monotonic() - last_message < QUIET_S:
            if time.monotonic() - started > WAIT_S:
                self.problems.append(f"{what}: the run never ended, or runs kept coming, for {WAIT_S} s")
                break
            more = run_messages(self.driver)
            if more:
                last_message = time.monotonic()
                finished = finished or any(message.WhichOneof("type") == "script_finished" for message in more)
            time.sleep(0.05)
        self.check(what)

    def check(self, what: str) -> None:
        from selenium.webdriver.common.by import By

        for error in console_errors(self.driver):
            self.problems.append(f"{what}: console error {error['message'][:300]}")
        for exception in self.driver.find_elements(By.CSS_SELECTOR, "[data-testid='stException']"):
            self.problems.append(f"{what}: exception on the page: {exception.text[:400]}")
            break  # one is enough to fail; the rest would repeat on every later action
        for cut in self.driver.execute_script(FIND_CUT_TEXT):
            if cut not in self.cut:
                self.cut.add(cut)
                self.problems.append(f"{what}: cut off: {cut}")

    def wait_for_section(self, what: str, control: Control) -> None:
        """A pressed section ends open with its content shown or folded with it hidden, not stuck in between."""
        from selenium.common.exceptions import StaleElementReferenceException

        deadline = time.monotonic() + SECTION_SETTLE_S
        while time.monotonic() < deadline:
            summary = self.element(control)
            try:
                state = self.driver.execute_script(SECTION_STATE, summary) if summary is not None else "gone"
            except StaleElementReferenceException:  # redrawn by a run meanwhile: found again
                state = "between"
            if state != "between":
                return
            time.sleep(0.1)
        self.problems.append(
            f"{what}: the section was neither open with its content nor folded {SECTION_SETTLE_S} s on"
        )

    def wait_for_download(self, what: str, before: set[Path]) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            new = [path for path in set(self.downloads.iterdir()) - before if not path.name.endswith(".crdownload")]
            if new and all(path.stat().st_size for path in new):
                return
            time.sleep(0.1)
        self.problems.append(f"{what}: no file downloaded within {WAIT_S} s")


def run_messages(driver) -> list:
    return [message for message in received_messages(driver) if message.WhichOneof("type") in RUN_MESSAGES]


def click(driver, element) -> None:
    from selenium.common.exceptions import ElementClickInterceptedException, ElementNotInteractableException

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    try:
        element.click()
    except (ElementClickInterceptedException, ElementNotInteractableException):
        # a tooltip or the sticky header over it, or a label drawn over its input: the element's own click
        driver.execute_script("arguments[0].click()", element)


def press_button(driver, element) -> str | None:
    click(driver, element)
    return "clicked"


def flip_toggle(driver, element) -> str | None:
    from selenium.webdriver.common.by import By

    click(driver, element.find_element(By.CSS_SELECTOR, "label"))
    return "flipped"


def pick_radio(driver, element) -> str | None:
    from selenium.webdriver.common.by import By

    for option in element.find_elements(By.CSS_SELECTOR, "label"):
        radio = option.find_elements(By.CSS_SELECTOR, "input[type='radio']")
        if radio and not radio[0].is_selected() and radio[0].is_enabled():
            click(driver, option)
            return option.text.strip()
    return None


def pick_option(driver, element) -> str | None:
    """A select's (or multiselect's) first option not chosen now."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    click(driver, element.find_element(By.CSS_SELECTOR, "button[aria-haspopup='listbox'], [role='combobox']"))
    options = []
    deadline = time.monotonic() + 10
    while not options and time.monotonic() < deadline:
        options = driver.find_elements(By.CSS_SELECTOR, "[role='listbox'] [role='option']")
        time.sleep(0.05)
    for option in options:
        if option.get_attribute("aria-selected") != "true" and option.get_attribute("aria-disabled") != "true":
            text = option.text.strip()
            click(driver, option)
            if driver.find_elements(By.CSS_SELECTOR, "[role='listbox']"):  # a multiselect's list stays open
                driver.switch_to.active_element.send_keys(Keys.ESCAPE)
            return text
    driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    return None


def move_slider(driver, element) -> str | None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    thumb = element.find_element(By.CSS_SELECTOR, "input[type='range']")
    at_end = thumb.get_attribute("value") == thumb.get_attribute("max")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].focus()", thumb)
    thumb.send_keys(Keys.ARROW_LEFT if at_end else Keys.ARROW_RIGHT)
    return "left" if at_end else "right"


def pick_choice(driver, element, wanted: str | None = None) -> str | None:
    """A segmented control's or pills' option ``wanted``, or its first option not chosen now."""
    from selenium.webdriver.common.by import By

    for option in element.find_elements(By.CSS_SELECTOR, "button"):
        if wanted is not None and option.text.strip() != wanted:
            continue
        if option.get_attribute("aria-checked") != "true" and option.is_enabled():
            text = option.text.strip()
            click(driver, option)
            return text
    return None


def step_number(driver, element) -> str | None:
    """One step up (down at the maximum); an empty box (its default: "automatic") gets its minimum typed in."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    for testid, name in (("stNumberInputStepUp", "up"), ("stNumberInputStepDown", "down")):
        buttons = element.find_elements(By.CSS_SELECTOR, f"[data-testid='{testid}']")
        if buttons and buttons[0].is_enabled():
            click(driver, buttons[0])
            return name
    box = element.find_element(By.CSS_SELECTOR, "input")
    typed = box.get_attribute("min") or "1"
    click(driver, box)
    box.send_keys(typed, Keys.ENTER)
    return f"typed {typed}"


ACTIONS = {
    "button": press_button,
    "download": press_button,
    "toggle": flip_toggle,
    "radio": pick_radio,
    "select": pick_option,
    "multiselect": pick_option,
    "slider": move_slider,
    "choice": pick_choice,
    "number": step_number,
    "section": press_button,
}


def walk_controls(walk: Walk, context: str, where: str) -> None:
    """Press every control in ``where`` (a key of ROOTS) once, in the page's order, finding them again after every
    run: a press may bring new ones (Reveal's answer, a training's Stop), and those are pressed too. A picker of
    parts (PARTS_PICKERS: the experiments) has each of its parts opened and walked in turn."""
    for control, _ in walk.controls():
        if control.where == where and (control.kind, control.label) in PARTS_PICKERS:
            for part in choice_labels(walk, control):
                walk.act(f"{context}, {part}", control, part)
                walk_controls_once(walk, f"{context}, {part}", where, skip=control)
            return
    walk_controls_once(walk, context, where)


def walk_controls_once(walk: Walk, context: str, where: str, skip: Control | None = None) -> None:
    done: set[Control] = {skip} if skip else set()
    for _ in range(MAX_ACTIONS_PER_VIEW):
        waiting = [
            control
            for control, enabled in walk.controls()
            if control.where == where
            and enabled
            and control not in done
            and (control.where, control.kind, control.label) not in NOT_WALKED
        ]
        if not waiting:
            return
        done.add(waiting[0])
        walk.act(context, waiting[0])
    walk.problems.append(f"{context}: still new controls after {MAX_ACTIONS_PER_VIEW} actions")


def choice_labels(walk: Walk, control: Control) -> list[str]:
    """A segmented control's options, the one chosen now first (it is on screen: choosing it again starts no run)."""
    from selenium.webdriver.common.by import By

    options = walk.element(control).find_elements(By.CSS_SELECTOR, "button")
    return [o.text.strip() for o in sorted(options, key=lambda option: option.get_attribute("aria-checked") != "true")]


def view_labels(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    picker = driver.find_elements(
        By.XPATH, "//div[@data-testid='stButtonGroup'][.//*[@data-testid='stWidgetLabel'][normalize-space()='View']]"
    )
    return [button.text.strip() for button in picker[0].find_elements(By.CSS_SELECTOR, "button")] if picker else []


def open_view(walk: Walk, label: str) -> None:
    from selenium.webdriver.common.by import By

    received_messages(walk.driver)
    button = walk.driver.find_element(
        By.XPATH,
        "//div[@data-testid='stButtonGroup'][.//*[@data-testid='stWidgetLabel'][normalize-space()='View']]"
        f"//button[normalize-space()='{label}']",
    )
    walk.views.append(label)
    if button.get_attribute("aria-checked") == "true":
        walk.pressed.append(f"view {label!r} (on screen)")
        return  # a click on the chosen view starts no run
    click(walk.driver, button)
    walk.pressed.append(f"view {label!r}")
    walk.settle(f"view {label!r}", expect_run=True)


def walk_page(
    driver,
    downloads: Path,
    log: Callable[[str], None] | None = None,
    opened_only: frozenset[str] = frozenset(),
    sidebar_and_presenter: bool = True,
) -> Walk:
    """Every view and every control of the page once, then the sidebar, and presenter mode with the steps' keys and
    the views only it offers. The views labelled in ``opened_only`` are opened and checked but their controls not
    pressed, and without ``sidebar_and_presenter`` the walk ends after the views (another walk presses them)."""
    walk = Walk(driver, downloads, log)
    driver.execute_script(KEEP_EVERY_REQUEST)
    walk.check("the page's first run")
    labels = view_labels(driver)
    if not labels:
        walk.problems.append("no view picker on the page")
        return walk
    walk_controls(walk, "around the view", "around")
    for label in labels:
        open_view(walk, label)
        if label in opened_only:
            continue
        walk_controls(walk, f"view {label!r}", "view")
        if label == "Decoding steps":
            walk.keys(f"view {label!r}", RIGHT, RIGHT, LEFT)
    open_view(walk, labels[0])
    if sidebar_and_presenter:
        walk_sidebar_and_presenter_mode(walk, labels)
    walk.problems.extend(f"fetched from outside the server: {url}" for url in outside_requests(driver))
    return walk


def walk_sidebar_and_presenter_mode(walk: Walk, labels: list[str]) -> None:
    driver = walk.driver
    walk_controls(walk, "sidebar", "sidebar")
    presenter = Control("sidebar", "toggle", "Presenter mode")
    walk.act("presenter mode", presenter)
    walk.keys("presenter mode", RIGHT, RIGHT, LEFT)
    walk_controls(walk, "presenter mode", "view")
    for label in view_labels(driver):  # the views presenter mode alone offers (the map of the model, large)
        if label not in labels:
            open_view(walk, label)
            walk_controls(walk, f"presenter mode, view {label!r}", "view")
    walk.act("presenter mode", presenter)


def outside_requests(driver) -> list[str]:
    """What the page fetched from anywhere but its own server (a font, a script, an image from a CDN): a classroom
    server may have no internet, and a student's page must not tell a third party what it opened."""
    own = driver.execute_script("return location.origin")
    resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return [name for name in resources if not name.startswith((own, "data:", "blob:"))]
