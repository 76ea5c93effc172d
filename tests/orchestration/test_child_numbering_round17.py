"""Child ids are numbered per task in each session, so a resume replays a child's steps.

A run used to number the children of all its tasks together (``a.1``, then ``b.2``): after a
resume in which only ``b`` ran again, its child became ``b.1``, whose records (subject
``child:b.2``) were never replayed, so its answered requests were sent again and its side
effects repeated. Runs recorded with ``prompt_format`` 3 number each task's children from 1
in each session; ``clearance verify`` checks that rule for them, and the run-wide rule for
runs recorded before (a resume of such a run keeps numbering run-wide).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_replay_sessions_round17 import Harness as SessionHarness

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._context.verify_children import check_child_limits
from clearance._core.errors import ModelError
from clearance._core.run_spec import PROMPT_FORMAT
from clearance._core.spec import FanOut
from clearance._state.graph import TaskGraph
from clearance._state.ledger import EventRecord
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

TOOLS = '''\
from pathlib import Path

HERE = Path(__file__).parent


def append(line: str) -> str:
    """Append a line (every run of this tool is logged in calls.log)."""
    with open(HERE / "calls.log", "a") as calls:
        calls.write(line + "\\n")
    return f"appended {line}"
'''

TEAM = """\
name: ids17
agents:
  - {name: scribe, instructions: "You append lines.", tools: [append], limits: {max_steps: 8}}
  - {name: lead, instructions: "You lead.", can_spawn: [scribe], tools: [append],
     limits: {max_children: 1}}
tools:
  append: {function: "ids17_tools:append", idempotent: false}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: a, title: A, description: "Have a0 appended.", assignee: lead,
     fan_out: {agent: scribe, goals: ["APPEND a: append the lines a0 to a0."]}}
  - {id: b, title: B, description: "Have b0 and b1 appended.", assignee: lead, depends_on: [a],
     fan_out: {agent: scribe, goals: ["APPEND b: append the lines b0 to b1."]}}
"""

LAST = {"a": 0, "b": 1}


def canonical(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


class Script:
    """Scribes append their lines one per step, then answer; kills on ``kill`` (a text of the
    request), before answering it (the request is recorded, never answered)."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.kill: str | None = None

    def reply(self, messages: list[dict[str, Any]]) -> Any:
        system = messages[0]["content"]
        text = "\n".join(m.get("content") or "" for m in messages)
        with self.lock:
            self.received.append(canonical(messages))
            kill = self.kill
        if kill is not None and self.pid is not None and kill in text:
            os.kill(self.pid, signal.SIGKILL)
            self.kill = None
            return "killed"
        if system == "You append lines.":
            prefix = "a" if "APPEND a:" in text else "b"
            done = sum(f"appended {prefix}{i}" in text for i in range(LAST[prefix] + 1))
            if done <= LAST[prefix]:
                return [("append", {"line": f"{prefix}{done}"})]
            return f"wrote lines {prefix}"
        if system == "You lead.":
            return "lead done"
        return "summary"


class Harness(SessionHarness):
    tools_module, tools = "ids17_tools", TOOLS

    def __init__(self, tmp: Path, url: str, script: Any) -> None:
        super().__init__(tmp, url, script, TEAM)

    def answered(self, rid: str | None = None) -> set[str]:
        return super().answered(rid or self.run_id())

    def spawned(self) -> list[str]:
        with RunLedger(self.db) as ledger:
            return [e.data["child_id"] for e in ledger.events(self.run_id(), "spawn")]


@pytest.mark.network
def test_a_child_of_the_only_task_that_runs_again_is_replayed_after_resume(
    tmp_path: Path, openai_server: Any
) -> None:
    """Session 1: a's child appends a0 and a completes; b's child appends b0 and the run is
    killed at the child's next request. The resume runs only b: its child keeps its id and
    its answered request and side effect are replayed, not sent and run again."""
    script = Script()
    h = Harness(tmp_path, openai_server(script.reply), script)
    script.kill = "appended b0"
    code, _ = h.command("run", str(h.team), "--model", "openai:m")
    assert code == -signal.SIGKILL, h.report()
    assert h.calls_log() == ["a0", "b0"], h.report()
    answered = h.answered()
    before = len(script.received)
    code, _ = h.command("resume", h.run_id(), "--team", str(h.team))
    assert code == 0, h.report()
    sent = script.received[before:]
    again = [r for r in sent if r in answered]
    assert not again, ("an answered request was sent again", again[:1], h.report())
    assert h.calls_log() == ["a0", "b0", "b1"], h.report()  # b0 not appended again
    assert h.spawned() == ["a.1", "b.1", "b.1"], h.report()
    code, out = h.command("verify", h.run_id())
    assert code == 0, out + h.report()


# -- in process: verify's rule for each format ---------------------------------------------


def _team(max_children: int = 4) -> Team:
    return Team(
        agents=(
            Agent(
                name="lead",
                instructions="You lead.",
                can_spawn=("helper",),
                limits=AgentLimits(max_children=max_children),
            ),
            Agent(name="helper", instructions="You help."),
        )
    )


def _tasks() -> list[Task]:
    """``a`` fans out two children; ``b`` (after ``a``) one; ``c`` (after ``b``) two."""

    def fan(task_id: str, n: int, after: tuple[str, ...] = ()) -> Task:
        goals = tuple(f"Look {task_id}{i}." for i in range(n))
        return Task(id=task_id, title=task_id.upper(), description="Find it.", assignee="lead",
                    depends_on=after, fan_out=FanOut(agent="helper", goals=goals))  # fmt: skip

    return [fan("a", 2), fan("b", 1, ("a",)), fan("c", 2, ("b",))]


class Failing:
    """Answers everything; the leads of the tasks in ``fail`` raise until ``resumed``."""

    def __init__(self, fail: set[str]) -> None:
        self.fail, self.resumed = fail, False

    def __call__(self, request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        if subject.startswith("task:") and subject[5:] in self.fail and not self.resumed:
            raise ModelError("the server went away", model_id="fake")
        return "SYNTH" if subject == "synthesis" else f"done {subject}"


def _spawns(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT data FROM events WHERE kind = 'spawn' ORDER BY ordinal")
        return [json.loads(d)["child_id"] for (d,) in rows.fetchall()]
    finally:
        conn.close()


def _reasons(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


async def _record(
    tmp_path: Path, *, fail: set[str], resume: bool, old_format: pytest.MonkeyPatch | None = None
) -> tuple[Path, str]:
    db = tmp_path / "runs.db"
    script = Failing(fail)
    options = RunOptions(workspace_root=tmp_path / "ws")
    if old_format is not None:  # the run is recorded as code before format 3 recorded it
        old_format.setattr("clearance._orchestration.resume.PROMPT_FORMAT", 2)
        old_format.setattr("clearance._orchestration.children.PROMPT_FORMAT", 2)
    with RunLedger(f"sqlite:///{db}") as ledger:
        first = await Orchestrator(_team(), model=FunctionModel(script), ledger=ledger,
                                   options=options).run_tasks(_tasks())  # fmt: skip
        if old_format is not None:
            old_format.undo()  # the resume is today's code
        if resume:
            script.resumed = True
            again = await Orchestrator(_team(), model=FunctionModel(script), ledger=ledger,
                                       options=options).resume(first.run_id)  # fmt: skip
            assert again.status == "completed", again.error
    return db, first.run_id


async def test_a_new_run_numbers_each_tasks_children_from_one_and_verifies(tmp_path):
    db, run_id = await _record(tmp_path, fail=set(), resume=False)
    with RunLedger(f"sqlite:///{db}") as ledger:
        assert ledger.get_run(run_id).config["prompt_format"] == PROMPT_FORMAT
    assert _spawns(db) == ["a.1", "a.2", "b.1", "c.1", "c.2"]
    assert _reasons(db, run_id) == []


async def test_an_old_format_run_numbered_run_wide_still_verifies(tmp_path, monkeypatch):
    db, run_id = await _record(tmp_path, fail=set(), resume=False, old_format=monkeypatch)
    with RunLedger(f"sqlite:///{db}") as ledger:
        assert ledger.get_run(run_id).config["prompt_format"] == 2
    assert _spawns(db) == ["a.1", "a.2", "b.3", "c.4", "c.5"]
    assert _reasons(db, run_id) == []


async def test_an_old_format_run_resumed_keeps_numbering_run_wide(tmp_path, monkeypatch):
    """b and c fail in session 1 (b's lead fails, c is skipped or fails); the resume runs
    both again, numbering their children together as the run's format says."""
    db, run_id = await _record(tmp_path, fail={"b"}, resume=True, old_format=monkeypatch)
    spawns = _spawns(db)
    assert spawns[:3] == ["a.1", "a.2", "b.3"], spawns
    assert spawns[3:] == ["b.1", "c.2", "c.3"], spawns
    assert _reasons(db, run_id) == []


async def test_a_resumed_run_numbers_each_tasks_children_from_one_again(tmp_path):
    db, run_id = await _record(tmp_path, fail={"b"}, resume=True)
    spawns = _spawns(db)
    assert spawns == ["a.1", "a.2", "b.1", "b.1", "c.1", "c.2"], spawns
    assert _reasons(db, run_id) == []


async def test_a_child_renumbered_out_of_order_is_a_finding(tmp_path, rechain):
    db, run_id = await _record(tmp_path, fail=set(), resume=False)
    conn = sqlite3.connect(db)
    try:
        query = "SELECT ordinal, data FROM events WHERE kind = 'spawn' ORDER BY ordinal"
        ordinal, data = conn.execute(query).fetchall()[4]
        assert json.loads(data)["child_id"] == "c.2"
        conn.execute("UPDATE events SET data = ? WHERE ordinal = ?",
                     (json.dumps({**json.loads(data), "child_id": "c.3"}), ordinal))  # fmt: skip
        conn.commit()
    finally:
        conn.close()
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert (
        "task:c: child 'c.3' is not numbered as one session spawns "
        "(the previous child of its task was number 1)"
    ) in reasons, reasons


# -- the rule itself, on recorded events -----------------------------------------------------

_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _events(*spawns: tuple[str, str]) -> list[EventRecord]:
    return [
        EventRecord(
            event_id=f"evt_{i}",
            run_id="r",
            kind="spawn",
            subject=f"task:{task}",
            data={
                "child_id": child,
                "agent": "helper",
                "goal": "g",
                "parent_agent": "lead",
                "parent_subject": f"task:{task}",
            },
            created_at=_AT,
        )
        for i, (task, child) in enumerate(spawns)
    ]


def _findings(fmt: int | None, *spawns: tuple[str, str], max_children: int = 2) -> list[str]:
    config: dict[str, Any] = {
        "agents": [
            {"name": "lead", "limits": {"max_children": max_children}},
            {"name": "helper"},
        ]
    }
    if fmt is not None:
        config["prompt_format"] = fmt
    graph = TaskGraph(
        Task(id=t, title=t, description="d", assignee="lead") for t in ("a", "b", "x:y", "x_y")
    )
    return [reason for _s, _c, reason in check_child_limits(config, graph, _events(*spawns), [])]


def test_per_task_numbering_is_the_rule_from_format_3_only():
    per_task = (("a", "a.1"), ("b", "b.1"), ("a", "a.2"), ("b", "b.2"))
    assert _findings(3, *per_task) == []
    assert _findings(None, *per_task) == [  # run-wide, b.1 starts a session; then a.2, b.3
        "child 'b.2' is not numbered as one session spawns (the previous child was number 2)"
    ]
    run_wide = (("a", "a.1"), ("b", "b.2"), ("a", "a.3"))
    assert _findings(2, *run_wide) == []
    assert _findings(3, *run_wide) == [
        "child 'b.2' is not numbered as one session spawns (its task had no child before it)",
        "child 'a.3' is not numbered as one session spawns "
        "(the previous child of its task was number 1)",
    ]


def test_max_children_is_counted_per_task_and_session_from_format_3():
    # Two sessions of a (each restarts at 1), b's children in between: within the limit.
    honest = (("a", "a.1"), ("b", "b.1"), ("a", "a.2"), ("a", "a.1"), ("b", "b.1"), ("a", "a.2"))
    assert _findings(3, *honest) == []
    over = (("a", "a.1"), ("b", "b.1"), ("a", "a.2"), ("a", "a.3"))
    assert _findings(3, *over) == ["task:a: 3 children in one session, but its max_children is 2"]


def test_tasks_whose_ids_give_one_prefix_share_its_numbers():
    """``x:y`` and ``x_y`` both give ``x_y.<n>``: the runner numbers that prefix's children
    together, so no two children of a session share an id."""
    assert _findings(3, ("x:y", "x_y.1"), ("x_y", "x_y.2"), ("x:y", "x_y.3")) == []
    assert _findings(3, ("x:y", "x_y.1"), ("x_y", "x_y.3")) == [
        "child 'x_y.3' is not numbered as one session spawns "
        "(the previous child of its task was number 1)"
    ]


async def test_two_tasks_of_one_id_prefix_never_share_a_child_id(tmp_path, monkeypatch):
    """Each task's prompt shows its own child's result, not the other task's.

    A new run refuses such a pair (`tests/orchestration/test_child_ids_round20.py`); this
    runs them as a version before that rule did, whose recorded runs are still resumed.
    """
    from clearance._orchestration import graph_check

    monkeypatch.setattr(
        "clearance._orchestration.orchestrator.check_new_tasks",
        lambda graph, team: graph_check.check_titles(graph),
    )
    db = tmp_path / "runs.db"
    seen: dict[str, str] = {}

    def answer(request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        if subject.startswith("child:"):
            return "found by " + request.prompt.text.split("Look ", 1)[1].split(".", 1)[0]
        seen[subject] = request.prompt.text
        return "SYNTH" if subject == "synthesis" else "done"

    def fan(task_id: str, goal: str, after: tuple[str, ...] = ()) -> Task:
        return Task(id=task_id, title=f"Task {task_id}", description="Find it.", assignee="lead",
                    depends_on=after, fan_out=FanOut(agent="helper", goals=(goal,)))  # fmt: skip

    options = RunOptions(workspace_root=tmp_path / "ws")
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(_team(), model=FunctionModel(answer), ledger=ledger,
                                    options=options).run_tasks(
            [fan("x:y", "Look alpha."), fan("x_y", "Look omega.", ("x:y",))]
        )  # fmt: skip
    assert result.status == "completed", result.error
    assert _spawns(db) == ["x_y.1", "x_y.2"]
    assert "found by alpha" in seen["task:x:y"] and "omega" not in seen["task:x:y"]
    assert "found by omega" in seen["task:x_y"] and "alpha" not in seen["task:x_y"]
    assert _reasons(db, result.run_id) == []
