"""A ``spawn`` call's result says how the child ended, as its ``child`` event recorded.

A delegate that spawns sees each child's result in the ``spawn`` tool call's output (its
prompt has no section of children's results); a task's assignee is told where the result
is. A forger who rewrites that output (the child's result, or its status) and the prompt
that shows it, hash chain rebuilt, is caught.
"""

from __future__ import annotations

from pathlib import Path

from test_delegate_answer_forgery import _forge
from test_delegation import delegate, tool_results

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(
        # Only bob, alice's delegate, may spawn: his `spawn` is served all the same.
        Agent(name="alice", instructions="A.", can_delegate_to=("bob",)),
        Agent(name="bob", instructions="B.", can_spawn=("helper",)),
        Agent(name="helper", instructions="H."),
    ),
    coordinator=Agent(name="lead", instructions="You lead."),
)


def _answer(request: ModelRequest):
    manifest = request.prompt.manifest
    if manifest.subject == "synthesis":
        return "SYNTH"
    if manifest.agent == "helper":
        return "the helper's finding"
    if manifest.agent == "bob":
        if tool_results(request):
            return "BOB-DONE"
        return ToolCall(id="s", name="spawn", arguments={"agent": "helper", "goal": "look"})
    return "ALICE-DONE" if tool_results(request) else delegate("bob", "Find out.")


async def _record(db: Path) -> tuple[str, str]:
    task = Task(id="t1", title="Work", description="Work.", assignee="alice")
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            TEAM, model=FunctionModel(_answer), ledger=ledger,
            options=RunOptions(workspace_root=db.parent / "ws"),
        ).run_tasks([task])  # fmt: skip
        assert result.tasks["t1"].result == "ALICE-DONE", result.tasks["t1"].error
        (spawn,) = [t for t in ledger.tool_calls(result.run_id) if t.name == "spawn"]
        assert spawn.result.endswith("; its result:\nthe helper's finding"), spawn.result
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
        return result.run_id, spawn.tool_call_id


async def test_a_forged_child_result_in_a_spawn_output_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    db = tmp_path / "runs.db"
    run_id, call_id = await _record(db)
    with RunLedger(f"sqlite:///{db}") as ledger:
        (spawn,) = [t for t in ledger.tool_calls(run_id) if t.name == "spawn"]
    forged = spawn.result.replace("the helper's finding", "FORGED: all clear")
    _forge(rewrite_prompt, db, call_id, forged, subject=spawn.subject)
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        found = [str(f) for f in verify_run(ledger, run_id).findings]
    assert any("is not how its child ended as recorded" in f for f in found), found


async def test_a_delegate_may_spawn_when_no_assignee_may(tmp_path):
    # `can_spawn` holds on the delegate path too: the run serves bob's spawn though alice,
    # the only assignee, may not spawn (it answered "unknown tool 'spawn'").
    run_id, _ = await _record(tmp_path / "runs.db")
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        (spawn,) = [t for t in ledger.tool_calls(run_id) if t.name == "spawn"]
        assert not spawn.is_error and spawn.agent == "bob"
