"""A tool call shown as made by another agent than the one that ran: `clearance verify` catches it.

verify judges each recorded tool call by the grants and tools of the agent the record names.
A forger who renames that agent (to one with wider grants or more tools) and rebuilds the
hash chain (`rechain`) could pass off any read or call. The agent is fixed by the subject:
a task's calls are its assignee's, a delegation's its delegate's (the agent its ``delegate``
call named), a child's the agent its ``spawn`` event names.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from clearance import (
    Agent,
    ContextStore,
    Orchestrator,
    RunLedger,
    RunOptions,
    Task,
    TaskStatus,
    Team,
)
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

COORD = Agent(name="lead", instructions="You lead.")
READ = ("store_get",)
AGENTS = (
    Agent(
        name="weak",
        instructions="W.",
        tools=READ,
        store_grants={"pub": "read"},
        can_delegate_to=("helper",),
        can_spawn=("kid",),
    ),
    Agent(name="helper", instructions="H.", tools=READ, store_grants={"pub": "read"}),
    Agent(name="kid", instructions="K.", tools=READ, store_grants={"pub": "read"}),
    Agent(name="admin", instructions="A.", tools=READ, store_grants={"*": "read"}),
)
GET = {"namespace": "pub", "key": "k"}


def _answer(request: ModelRequest) -> object:
    manifest = request.prompt.manifest
    if manifest.subject == "synthesis":
        return "SYNTH"
    used = len([o for o in manifest.origins if o.startswith("tool:")])
    if manifest.agent != "weak":
        return ToolCall(id="g", name="store_get", arguments=GET) if not used else "done"
    plan = [
        ToolCall(id="g", name="store_get", arguments=GET),
        ToolCall(id="d", name="delegate", arguments={"agent": "helper", "task": "read"}),
        ToolCall(id="s", name="spawn", arguments={"agent": "kid", "goal": "read"}),
    ]
    return plan[used] if used < len(plan) else "W"


async def _run(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "runs.db"
    with (
        RunLedger(f"sqlite:///{db}") as ledger,
        ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as store,
    ):
        orchestrator = Orchestrator(Team(agents=AGENTS, coordinator=COORD),
                                    model=FunctionModel(_answer), ledger=ledger, store=store,
                                    options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        task = Task(id="t1", title="Work", description="Do the work.", assignee="weak")
        result = await orchestrator.run_tasks([task])
        assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
        assert verify_run(ledger, result.run_id).ok
        return db, result.run_id


@pytest.mark.parametrize(("by", "kind"), [("weak", "task"), ("helper", "delegation"),
                                         ("kid", "child")])  # fmt: skip
async def test_a_tool_call_renamed_to_a_wider_agent_is_a_finding(tmp_path, rechain, by, kind):
    db, run_id = await _run(tmp_path)
    conn = sqlite3.connect(db)
    ((call_id, subject),) = conn.execute(
        "SELECT tool_call_id, subject FROM tool_calls WHERE agent = ? AND name = 'store_get'",
        (by,),
    )
    assert subject.startswith(f"{kind}:")
    conn.execute("UPDATE tool_calls SET agent = 'admin' WHERE tool_call_id = ?", (call_id,))
    conn.commit()
    conn.close()
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        reasons = [f.reason for f in verify_run(ledger, run_id).findings]
    assert (
        f"tool call {call_id} was recorded as made by 'admin', but {subject} is run by {by!r}"
    ) in reasons


async def test_the_honest_run_of_every_path_has_no_finding(tmp_path):
    db, run_id = await _run(tmp_path)
    with RunLedger(f"sqlite:///{db}") as ledger:
        agents = sorted({(t.agent, t.subject.split(":")[0]) for t in ledger.tool_calls(run_id)})
    assert agents == [("helper", "delegation"), ("kid", "child"), ("weak", "task")]
