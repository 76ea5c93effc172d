"""A store entry's block heading names its entry and the agent that wrote it, as recorded.

``Store entry <namespace>/<key> (written by <writer>)`` heads the value a store read put in
a prompt. The writer tells the model whose text it is reading, so a forger who rewrites it
(a planted entry passed off as a trusted agent's) and rebuilds the hash chain is caught:
against the writer the tool call recorded with its read, and with the store at hand
(``verify --store``) against the entry itself while it is unchanged since the read. A run
recorded before reads named their writer is checked against the store only.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from clearance import Agent, ContextStore, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.render import Block
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

HEADING = "Store entry notes/plan (written by intruder)"


def _answer(request: ModelRequest) -> Any:
    if request.prompt.manifest.subject == "synthesis":
        return "SYNTHESIS"
    if "## Results of your tool calls" in request.prompt.messages[-1].content:
        return "done"
    return ToolCall(id="g", name="store_get", arguments={"namespace": "notes", "key": "plan"})


async def _record(tmp_path: Path) -> tuple[Path, ContextStore, str]:
    store = ContextStore(f"sqlite:///{tmp_path / 'store.db'}")
    store.set("notes", "plan", "Ship on Friday.", "intruder")
    team = Team(agents=(Agent(name="lead", instructions="You lead.", tools=("store_get",),
                              store_grants={"notes": "read"}),))  # fmt: skip
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(_answer), ledger=ledger, store=store,
            options=RunOptions(workspace_root=tmp_path / "ws"),
        ).run_tasks([Task(id="t", title="T", description="Read.", assignee="lead")])  # fmt: skip
        assert result.status == "completed", result.error
        (read,) = ledger.tool_calls(result.run_id)
        assert read.store_reads[0]["writer"] == "intruder"
    return db, store, result.run_id


def retitle(rewrite_prompt: Any, db: Path, old: str, new: str, subject: str = "task:t") -> None:
    """Rename a block's heading in ``subject``'s last prompt, digests recomputed (a forger)."""
    renamed = []

    def edit(block: Block, item: dict[str, Any]) -> Block:
        if block.heading != old:
            return block
        assert item["title"] == old
        item["title"] = new
        renamed.append(new)
        return Block(heading=new, content=block.content)

    conn = sqlite3.connect(db)
    try:
        rewrite_prompt(conn, subject, edit)
        conn.commit()
    finally:
        conn.close()
    assert renamed, f"no block headed {old!r}"


def _edit_reads(db: Path, change: Any) -> None:
    conn = sqlite3.connect(db)
    try:
        call_id, reads = conn.execute("SELECT tool_call_id, store_reads FROM tool_calls").fetchone()
        reads = [change(dict(r)) for r in json.loads(reads)]
        conn.execute("UPDATE tool_calls SET store_reads = ? WHERE tool_call_id = ?",
                     (json.dumps(reads), call_id))  # fmt: skip
        conn.commit()
    finally:
        conn.close()


def _findings(db: Path, run_id: str, store: ContextStore | None = None) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        lookup = store.get_entry if store is not None else None
        return [str(f) for f in verify_run(ledger, run_id, store=lookup).findings]


async def test_an_honest_read_verifies_with_and_without_the_store(tmp_path):
    db, store, run_id = await _record(tmp_path)
    assert _findings(db, run_id) == []
    assert _findings(db, run_id, store) == []
    store.set("notes", "plan", "Ship on Monday.", "lead")  # rewritten since: not compared
    assert _findings(db, run_id, store) == []
    store.close()


async def test_a_writer_forged_in_the_heading_is_a_finding(tmp_path, rechain, rewrite_prompt):
    db, store, run_id = await _record(tmp_path)
    retitle(rewrite_prompt, db, HEADING, "Store entry notes/plan (written by lead)")
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("names writer 'lead', but the read recorded 'intruder'" in f for f in found), found
    store.close()


async def test_a_writer_forged_in_the_heading_and_the_read_is_a_finding_against_the_store(
    tmp_path, rechain, rewrite_prompt
):
    db, store, run_id = await _record(tmp_path)
    retitle(rewrite_prompt, db, HEADING, "Store entry notes/plan (written by lead)")
    _edit_reads(db, lambda r: {**r, "writer": "lead"})
    rechain(db, run_id)
    found = _findings(db, run_id, store)
    assert any("the store says 'intruder' wrote it" in f for f in found), found
    store.close()


async def test_a_read_recorded_without_its_writer_is_checked_against_the_store(
    tmp_path, rechain, rewrite_prompt
):
    """An older run's read names no writer: with the store at hand, the heading still is."""
    db, store, run_id = await _record(tmp_path)
    _edit_reads(db, lambda r: {k: v for k, v in r.items() if k != "writer"})
    rechain(db, run_id)
    assert _findings(db, run_id) == []
    assert _findings(db, run_id, store) == []
    retitle(rewrite_prompt, db, HEADING, "Store entry notes/plan (written by lead)")
    rechain(db, run_id)
    assert _findings(db, run_id) == []  # nothing to compare with
    found = _findings(db, run_id, store)
    assert any("the store says 'intruder' wrote it" in f for f in found), found
    store.close()


async def test_a_heading_naming_another_entry_is_a_finding(tmp_path, rechain, rewrite_prompt):
    db, store, run_id = await _record(tmp_path)
    _edit_reads(db, lambda r: {k: v for k, v in r.items() if k != "writer"})
    retitle(rewrite_prompt, db, HEADING, "Store entry notes/approved (written by intruder)")
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("is not a heading of entry 'notes/plan'" in f for f in found), found
    store.close()
