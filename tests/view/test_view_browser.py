"""The run page in a real browser: headless Chromium (Debian's chromium and chromium-driver).

Checks that the graph is laid out and drawn, that selecting a task shows its prompt coloured
by origin and greys what it was not cleared to see, that the page logs no console error, that
a result holding ``<script>`` does not run, that a page ``serve`` sends for a run still going
updates itself as the run is recorded, and that the timeline draws each task to scale. The
screenshot is kept in the test's ``tmp_path`` (its path is printed).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import serving

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._view import load_run_view, render_run_page
from clearance._view.timeline import MIN_WIDTH_PCT
from clearance.testing import FunctionModel

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "headless Chromium is not installed (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip(
    "selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')"
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--no-first-run",
        "--disable-background-networking",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(browser, path: Path, fragment: str = "") -> None:
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(path.as_uri() + fragment)
    WebDriverWait(browser, 15).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
    )


def write_page(recorded, tmp_path: Path) -> Path:
    """The recorded run's page, written to a file."""
    with RunLedger(recorded.db) as ledger:
        page = render_run_page(load_run_view(ledger, recorded.run_id))
    path = tmp_path / "run.html"
    path.write_text(page, encoding="utf-8")
    return path


def console_errors(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def node(browser, index: int):
    return browser.find_element(By.CSS_SELECTOR, f'#graph .node[data-task="{index}"]')


async def test_graph_and_a_selected_tasks_prompt_are_shown(browser, recorded, tmp_path):
    path = write_page(recorded, tmp_path)
    open_page(browser, path)

    nodes = browser.find_elements(By.CSS_SELECTOR, "#graph .node")
    assert len(nodes) == 7 and all(n.is_displayed() for n in nodes)
    positions = {(n.rect["x"], n.rect["y"]) for n in nodes}
    assert len(positions) == 7, "the layout placed two tasks on top of each other"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#graph path.edge")) == 5
    # Dependencies are laid out left of their dependents.
    assert node(browser, 0).rect["x"] < node(browser, 3).rect["x"]

    node(browser, 3).click()  # review: cleared for spec and evil only
    panel = browser.find_element(By.ID, "task-3")
    assert panel.is_displayed()
    assert not browser.find_element(By.ID, "task-4").is_displayed()
    classes = {i: node(browser, i).get_attribute("class") for i in range(7)}
    assert "is-selected" in classes[3]
    assert "is-cleared" in classes[0] and "is-cleared" in classes[1]
    for hidden in (2, 4, 5, 6):
        assert "is-hidden" in classes[hidden]
    edges = browser.find_elements(By.CSS_SELECTOR, "#graph path.edge")
    assert sorted("is-hidden" in e.get_attribute("class") for e in edges) == [0, 0, 1, 1, 1]
    greyed = float(node(browser, 4).value_of_css_property("opacity"))
    assert greyed < 0.5
    results = panel.find_elements(By.CSS_SELECTOR, "pre.prompt .seg.k-task_result")
    assert len(results) == 2 and all(r.is_displayed() for r in results)
    assert "ANSWER for task:spec" in results[0].text
    colour = results[0].value_of_css_property("background-color")
    assert colour not in ("rgba(0, 0, 0, 0)", "transparent"), "the style sheet did not apply"
    assert browser.current_url.endswith("#task-3")

    shot = tmp_path / "run-view.png"
    browser.execute_script("window.scrollTo(0, 0)")
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    assert console_errors(browser) == []


async def test_a_result_holding_script_does_not_run(browser, recorded, tamper, tmp_path):
    tamper(recorded)  # and a status, team and goal holding script
    path = write_page(recorded, tmp_path)
    open_page(browser, path, "#task-1")  # evil, selected by the address
    assert "is-selected" in node(browser, 1).get_attribute("class")
    response = browser.find_element(By.CSS_SELECTOR, "#task-1 pre.response")
    assert "<script>window.__pwned = 1;" in response.text
    assert '<img src=x id="evil-img" onerror=' in response.text
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.find_elements(By.ID, "evil-img") == []
    assert browser.title.startswith("clearance run ")
    assert "window.__pwned = 4" in browser.find_element(By.CSS_SELECTOR, "header.run").text
    assert console_errors(browser) == []


async def test_the_policy_blocks_script_that_got_past_escaping(browser, recorded, tmp_path):
    """Defence in depth: were escaping ever bypassed, the CSP still stops inline script."""
    with RunLedger(recorded.db) as ledger:
        page = render_run_page(load_run_view(ledger, recorded.run_id))
    injected = page.replace(
        "</main>",
        '</main><script>window.__pwned = 9</script><img src=x onerror="window.__pwned = 8">',
    )
    path = tmp_path / "injected.html"
    path.write_text(injected, encoding="utf-8")
    open_page(browser, path)
    assert browser.execute_script("return window.__pwned === undefined")
    errors = console_errors(browser)
    assert errors and all("Content Security Policy" in e for e in errors), errors


async def test_the_page_opens_at_the_top(browser, recorded, tmp_path):
    path = write_page(recorded, tmp_path)
    open_page(browser, path)
    assert browser.execute_script("return window.scrollY") == 0
    assert browser.find_element(By.ID, "task-0").is_displayed()  # the first task is shown
    assert "#" not in browser.current_url  # and no fragment was written for it
    node(browser, 3).click()  # a person's choice is kept in the address
    assert browser.current_url.endswith("#task-3")
    assert console_errors(browser) == []


async def test_the_graph_fits_its_pane_and_zooms(browser, recorded, tmp_path):
    path = write_page(recorded, tmp_path)
    browser.set_window_size(1100, 900)  # a pane narrower than the graph
    try:
        open_page(browser, path)
        wrap = browser.find_element(By.CSS_SELECTOR, ".graph-wrap")
        graph = browser.find_element(By.ID, "graph")
        natural = browser.execute_script(
            "return document.getElementById('graph').viewBox.baseVal.width"
        )
        fitted = graph.rect["width"]
        assert fitted <= wrap.size["width"] < natural  # shrunk to the pane: nothing cut off
        assert all(n.is_displayed() for n in browser.find_elements(By.CSS_SELECTOR, "#graph .node"))
        browser.find_element(By.ID, "zoom-in").click()
        assert graph.rect["width"] > fitted * 1.2
        browser.find_element(By.ID, "zoom-fit").click()
        assert abs(graph.rect["width"] - fitted) < 1
        node(browser, 3).click()  # still selectable once scaled
        assert browser.find_element(By.ID, "task-3").is_displayed()
        assert console_errors(browser) == []
    finally:
        browser.set_window_size(1400, 1000)


def served_run(tmp_path: Path):
    """A run in its own thread whose tasks each wait for their gate; returns what to drive it."""
    db = f"sqlite:///{tmp_path / 'live.db'}"
    gates = {name: threading.Event() for name in ("first", "second", "last")}

    async def answer(request):
        subject = request.prompt.manifest.subject
        if subject.startswith("task:"):
            opened = await asyncio.to_thread(gates[subject.removeprefix("task:")].wait, 60)
            assert opened, f"{subject} was never let through"
        return f"ANSWER for {subject}"

    team = Team(agents=(Agent(name="w", instructions="You work."),), name="live")
    tasks = [
        Task(id="first", title="First", description="One.", assignee="w"),
        Task(id="second", title="Second <b>two</b>", description="Two.", assignee="w"),
        Task(id="last", title="Last", description="Three.", assignee="w",
             depends_on=["first", "second"]),
    ]  # fmt: skip

    async def run() -> None:
        with RunLedger(db) as ledger:
            await Orchestrator(team, model=FunctionModel(answer), ledger=ledger).run_tasks(tasks)

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    return db, gates, thread


def wait_until(check, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def task_button(browser, index: int):
    return browser.find_element(By.CSS_SELECTOR, f'#task-list [data-task="{index}"]')


def test_a_served_page_updates_while_the_run_goes_on(browser, tmp_path):
    db, gates, thread = served_run(tmp_path)
    thread.start()
    try:
        with RunLedger(db) as reader, contextlib.ExitStack() as stack:

            def both_calls_sent():
                runs = reader.list_runs()
                return runs and len(reader.calls(runs[0].run_id)) == 2 and runs[0].run_id

            run_id = wait_until(both_calls_sent)
            server = stack.enter_context(serving(reader))
            browser.get_log("browser")
            browser.get(f"{server.url}run/{run_id}")
            WebDriverWait(browser, 15).until(
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
            )
            # It opens at the top, the run's header and verdict in view.
            assert browser.execute_script("return window.scrollY") == 0
            header = browser.find_element(By.ID, "run-header")
            assert header.is_displayed() and header.rect["y"] == 0
            assert browser.find_element(By.ID, "verdict").is_displayed()
            assert "The run is going" in header.text
            assert "running" in task_button(browser, 0).text
            assert browser.find_element(By.ID, "call-count").text == "2"

            task_button(browser, 1).click()  # a person's choice and scroll are kept
            browser.execute_script("window.scrollTo(0, 120); window.__same_page = 1")
            scrolled = browser.execute_script("return window.scrollY")
            assert scrolled > 0, "the page is too short to scroll"
            gates["first"].set()
            WebDriverWait(browser, 15).until(lambda d: "completed" in task_button(d, 0).text)
            assert browser.execute_script("return window.__same_page") == 1  # no reload
            assert browser.execute_script("return window.scrollY") == scrolled
            assert browser.current_url.endswith("#task-1")
            assert browser.find_element(By.ID, "task-1").is_displayed()
            assert not browser.find_element(By.ID, "task-0").is_displayed()
            assert task_button(browser, 1).get_attribute("aria-pressed") == "true"
            assert "is-selected" in node(browser, 1).get_attribute("class")
            assert "status-completed" in node(browser, 0).get_attribute("class")
            bars = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.tl-task")
            assert "status-completed" in bars[0].get_attribute("class")

            gates["second"].set()
            gates["last"].set()
            WebDriverWait(browser, 20).until(
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-finished")
            )
            header = browser.find_element(By.ID, "run-header")
            assert "completed" in header.find_element(By.CSS_SELECTOR, ".status").text
            assert "The run is going" not in header.text
            calls = reader.calls(run_id)
            assert browser.find_element(By.ID, "call-count").text == str(len(calls))
            verdict = browser.find_element(By.ID, "verdict").text
            assert f"verify: {len(calls)} model calls verified." in verdict
            assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline rect.tl-task")) == 3
            assert len(browser.find_elements(By.CSS_SELECTOR, "#graph .node")) == 3
            assert browser.execute_script("return window.__same_page") == 1
            assert browser.find_element(By.ID, "task-1").is_displayed()
            assert console_errors(browser) == []
    finally:
        for gate in gates.values():
            gate.set()
        thread.join(timeout=30)


async def test_the_timeline_draws_one_bar_per_task_to_scale(browser, recorded, tmp_path):
    path = write_page(recorded, tmp_path)
    open_page(browser, path)
    timeline = browser.find_element(By.ID, "timeline")
    assert timeline.is_displayed()
    span = float(timeline.get_attribute("data-span"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline .tl-row:not(.tl-axis)")
    assert len(rows) == 8  # seven tasks and the coordinator
    bars = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.tl-task")
    assert len(bars) == 6  # one per task that ran: "after" was skipped
    track = rows[0].find_element(By.CSS_SELECTOR, "svg.tl-track").rect["width"]
    checked = 0
    for bar in [*bars, *browser.find_elements(By.CSS_SELECTOR, "#timeline rect.tl-call")]:
        share = float(bar.get_attribute("data-duration")) / span
        if share * 100 <= MIN_WIDTH_PCT:
            continue
        width = browser.execute_script("return arguments[0].getBoundingClientRect().width", bar)
        assert width == pytest.approx(share * track, abs=1.5)
        checked += 1
    assert checked >= 6
    title = bars[1].find_element(By.TAG_NAME, "title")
    text = browser.execute_script("return arguments[0].textContent", title)
    assert text.startswith("task evil: Untrusted <b>task</b> (completed)")
    rows[3].find_element(By.CSS_SELECTOR, "button.tl-pick").click()  # picks the task
    assert browser.find_element(By.ID, "task-3").is_displayed()
    assert browser.execute_script("return window.__pwned === undefined")
    assert console_errors(browser) == []
