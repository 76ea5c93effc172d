"""A child shown acting for a more capable parent than it had: `clearance verify` catches it.

A spawn event names the agent that asked for the child (``parent_agent``); verify judges
every store read, tool call and delegation of the child against that agent. A forger who
rewrites it to another agent that may spawn the child too (one with wider grants or more
tools) and rebuilds the hash chain (`rechain`) must not pass: a child spawned under its
task's own subject was asked for by that task's assignee.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, TaskStatus, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

COORD = Agent(name="lead", instructions="You lead.")


def probe() -> str:
    """Read what only an admin may read."""
    return "SECRET"


AGENTS = (
    Agent(name="weak", instructions="W.", can_spawn=("kid",)),
    Agent(
        name="admin",
        instructions="A.",
        can_spawn=("kid",),
        tools=(probe,),
        store_grants={"*": "write"},
    ),
    Agent(name="kid", instructions="K.", tools=(probe,)),
)


def _answer(request: ModelRequest) -> object:
    manifest = request.prompt.manifest
    if manifest.subject == "synthesis":
        return "SYNTH"
    if manifest.agent == "weak":
        if any(o.startswith("child_result:") for o in manifest.origins):
            return "W"
        return ToolCall(id="s", name="spawn", arguments={"agent": "kid", "goal": "help"})
    return "K"


async def _run(db: Path, tmp_path: Path) -> str:
    with RunLedger(f"sqlite:///{db}") as ledger:
        orchestrator = Orchestrator(Team(agents=AGENTS, coordinator=COORD),
                                    model=FunctionModel(_answer), ledger=ledger,
                                    options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        task = Task(id="t1", title="Work", description="Do the work.", assignee="weak")
        result = await orchestrator.run_tasks([task])
        assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
        assert verify_run(ledger, result.run_id).ok
        return result.run_id


def _forge_spawn(db: Path, edit: dict[str, object]) -> None:
    conn = sqlite3.connect(db)
    ((event_id, data),) = conn.execute("SELECT event_id, data FROM events WHERE kind = 'spawn'")
    forged = {**json.loads(data), **edit}
    conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(forged), event_id))
    conn.commit()
    conn.close()


def _findings(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [f.reason for f in verify_run(ledger, run_id).findings]


async def test_a_child_shown_spawned_by_another_agent_than_its_tasks_assignee_is_a_finding(
    tmp_path, rechain
):
    db = tmp_path / "runs.db"
    run_id = await _run(db, tmp_path)
    _forge_spawn(db, {"parent_agent": "admin"})  # the child now seems to act for admin
    rechain(db, run_id)
    assert (
        "child 't1.1' was recorded as spawned by 'admin' under 'task:t1', whose assignee is "
        "'weak' (a capability lent)"
    ) in _findings(db, run_id)


async def test_a_spawn_recorded_without_its_parent_subject_is_checked_the_same(tmp_path, rechain):
    # Runs recorded before parent_subject existed: the child was the task's assignee's.
    db = tmp_path / "runs.db"
    run_id = await _run(db, tmp_path)
    conn = sqlite3.connect(db)
    ((event_id, data),) = conn.execute("SELECT event_id, data FROM events WHERE kind = 'spawn'")
    data = json.loads(data)
    del data["parent_subject"]
    data["parent_agent"] = "admin"
    conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id))
    conn.commit()
    conn.close()
    rechain(db, run_id)
    assert any("spawned by 'admin' under 'task:t1'" in f for f in _findings(db, run_id))


async def test_the_untouched_run_has_no_spawn_finding(tmp_path):
    db = tmp_path / "runs.db"
    run_id = await _run(db, tmp_path)
    assert _findings(db, run_id) == []
