"""``clearance verify`` checks every store write against the writing agent's own grants.

A write refused at run time is recorded as an error. A forger who turns it into a success
(the record, the result the model was shown, the hash chain rebuilt) claims an agent wrote
a namespace it may not write: verify names the agent and the namespace, for a task's own
assignee as for a delegate (whose callers' grants were already checked).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from clearance import Agent, ContextStore, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.render import Block
from clearance._context.verify import verify_run
from clearance._core.prompt import sha256_text
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

WRITE = {"namespace": "secrets", "key": "k", "value": "planted"}


def _answer(request: ModelRequest) -> Any:
    if request.prompt.manifest.subject == "synthesis":
        return "SYNTHESIS"
    if "## Results of your tool calls" in request.prompt.messages[-1].content:
        return "done"
    return ToolCall(id="s", name="store_set", arguments=WRITE)


async def _record(tmp_path: Path) -> tuple[Path, str]:
    store = ContextStore(f"sqlite:///{tmp_path / 'store.db'}")
    team = Team(agents=(Agent(name="scribe", instructions="You write.", tools=("store_set",),
                              store_grants={"notes": "write"}),))  # fmt: skip
    db = tmp_path / "runs.db"
    with store, RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(_answer), ledger=ledger, store=store,
            options=RunOptions(workspace_root=tmp_path / "ws"),
        ).run_tasks([Task(id="t", title="T", description="Write.", assignee="scribe")])  # fmt: skip
        assert result.status == "completed", result.error
        (call,) = ledger.tool_calls(result.run_id)
        assert call.is_error and "secrets" in call.result
        assert store.get("secrets", "k") is None
        assert verify_run(ledger, result.run_id).ok
    return db, result.run_id


async def test_a_refused_write_forged_into_a_success_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    db, run_id = await _record(tmp_path)
    forged = "stored secrets/k"
    conn = sqlite3.connect(db)
    try:
        (refusal,) = conn.execute("SELECT result FROM tool_calls").fetchone()
        conn.execute("UPDATE tool_calls SET is_error = 0, result = ?", (forged,))
        shown = []

        def edit(block: Block, item: dict[str, Any]) -> Block:
            if block.content != refusal:
                return block
            shown.append(block)
            item["sha256"] = sha256_text(forged)
            return Block(heading=block.heading, content=forged, on_fence=block.on_fence)

        rewrite_prompt(conn, "task:t", edit)
        conn.commit()
    finally:
        conn.close()
    assert shown, "the refusal was not shown to the model"
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        found = [str(f) for f in verify_run(ledger, run_id).findings]
    assert any(
        "'scribe' could write 'secrets', which its own grants do not allow" in f for f in found
    ), found
