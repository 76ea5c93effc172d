"""A ledger holding huge titles or ids does not make a page that grows with their square.

Each task's panel names the other tasks (up to `HIDDEN_LISTED`, by id and title). A task's
title is at most `MAX_LABEL_CHARS` when a run records it, but the ledger is not trusted:
60 tasks whose titles were edited to 100,000 characters (6 MB of ledger) made a page of
366 MB, every title written once on every other task's panel; 100 tasks of 1 MB each, a
10 GB page that ``serve`` would build in memory (and keep). A panel now names another task
by its id and title cut to `MAX_LABEL_CHARS`; the task's own panel shows its whole title.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from serving import fetch, serving

from clearance import RunLedger, Task
from clearance._core.names import MAX_LABEL_CHARS
from clearance._state.queue import TaskState, TaskStatus
from clearance._view import load_run_view, render_run_page
from clearance.models import Usage

TASKS = 60
LONG = 100_000


def test_huge_titles_and_ids_are_cut_where_other_tasks_name_them(tmp_path):
    path = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{path}") as ledger:
        ledger.start_run(run_id="run_big", team="t", goal=None, graph=None)
        now = datetime.now(UTC)
        for i in range(TASKS):
            task = Task(id=f"t{i}", title="title", description="d", assignee="w")
            done = TaskState(task=task, status=TaskStatus.COMPLETED, result="r",
                             started_at=now, finished_at=now)  # fmt: skip
            ledger.record_task("run_big", done)
        ledger.finish_run("run_big", status="completed", synthesis=None, usage=Usage(), error=None)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE tasks SET title = 'T' || ordinal || ? ", ("x" * LONG,))
    conn.execute("UPDATE tasks SET task_id = ? WHERE task_id = 't0'", ("I" * LONG,))
    conn.commit()
    conn.close()
    with RunLedger(f"sqlite:///{path}") as ledger:
        page = render_run_page(load_run_view(ledger, "run_big"))
    # Each title and the long id in full where they belong (their own task's panel, its
    # timeline bar, the graph's data), never once per other task.
    assert len(page) < 10 * TASKS * LONG, len(page)
    start = page.index('<article class="detail" id="task-1"')
    panel = page[start : page.index("</article>", start)]
    assert f'<p class="title">T2{"x" * LONG}</p>' in panel  # its own title: whole
    other_id = "I" * (MAX_LABEL_CHARS - 1) + "…"  # task 0, named on task 1's panel
    other_title = ("T1" + "x" * LONG)[: MAX_LABEL_CHARS - 1] + "…"
    assert f'<li class="not-cleared">{other_id} ({other_title}): not cleared' in panel


def test_the_list_of_runs_names_each_run_by_a_cut_goal_and_team(tmp_path):
    # The list shows up to 500 runs and is rendered on every load: a goal edited to a
    # megabyte was a megabyte of every load, per run. The run's own page has it whole.
    path = tmp_path / "runs.db"
    goal = "G" * 1_000_000
    with RunLedger(f"sqlite:///{path}") as ledger:
        ledger.start_run(run_id="run_goal", team="T" * 100_000, goal=goal, graph=None)
        ledger.finish_run("run_goal", status="completed", synthesis=None, usage=Usage(), error=None)
        ledger.flush()
        with serving(ledger) as server:
            status, _, index = fetch(server.url)
            _, _, page = fetch(f"{server.url}run/run_goal")
    assert status == 200 and len(index) < 50_000, len(index)
    assert f"<td>{goal[: MAX_LABEL_CHARS - 1]}…</td>" in index
    assert f"<td>{'T' * (MAX_LABEL_CHARS - 1)}…</td>" in index
    assert goal in page
