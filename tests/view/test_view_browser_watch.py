"""In headless Chromium: a served page of a run whose process is gone shows a resume by itself.

The page stopped polling once it showed the run's process gone, so a run resumed later was
shown only after a reload. It now asks about every 15 seconds (``gone=1``) and, once a resume
has recorded a live process, fetches itself again and polls as a live page, until the run
finishes. See ``test_serve_gone_watch.py`` for the state endpoint's answers.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from serving import serving
from test_serve_gone_watch import RUN, start_gone_run
from test_view_browser import By, WebDriverWait, browser, console_errors  # noqa: F401

from clearance import RunLedger, Task
from clearance._orchestration.resume import process_identity
from clearance._state.queue import TaskState, TaskStatus
from clearance.models import Usage

pytestmark = pytest.mark.browser


def body_attribute(browser, name: str) -> str | None:  # noqa: F811
    return browser.find_element(By.TAG_NAME, "body").get_attribute(name)


def test_a_gone_runs_page_picks_up_a_resume_without_a_reload(browser, tmp_path):  # noqa: F811
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        start_gone_run(ledger)
        with serving(ledger) as server:
            browser.get_log("browser")
            browser.get(f"{server.url}run/{RUN}")
            WebDriverWait(browser, 15).until(lambda d: body_attribute(d, "data-ready") == "true")
            browser.execute_script("window.__same_page = 1")
            assert body_attribute(browser, "data-watch") == f"/run/{RUN}/state"
            assert browser.find_element(By.ID, "gone-note").is_displayed()

            ledger.reopen_run(RUN, process=process_identity())  # resumed: a live process
            WebDriverWait(browser, 40).until(lambda d: body_attribute(d, "data-live"))
            assert body_attribute(browser, "data-watch") is None
            assert not browser.find_elements(By.ID, "gone-note")
            assert "The run is going" in browser.find_element(By.ID, "run-header").text

            task = Task(id="a", title="A", description="Do it.", assignee="w")
            now = datetime.now(UTC)
            state = TaskState(
                task=task, status=TaskStatus.COMPLETED, started_at=now, finished_at=now
            )
            ledger.record_task(RUN, state)
            usage = Usage()
            ledger.finish_run(RUN, status="completed", synthesis=None, usage=usage, error=None)
            WebDriverWait(browser, 20).until(lambda d: body_attribute(d, "data-finished"))
            header = browser.find_element(By.ID, "run-header")
            assert "completed" in header.find_element(By.CSS_SELECTOR, ".status").text
            assert browser.execute_script("return window.__same_page") == 1  # no reload
            assert console_errors(browser) == []
