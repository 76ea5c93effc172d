"""`clearance verify` on isolated tasks' clarifications: each recorded round is what happened.

A clarification round is recorded as an event (the question, the answer, who answered), and
the subagent's next prompt shows the answer as ``clarification:<n>``. A forger who rewrites
both the event and the prompt (digests recomputed, the chain rebuilt) must still be caught:
the question must be one the task's own subagent asked in a recorded call, a coordinator's
answer what the coordinator's recorded call answered to that question, a served file one the
subagent asked for. A resumed run, whose person may answer the same question differently,
verifies: each prompt's clarifications are the answers of one run of the task.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from clearance import Agent, Orchestrator, RunLedger, RunOptions, RunServices, Task, Team
from clearance._context.render import Block
from clearance._context.verify import verify_run
from clearance._core.errors import ModelError
from clearance._core.prompt import sha256_text
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

SIBLING_RESULT = "SIBLING-RESULT-CANARY-4c1e"
TEAM = Team(agents=(Agent(name="worker", instructions="You review."),),
            coordinator=Agent(name="editor", instructions="You edit."))  # fmt: skip
TASKS = [
    Task(id="sib", title="Sib", description="The sibling.", assignee="worker"),
    Task(id="t", title="T", description="Review.", assignee="worker", mode="isolated"),
    Task(id="u", title="U", description="Review too.", assignee="worker", mode="isolated"),
]


def _answer(request: ModelRequest) -> str:
    subject, text = request.prompt.manifest.subject, request.prompt.messages[-1].content
    if subject == "task:sib":
        return SIBLING_RESULT
    if subject.startswith("isolated:"):
        if "Clarification 1" in text:
            return "fine\nSTATUS: done"
        if "### notes.md" not in text:
            return "STATUS: needs_context\nFILE: notes.md"
        return f"STATUS: needs_context\nQUESTION: What is {subject}?"
    if subject.startswith("clarification:"):
        return f"The answer for {subject}."
    return "SYNTH"


async def _person(task_id: str, question: str) -> str:
    return f"The person's answer for {task_id}."


async def _record(tmp_path: Path, ask: Any = None) -> tuple[Path, str]:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.md").write_text("# Notes\n")
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            TEAM, model=FunctionModel(_answer), ledger=ledger,
            options=RunOptions(input_root=root, workspace_root=tmp_path / "ws"),
            services=RunServices(ask_person=ask),
        ).run_tasks(TASKS)  # fmt: skip
        assert result.status == "completed", result.error
    return db, result.run_id


def _findings(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


def _rewrite_events(conn: sqlite3.Connection, subject: str, change: Any) -> None:
    rows = conn.execute(
        "SELECT rowid, data FROM events WHERE kind = 'clarification' AND subject = ?", (subject,)
    ).fetchall()
    for rowid, data in rows:
        conn.execute(
            "UPDATE events SET data = ? WHERE rowid = ?",
            (json.dumps(change(json.loads(data))), rowid),
        )


def _set_clarification(new: str) -> Any:
    def edit(block: Block, item: dict[str, Any]) -> Block:
        if item["origin"] == "clarification:1":
            item["sha256"] = sha256_text(new)
            return Block(heading=block.heading, content=new)
        return block

    return edit


async def test_an_honest_run_verifies(tmp_path):
    db, run_id = await _record(tmp_path)
    assert _findings(db, run_id) == []


async def test_an_answer_rewritten_in_event_and_prompt_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    db, run_id = await _record(tmp_path)
    forged = f"Here is what the sibling found: {SIBLING_RESULT}"
    conn = sqlite3.connect(db)
    _rewrite_events(
        conn, "task:t", lambda d: {**d, "answer": forged} if d["kind"] == "question" else d
    )
    rewrite_prompt(conn, "isolated:t", _set_clarification(forged))
    conn.commit()
    conn.close()
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("not what the coordinator's recorded call answered" in f for f in found), found


async def test_a_question_a_person_answered_is_one_the_subagent_asked(tmp_path, rechain):
    """With no coordinator call to compare, the question is still the subagent's own."""
    db, run_id = await _record(tmp_path, ask=_person)
    assert _findings(db, run_id) == []
    conn = sqlite3.connect(db)
    _rewrite_events(conn, "task:t", lambda d: {**d, "question": f"Show me {SIBLING_RESULT}"}
                    if d["kind"] == "question" else d)  # fmt: skip
    conn.commit()
    conn.close()
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("not a question the task's subagent asked" in f for f in found), found


async def test_a_clarification_of_another_task_moved_in_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    db, run_id = await _record(tmp_path)
    conn = sqlite3.connect(db)
    (data,) = conn.execute(
        "SELECT data FROM events WHERE kind = 'clarification' AND subject = 'task:u' "
        "AND data LIKE '%\"question\"%'"
    ).fetchone()
    other = json.loads(data)["answer"]
    _rewrite_events(conn, "task:t", lambda d: json.loads(data) if d["kind"] == "question" else d)
    rewrite_prompt(conn, "isolated:t", _set_clarification(other))
    conn.commit()
    conn.close()
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("clarification of task 't': not a question the task's subagent asked" in f
               for f in found), found  # fmt: skip


async def test_a_served_file_the_subagent_never_asked_for_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    db, run_id = await _record(tmp_path)
    secret = "OUTSIDE-SECRET-CANARY"
    conn = sqlite3.connect(db)
    # One more round recorded, serving a file from outside the project.
    (event_id, data, created) = conn.execute(
        "SELECT event_id, data, created_at FROM events WHERE kind = 'clarification' "
        "AND subject = 'task:t' AND data LIKE '%\"file\"%'"
    ).fetchone()
    data = {**json.loads(data), "path": "../secrets.txt", "sha256": sha256_text(secret)}
    conn.execute(
        "INSERT INTO events (event_id, run_id, kind, subject, data, created_at) "
        "VALUES (?, ?, 'clarification', 'task:t', ?, ?)",
        (event_id + "x", run_id, json.dumps(data), created),
    )

    def edit(block: Block, item: dict[str, Any]) -> Block:
        if item["origin"] == "file:notes.md":
            item.update(origin="file:../secrets.txt", title="../secrets.txt",
                        sha256=sha256_text(secret))  # fmt: skip
            return Block(heading="../secrets.txt", content=secret)
        return block

    def clearance(manifest: dict[str, Any]) -> None:
        manifest["clearance"]["files"] = ["../secrets.txt"]

    rewrite_prompt(conn, "isolated:t", edit, clearance)
    conn.commit()
    conn.close()
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("'../secrets.txt' is not a file the task's subagent asked for" in f
               for f in found), found  # fmt: skip


async def test_a_resumed_run_whose_person_answers_again_verifies(tmp_path):
    """A question asked again differently after a resume is asked again; the new prompt
    shows the new answer. (The same question gets the recorded answer again:
    test_person_answer_resume.py.)"""
    root = tmp_path / "project"
    root.mkdir()
    down = {"on": True}

    def answer(request: ModelRequest) -> str:
        if request.prompt.manifest.subject != "isolated:t":
            return "SYNTH"
        if "Clarification 1" not in request.prompt.messages[-1].content:
            return (
                f"STATUS: needs_context\nQUESTION: Which version{'?' if down['on'] else ', again?'}"
            )
        if down["on"]:
            raise ModelError("the server is down (scripted)", model_id="test:function")
        return "fine\nSTATUS: done"

    replies = iter(["3.11", "3.12"])

    async def ask(task_id: str, question: str) -> str:
        return next(replies)

    def orchestrator(ledger: RunLedger) -> Orchestrator:
        return Orchestrator(
            TEAM, model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(input_root=root, workspace_root=tmp_path / "ws"),
            services=RunServices(ask_person=ask),
        )  # fmt: skip

    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        first = await orchestrator(ledger).run_tasks([TASKS[1]])
        assert first.status == "failed"
        down["on"] = False
        second = await orchestrator(ledger).resume(first.run_id)
        assert second.status == "completed", second.error
        rounds = [
            e.data["answer"] for e in ledger.events(first.run_id) if e.kind == "clarification"
        ]
        assert rounds == ["3.11", "3.12"]
        report = verify_run(ledger, first.run_id)
        assert report.ok, [str(f) for f in report.findings]


async def test_a_prompt_mixing_answers_of_two_runs_of_the_task_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    """Each answer was recorded, but the two were never given together."""
    root = tmp_path / "project"
    root.mkdir()
    down = {"on": True}

    def answer(request: ModelRequest) -> str:
        if request.prompt.manifest.subject != "isolated:t":
            return "SYNTH"
        text = request.prompt.messages[-1].content
        if "Clarification 2" not in text:  # asked differently after the resume: asked again
            return (
                f"STATUS: needs_context\nQUESTION: Which version{'?' if down['on'] else ', again?'}"
            )
        if down["on"]:
            raise ModelError("the server is down (scripted)", model_id="test:function")
        return "fine\nSTATUS: done"

    replies = iter(["A1", "A2", "B1", "B2"])

    async def ask(task_id: str, question: str) -> str:
        return next(replies)

    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:

        def orchestrator() -> Orchestrator:
            return Orchestrator(
                TEAM, model=FunctionModel(answer), ledger=ledger,
                options=RunOptions(input_root=root, workspace_root=tmp_path / "ws"),
                services=RunServices(ask_person=ask),
            )  # fmt: skip

        first = await orchestrator().run_tasks([TASKS[1]])
        down["on"] = False
        assert (await orchestrator().resume(first.run_id)).status == "completed"
    run_id = first.run_id
    assert _findings(db, run_id) == []
    conn = sqlite3.connect(db)
    rewrite_prompt(conn, "isolated:t", _set_clarification("A1"))
    conn.commit()
    conn.close()
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("not the answers of one run of the task" in f for f in found), found
