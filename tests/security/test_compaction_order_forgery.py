"""``clearance verify`` against a compaction recorded after the prompt that used it.

A tool loop that compacts older steps records a ``compacted`` event before the prompt that
shows them as one line, and a chat that summarizes earlier turns has the summary written by
a summarizing call before the prompt that shows it. A forger with the ledger file who
rebuilds the hash chain could replace a tool result a prompt showed with its compacted line
and record the ``compacted`` event afterwards (or show a summary written only later):
``verify`` accepted it, since it only asked whether such an event or summary existed.
Real SQLite files throughout.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

from clearance import (
    Agent,
    AgentChat,
    AgentLimits,
    Orchestrator,
    RunLedger,
    RunOptions,
    Task,
    Team,
)
from clearance._context.tool_sections import compacted_result
from clearance._context.verify import verify_run
from clearance._core.prompt import sha256_text
from clearance.models import ToolCall
from clearance.testing import FunctionModel


def page(n: int) -> str:
    """Read a page."""
    return f"PAGE-{n} " + " ".join(f"word{n}x{i}" for i in range(40))


def _team(compact: int | None) -> Team:
    limits = AgentLimits(max_steps=8, compact_tool_steps=compact)
    return Team(
        agents=(Agent(name="reader", instructions="You read.", tools=("page",), limits=limits),),
        coordinator=Agent(name="editor", instructions="You edit."),
    )


def reply(request: Any) -> Any:
    if request.prompt.manifest.subject != "task:read":
        return "SYNTH"
    read = sum(o.startswith("tool:") for o in request.prompt.manifest.origins)
    return ToolCall(id=f"c{read}", name="page", arguments={"n": read}) if read < 3 else "done"


async def _run(db: Path, tmp_path: Path, compact: int | None) -> str:
    task = Task(id="read", title="Read", description="Read.", assignee="reader")
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            _team(compact), model=FunctionModel(reply), ledger=ledger, tools={"page": page},
            options=RunOptions(workspace_root=tmp_path / "ws"),
        ).run_tasks([task])  # fmt: skip
        assert result.status == "completed", result.error
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
        return result.run_id


async def test_an_honest_compacted_tool_loop_verifies(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = await _run(db, tmp_path, compact=1)
    with RunLedger(f"sqlite:///{db}") as ledger:
        events = [e for e in ledger.events(run_id) if e.kind == "compacted"]
        last = [c for c in ledger.calls(run_id) if c.subject == "task:read"][-1]
    assert events  # the loop compacted, and verify (in `_run`) found nothing wrong
    assert "[compacted earlier step: page ok" in last.messages[1]["content"]


async def test_a_compacted_event_recorded_after_the_prompt_is_a_finding(
    tmp_path: Path, rewrite_prompt: Any, rechain: Any
) -> None:
    """The forger shows a tool result as its compacted line and records the event afterwards."""
    db = tmp_path / "runs.db"
    run_id = await _run(db, tmp_path, compact=None)  # the run compacted nothing
    line = compacted_result("page", page(0), is_error=False)
    shown: list[str] = []

    def edit(block: Any, item: dict[str, Any]) -> Any:
        if not item["origin"].startswith("tool:") or shown:
            return block
        shown.append(item["origin"])  # the first page read
        item["sha256"] = sha256_text(line)
        return dataclasses.replace(block, content=line)

    conn = sqlite3.connect(db)
    call_id = rewrite_prompt(conn, "task:read", edit)
    tool_call_id = shown[0].partition(":")[2]
    conn.execute(
        "INSERT INTO events (event_id, run_id, kind, subject, data, created_at) "
        "SELECT 'evt_forged', run_id, 'compacted', 'task:read', ?, created_at "
        "FROM events WHERE run_id = ? LIMIT 1",
        (json.dumps({"tool_call_ids": [tool_call_id], "reason": "policy", "keep_recent": 1}),
         run_id),
    )  # fmt: skip
    conn.commit()
    conn.close()
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, run_id)
    assert [(f.call_id, f.subject, f.origin, f.reason) for f in report.findings] == [
        (
            call_id,
            "task:read",
            shown[0],
            "the tool result is shown compacted, but the compacted event evt_forged that "
            "records it was recorded after the prompt",
        )
    ], [str(f) for f in report.findings]


def _chat_reply(request: Any) -> str:
    if request.prompt.manifest.subject == "summary:alice":  # each summary its own text
        return f"The user talked about the weather ({len(request.prompt.text)} chars)."
    return "noted"


async def test_a_summary_written_after_the_prompt_that_shows_it_is_a_finding(
    tmp_path: Path, rechain: Any
) -> None:
    """The forger moves the summarizing call after the prompts (as if made up afterwards)."""
    db = tmp_path / "runs.db"
    agent = Agent(name="alice", instructions="Alice.", limits=AgentLimits(max_output_tokens=32))
    with RunLedger(f"sqlite:///{db}") as ledger:
        chat = AgentChat(
            agent=agent, model=FunctionModel(_chat_reply, model_id="test:function"),
            ledger=ledger, context_window=400, strategy="summarize",
        )  # fmt: skip
        for i in range(12):
            await chat.say(f"message {i} about the weather " + "word " * 20)
        chat.finish()
        report = verify_run(ledger, chat.run_id)
        assert report.ok, [str(f) for f in report.findings]  # the honest chat verifies
        calls = ledger.calls(chat.run_id)
    summary = next(c for c in calls if c.subject == "summary:alice")
    digest = sha256_text(summary.response.strip())
    showing = [
        (c.call_id, i["origin"])
        for c in calls
        if c.subject == "conversation:alice"
        for i in c.manifest["items"]
        if i["origin"].startswith("summary:") and i["sha256"] == digest
    ]
    assert showing
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE calls SET ordinal = (SELECT max(ordinal) + 1 FROM calls) WHERE call_id = ?",
        (summary.call_id,),
    )
    conn.commit()
    conn.close()
    rechain(db, chat.run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, chat.run_id)
    reason = (
        f"the summary was written by {summary.call_id}, a summarizing call recorded after "
        "the prompt that shows it"
    )
    assert sorted((f.call_id, f.origin, f.reason) for f in report.findings) == sorted(
        (call_id, origin, reason) for call_id, origin in showing
    ), [str(f) for f in report.findings]
