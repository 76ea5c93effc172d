"""Clearance embedded in a service: wrong arguments, cancellation and Ctrl-C from user code."""

import asyncio
import sqlite3
import threading

import pytest

from clearance import (
    Agent,
    ConfigError,
    Orchestrator,
    RunLedger,
    RunOptions,
    RunServices,
    Task,
    Team,
    verify_run,
)
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="v", instructions="You are V."),), name="embedded")
TASKS = [
    Task(id="a", title="A", description="do a", assignee="v"),
    Task(id="b", title="B", description="do b", assignee="v"),
]


def ok(request):
    return "ok"


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        ({"team": "team"}, "team: must be a Team, got str 'team'"),
        ({"model": None}, "model: must be a model id such as"),
        ({"model": 3}, "got int 3"),
        ({"ledger": "sqlite:///runs.db"}, "ledger: must be a RunLedger (open a URL with"),
        ({"options": {"max_concurrency": 2}}, "options: must be a RunOptions or None, got dict"),
        ({"services": {}}, "services: must be a RunServices or None, got dict {}"),
        ({"tools": "search"}, "tools: must be a list of functions or Tools"),
    ],
)
def test_an_argument_of_the_wrong_type_is_one_line_naming_it(ledger, arguments, line):
    given = {"team": TEAM, "model": FunctionModel(ok), "ledger": ledger, **arguments}
    team = given.pop("team")
    with pytest.raises(ConfigError) as caught:
        Orchestrator(team, **given)
    assert line in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("tasks", "line"),
    [
        ([{"id": "a", "title": "A"}], "tasks[0]: must be a Task (build it with Task("),
        ([TASKS[0], "b"], "tasks[1]: must be a Task (build it with Task(id=..., ...)), got str"),
        ("ab", "tasks: must be a list of Task, got str 'ab'"),
        (TASKS[0], "tasks: must be a list of Task, got Task"),
    ],
)
async def test_tasks_that_are_not_tasks_are_refused_before_the_run_starts(ledger, tasks, line):
    model = FunctionModel(ok)
    with pytest.raises(ConfigError) as caught:
        await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks)
    assert str(caught.value).startswith(line)
    assert ledger.list_runs() == [] and model.requests == []


def clearance_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("clearance-ledger")]


async def test_a_run_timed_out_by_its_caller_is_interrupted_and_resumable(ledger, tmp_path):
    started = asyncio.Event()

    async def slow_b(request):
        if request.prompt.manifest.subject == "task:b":
            started.set()
            await asyncio.sleep(3600)
        return "done"

    orchestrator = Orchestrator(TEAM, model=FunctionModel(slow_b), ledger=ledger)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(orchestrator.run_tasks(TASKS), 1.0)
    assert started.is_set()
    run = ledger.list_runs(limit=1)[0]
    assert run.status == "interrupted"
    with sqlite3.connect(tmp_path / "runs.db") as db:  # the lease is released
        (owner,) = db.execute("select owner from runs where run_id = ?", (run.run_id,)).fetchone()
    assert owner is None
    assert {t.task_id: t.status for t in ledger.tasks(run.run_id)} == {
        "a": "completed",
        "b": "interrupted",
    }
    assert clearance_threads() == []  # the writer thread stopped
    assert verify_run(ledger, run.run_id).ok
    again = FunctionModel(ok)
    resumed = await Orchestrator.from_run(run.run_id, ledger=ledger, model=again).resume(run.run_id)
    assert resumed.status == "completed"
    assert sorted(r.prompt.manifest.subject for r in again.requests) == ["synthesis", "task:b"]
    assert verify_run(ledger, run.run_id).ok


def test_ctrl_c_in_a_user_tool_leaves_the_run_interrupted(tmp_path):
    def halt(text: str) -> str:
        """Stop everything.

        Args:
            text: Ignored.
        """
        raise KeyboardInterrupt

    def model(request):
        if request.prompt.manifest.subject == "task:b":
            return [ToolCall(id="c1", name="halt", arguments={"text": "now"})]
        return "ok"

    team = Team(agents=(Agent(name="v", instructions="You are V.", tools=("halt",)),), name="t")
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(
            team, model=FunctionModel(model), ledger=ledger, tools=[halt],
            options=RunOptions(max_concurrency=1), services=RunServices(),
        )  # fmt: skip
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(orchestrator.run_tasks(TASKS))
        run = ledger.list_runs(limit=1)[0]
        assert run.status == "interrupted"
        assert {t.task_id: t.status for t in ledger.tasks(run.run_id)} == {
            "a": "completed",
            "b": "interrupted",
        }
        assert clearance_threads() == []
        assert verify_run(ledger, run.run_id).ok
