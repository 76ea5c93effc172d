"""Child ids across the sessions of a resumed run, as ``clearance verify`` reads them.

A resumed run counts its children from 1 again, so a task that runs again spawns its children
under the ids it gave them before (``p.1`` in each session). When another spawner asks for
them in the new session (a delegate of the task instead of its assignee), each session's
child calls are still judged against the spawn of their own session: an honest run verifies,
and a forged one is still a finding.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.errors import ModelError
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

NOTED: list[str] = []


def note(text: str) -> str:
    """Take a note."""
    NOTED.append(text)
    return "noted"


TEAM = Team(
    agents=(
        Agent(
            name="lead",
            instructions="You lead.",
            tools=("note",),
            can_spawn=("helper",),
            can_delegate_to=("deputy",),
        ),
        Agent(name="deputy", instructions="You stand in.", can_spawn=("helper",)),
        Agent(name="helper", instructions="You help.", tools=("note",)),
    )
)
TASK = Task(id="p", title="P", description="Find it.", assignee="lead")


def offered(request: ModelRequest) -> set[str]:
    return {t["function"]["name"] for t in request.tools}


class Script:
    """A task ``p`` whose children are spawned by its assignee in one session, by its deputy
    in the other (``direct_first``: the assignee first); session 1 ends with the lead's
    answer failing, session 2 (``resumed``) completes.

    The helper takes a note at its first step (acting for the deputy, which has no ``note``,
    the call is withheld and runs nothing), then answers.
    """

    def __init__(self, *, direct_first: bool) -> None:
        self.direct_first = direct_first
        self.resumed = False

    def __call__(self, request: ModelRequest) -> str | ToolCall:
        subject = request.prompt.manifest.subject
        agent = request.prompt.manifest.agent
        text = request.prompt.text
        if subject.startswith("child:"):
            if not any(o.startswith("tool:") for o in request.prompt.manifest.origins):
                return ToolCall(id="n1", name="note", arguments={"text": "seen"})
            return "- a finding"
        if agent == "deputy":
            if "ended:" not in text:
                return ToolCall(id="s2", name="spawn",
                                arguments={"agent": "helper", "goal": "Look again."})  # fmt: skip
            return "DEPUTY DONE"
        if subject == "task:p":
            direct = self.direct_first != self.resumed
            if direct and "ended:" not in text:
                return ToolCall(id="s1", name="spawn",
                                arguments={"agent": "helper", "goal": "Look."})  # fmt: skip
            if not direct and "DEPUTY DONE" not in text:
                return ToolCall(id="d1", name="delegate",
                                arguments={"agent": "deputy", "task": "Spawn."})  # fmt: skip
            if not self.resumed:
                raise ModelError("the server went away", model_id="fake")
            return "LEAD DONE"
        return "SYNTH"


async def _record(
    tmp_path: Path, *, direct_first: bool = True
) -> tuple[Path, str, FunctionModel, FunctionModel]:
    NOTED.clear()
    db = tmp_path / "runs.db"
    script = Script(direct_first=direct_first)
    first_model, second_model = FunctionModel(script), FunctionModel(script)
    options = RunOptions(workspace_root=tmp_path / "ws")
    with RunLedger(f"sqlite:///{db}") as ledger:
        first = await Orchestrator(TEAM, model=first_model, ledger=ledger, tools={"note": note},
                                   options=options).run_tasks([TASK])  # fmt: skip
        assert first.tasks["p"].status == "failed"
        script.resumed = True
        resumed = await Orchestrator(TEAM, model=second_model, ledger=ledger,
                                     tools={"note": note}, options=options,
                                     ).resume(first.run_id)  # fmt: skip
        assert resumed.status == "completed", resumed.error
    return db, first.run_id, first_model, second_model


def _reasons(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


def _spawns(db: Path) -> list[tuple[int, dict[str, Any]]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT ordinal, data FROM events WHERE kind = 'spawn' ORDER BY ordinal"
        ).fetchall()
    finally:
        conn.close()
    return [(o, json.loads(d)) for o, d in rows]


async def test_a_child_id_spawned_again_by_a_delegate_after_resume_verifies(tmp_path):
    db, run_id, first, second = await _record(tmp_path)
    spawns = [d for _, d in _spawns(db)]
    assert [(d["child_id"], d["parent_agent"]) for d in spawns] == [
        ("p.1", "lead"), ("p.1", "deputy"),
    ]  # fmt: skip
    # Session 1's helper (for the lead) was offered the note and took it; session 2's (for
    # the deputy) was not offered it, and its call of it ran nothing.
    kids1 = [r for r in first.requests if r.prompt.manifest.subject == "child:p.1"]
    kids2 = [r for r in second.requests if r.prompt.manifest.subject == "child:p.1"]
    assert "note" in offered(kids1[0]) and NOTED == ["seen"]
    assert kids2 and all("note" not in offered(r) for r in kids2)
    # Each session's child calls are judged by the spawn of their session: no capability
    # lent, each prompt's goal the one its session recorded.
    assert _reasons(db, run_id) == []


async def test_a_child_id_spawned_by_a_delegate_first_then_by_the_assignee_verifies(tmp_path):
    db, run_id, first, second = await _record(tmp_path, direct_first=False)
    assert [(d["child_id"], d["parent_agent"]) for _, d in _spawns(db)] == [
        ("p.1", "deputy"), ("p.1", "lead"),
    ]  # fmt: skip
    kids1 = [r for r in first.requests if r.prompt.manifest.subject == "child:p.1"]
    kids2 = [r for r in second.requests if r.prompt.manifest.subject == "child:p.1"]
    assert kids1 and all("note" not in offered(r) for r in kids1)
    assert "note" in offered(kids2[0]) and NOTED == ["seen"]  # session 2's, for the lead
    assert _reasons(db, run_id) == []


def _execute(db: Path, sql: str, *args: Any) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


async def test_a_lent_call_of_the_first_session_is_a_finding_after_another_spawner(
    tmp_path, rechain
):
    """Session 1's helper (for the deputy) is forged to have taken the note it was refused."""
    db, run_id, _first, _second = await _record(tmp_path, direct_first=False)
    assert _reasons(db, run_id) == []
    with RunLedger(f"sqlite:///{db}") as ledger:
        refused = [t for t in ledger.tool_calls(run_id)
                   if t.subject == "child:p.1" and t.is_error]  # fmt: skip
    assert [t.name for t in refused] == ["note"] and "withheld" in refused[0].result
    _execute(db, "UPDATE tool_calls SET is_error = 0, result = 'noted' WHERE tool_call_id = ?",
             refused[0].tool_call_id)  # fmt: skip
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert (
        f"tool call {refused[0].tool_call_id}: 'helper' called 'note' acting for 'deputy', "
        "which may not call it (a capability lent)"
    ) in reasons, reasons


async def test_a_first_session_spawn_forged_to_an_agent_that_may_not_spawn_is_a_finding(
    tmp_path, rechain
):
    """Session 2's spawn of the same id is honest; session 1's is still checked."""
    db, run_id, _first, _second = await _record(tmp_path)
    (ordinal, data), _again = _spawns(db)
    _execute(db, "UPDATE events SET data = ? WHERE ordinal = ?",
             json.dumps({**data, "parent_agent": "helper"}), ordinal)  # fmt: skip
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert (
        "task:p: child 'p.1' of agent 'helper' was spawned by 'helper', whose can_spawn "
        "does not name it (a capability lent)"
    ) in reasons, reasons
    assert (
        "task:p: child 'p.1' was recorded as spawned by 'helper' under 'task:p', whose "
        "assignee is 'lead' (a capability lent)"
    ) in reasons, reasons
