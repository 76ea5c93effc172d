"""Results are labelled by title: a new run refuses two tasks of one title before it starts."""

from __future__ import annotations

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._core.errors import ConfigError
from clearance.testing import FakeModel


async def test_two_tasks_of_one_title_are_refused_before_anything_runs(tmp_path) -> None:
    model = FakeModel("fake:titles")
    team = Team(agents=(Agent(name="w", instructions="You write."),))
    tasks = [Task(id="a", title="Summary", description="Sum up x.", assignee="w"),
             Task(id="b", title="summary", description="Sum up y.", assignee="w"),
             Task(id="c", title="Both", description="Compare.", assignee="w",
                  depends_on=("a", "b"))]  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(team, model=model, ledger=ledger)
        with pytest.raises(ConfigError, match="tasks 'a' and 'b' have the same title"):
            await orchestrator.run_tasks(tasks)
        assert ledger.list_runs() == []
    assert model.requests == []
