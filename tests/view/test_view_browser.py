"""The run page in a real browser: headless Chromium (Debian's chromium and chromium-driver).

Checks that the graph is laid out and drawn, that selecting a task shows its prompt coloured
by origin and greys what it was not cleared to see, that the page logs no console error, and
that a result holding ``<script>`` does not run. The screenshot is kept in the test's
``tmp_path`` (its path is printed).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from clearance import RunLedger
from clearance._view import load_run_view, render_run_page

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


def console_errors(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def node(browser, index: int):
    return browser.find_element(By.CSS_SELECTOR, f'#graph .node[data-task="{index}"]')


async def test_graph_and_a_selected_tasks_prompt_are_shown(browser, recorded, tmp_path):
    with RunLedger(recorded.db) as ledger:
        page = render_run_page(load_run_view(ledger, recorded.run_id))
    path = tmp_path / "run.html"
    path.write_text(page, encoding="utf-8")
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
    with RunLedger(recorded.db) as ledger:
        page = render_run_page(load_run_view(ledger, recorded.run_id))
    path = tmp_path / "run.html"
    path.write_text(page, encoding="utf-8")
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
    with RunLedger(recorded.db) as ledger:
        page = render_run_page(load_run_view(ledger, recorded.run_id))
    path = tmp_path / "run.html"
    path.write_text(page, encoding="utf-8")
    open_page(browser, path)
    assert browser.execute_script("return window.scrollY") == 0
    assert browser.find_element(By.ID, "task-0").is_displayed()  # the first task is shown
    assert "#" not in browser.current_url  # and no fragment was written for it
    node(browser, 3).click()  # a person's choice is kept in the address
    assert browser.current_url.endswith("#task-3")
    assert console_errors(browser) == []


async def test_the_graph_fits_its_pane_and_zooms(browser, recorded, tmp_path):
    with RunLedger(recorded.db) as ledger:
        page = render_run_page(load_run_view(ledger, recorded.run_id))
    path = tmp_path / "run.html"
    path.write_text(page, encoding="utf-8")
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
