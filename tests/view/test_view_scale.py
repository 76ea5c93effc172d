"""The run page grows with the tasks, not with their square, and still says what each saw."""

from __future__ import annotations

import re

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._view import load_run_view, render_run_page
from clearance._view.clearance_list import HIDDEN_LISTED
from clearance.testing import FakeModel

TASKS = 400


def detail(page: str, index: int) -> str:
    start = page.index(f'<article class="detail" id="task-{index}"')
    return page[start : page.index("</article>", start)]


async def recorded_page(tmp_path, tasks: list[Task]) -> str:
    team = Team(agents=(Agent(name="w", instructions="Work."),),
                coordinator=Agent(name="editor", instructions="Edit."))  # fmt: skip
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(db) as ledger:
        result = await Orchestrator(team, model=FakeModel("scale"), ledger=ledger).run_tasks(tasks)
    with RunLedger(db) as ledger:
        return render_run_page(load_run_view(ledger, result.run_id))


async def test_a_wide_run_names_what_each_task_saw_and_counts_the_rest(tmp_path):
    tasks = [Task(id=f"t{i:03d}", title=f"Title {i}", description="d", assignee="w")
             for i in range(TASKS - 1)]  # fmt: skip
    tasks.append(Task(id="last", title="Last", description="d", assignee="w",
                      depends_on=("t000", "t007")))  # fmt: skip
    page = await recorded_page(tmp_path, tasks)
    # Every other task named on every panel was 400 x 399 lines; now one line per panel.
    assert page.count('<li class="not-cleared">') == TASKS
    assert len(page) < 6_000 * TASKS
    last = detail(page, TASKS - 1)
    cleared = re.findall(r'<li class="cleared">result of <code>([^<]+)</code> \(([^)]+)\)', last)
    assert cleared == [("t000", "Title 0"), ("t007", "Title 7")]
    assert f"{TASKS - 3} other tasks: not cleared, nothing of them reached this task" in last
    assert f"{TASKS - 1} other tasks: not cleared" in detail(page, 0)


async def test_up_to_the_cap_every_task_not_cleared_is_named(tmp_path):
    count = HIDDEN_LISTED + 1  # each task has HIDDEN_LISTED others: all named
    tasks = [Task(id=f"t{i:03d}", title=f"T{i}", description="d", assignee="w")
             for i in range(count)]  # fmt: skip
    page = await recorded_page(tmp_path, tasks)
    first = detail(page, 0)
    hidden = re.findall(r'<li class="not-cleared">([^ ]+) \(', first)
    assert hidden == [f"t{i:03d}" for i in range(1, count)]
    assert "other tasks: not cleared" not in first
