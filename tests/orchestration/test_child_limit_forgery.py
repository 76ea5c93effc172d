"""``max_children`` in `clearance verify`: a task's children within its limit, session by session.

A run numbers each task's children from 1 (``<task>.<n>``; runs recorded before prompt
format 3 numbered all tasks' children together), and starts again at 1 in a resumed
session, where a task that runs again spawns its children again under the same ids. Within
one session a task has at most the smaller of its spawner's and its assignee's
``max_children``. A ledger rewritten (and rechained) to claim more children
than that, a tighter limit than the run had, or a prompt showing more children than the
task may have, is a finding; honest runs, resumed ones included, verify.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.agent_spec import AgentLimits
from clearance._core.errors import ModelError
from clearance._core.spec import FanOut
from clearance.models import ModelRequest
from clearance.testing import FunctionModel


def _team(limit: int) -> Team:
    return Team(
        agents=(
            Agent(
                name="lead",
                instructions="You lead.",
                can_spawn=("helper",),
                limits=AgentLimits(max_children=limit),
            ),
            Agent(name="helper", instructions="You help."),
        ),
        coordinator=Agent(name="editor", instructions="You edit."),
    )


def _task(task_id: str, goals: tuple[str, ...]) -> Task:
    return Task(id=task_id, title=task_id.upper(), description="Sum up.", assignee="lead",
                fan_out=FanOut(agent="helper", goals=goals))  # fmt: skip


def _answer(request: ModelRequest) -> str:
    subject = request.prompt.manifest.subject
    return "- a finding" if subject.startswith("child:") else f"done: {subject}"


async def _record(db: Path, limit: int, tasks: list[Task], model: Any = None) -> str:
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            _team(limit), model=model or FunctionModel(_answer), ledger=ledger,
            options=RunOptions(workspace_root=db.parent / "ws"),
        ).run_tasks(tasks)  # fmt: skip
        return result.run_id


def _reasons(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


def _spawn_events(db: Path) -> list[tuple[int, str, dict[str, Any]]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT ordinal, subject, data FROM events WHERE kind = 'spawn' ORDER BY ordinal"
        ).fetchall()
    finally:
        conn.close()
    return [(o, s, json.loads(d)) for o, s, d in rows]


def _execute(db: Path, sql: str, *args: Any) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


def _set_limit(db: Path, run_id: str, limit: int) -> None:
    conn = sqlite3.connect(db)
    try:
        config = json.loads(
            conn.execute("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
        )
        for agent in config["agents"]:
            if agent["name"] == "lead":
                agent["limits"] = {**agent.get("limits", {}), "max_children": limit}
        conn.execute("UPDATE runs SET config = ? WHERE run_id = ?", (json.dumps(config), run_id))
        conn.commit()
    finally:
        conn.close()


async def test_honest_runs_within_the_limit_verify(tmp_path):
    """Two tasks spawning at once: each task's children are numbered from 1, and verify."""
    db = tmp_path / "runs.db"
    run_id = await _record(db, 2, [_task("p", ("a", "b")), _task("q", ("c", "d"))])
    assert [e[2]["child_id"].rpartition(".")[2] for e in _spawn_events(db)] == ["1", "2", "1", "2"]
    assert _reasons(db, run_id) == []


async def test_a_resumed_task_that_spawns_again_verifies(tmp_path):
    """Session 1 spawns two children, then the parent's call fails; session 2 spawns them again."""
    db = tmp_path / "runs.db"
    broken = True

    def answer(request: ModelRequest) -> str:
        if broken and request.prompt.manifest.subject == "task:p":
            raise ModelError("the server went away", model_id="fake")
        return _answer(request)

    run_id = await _record(db, 2, [_task("p", ("a", "b"))], FunctionModel(answer))
    broken = False
    with RunLedger(f"sqlite:///{db}") as ledger:
        resumed = await Orchestrator(
            _team(2), model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(workspace_root=tmp_path / "ws2"),
        ).resume(run_id)  # fmt: skip
        assert resumed.status == "completed", resumed.error
    assert [e[2]["child_id"] for e in _spawn_events(db)] == ["p.1", "p.2", "p.1", "p.2"]
    assert _reasons(db, run_id) == []


async def test_a_limit_forged_below_the_children_a_task_had_is_a_finding(tmp_path, rechain):
    db = tmp_path / "runs.db"
    run_id = await _record(db, 3, [_task("p", ("a", "b", "c"))])
    assert _reasons(db, run_id) == []
    _set_limit(db, run_id, 2)
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert any("task:p: 3 children in one session" in r and "max_children is 2" in r
               for r in reasons), reasons  # fmt: skip
    assert any("the prompt shows 3 children" in r for r in reasons), reasons


async def test_a_spawn_forged_past_the_limit_is_a_finding(tmp_path, rechain):
    db = tmp_path / "runs.db"
    run_id = await _record(db, 2, [_task("p", ("a", "b"))])
    ordinal, _subject, data = _spawn_events(db)[-1]
    _execute(db, "INSERT INTO events (event_id, run_id, kind, subject, data, created_at) "
             "SELECT 'evt_forged', run_id, kind, subject, ?, created_at FROM events "
             "WHERE ordinal = ?", json.dumps({**data, "child_id": "p.3", "goal": "more"}),
             ordinal)  # fmt: skip
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert any("3 children in one session" in r for r in reasons), reasons


async def test_a_forged_session_boundary_is_a_finding(tmp_path, rechain):
    """A third child numbered as if a new session had begun, in the middle of one."""
    db = tmp_path / "runs.db"
    run_id = await _record(db, 3, [_task("p", ("a", "b", "c"))])
    ordinal, _subject, data = _spawn_events(db)[1]
    _execute(db, "UPDATE events SET data = ? WHERE ordinal = ?",
             json.dumps({**data, "child_id": "p.7"}), ordinal)  # fmt: skip
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert any("is not numbered as one session spawns" in r for r in reasons), reasons


async def test_a_child_id_of_another_task_is_a_finding(tmp_path, rechain):
    db = tmp_path / "runs.db"
    run_id = await _record(db, 2, [_task("p", ("a",)), _task("q", ("b",))])
    spawns = _spawn_events(db)
    ordinal, _subject, data = next(e for e in spawns if e[1] == "task:q")
    other = next(e for e in spawns if e[1] == "task:p")
    assert other  # p's own child stays; q's is now claimed by p under q's id
    _execute(db, "UPDATE events SET subject = 'task:p', data = ? WHERE ordinal = ?",
             json.dumps({**data, "parent_subject": "task:p"}), ordinal)  # fmt: skip
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert any(f"{data['child_id']!r} is not an id task 'p' gives" in r for r in reasons), reasons
