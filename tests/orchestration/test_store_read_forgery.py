"""Two store reads of one origin: the content a prompt shows must be a granted read's.

``store:a/b/c`` names both ``a`` + ``b/c`` and ``a/b`` + ``c``. A forger who shows the value
of an entry in a namespace the agent may not read, and adds that read to the tool call's
record beside the granted one, passed `verify` when it checked "some read is granted" and
"some read has this digest" apart.
"""

from __future__ import annotations

import json
import sqlite3

from test_subagents import forge_item

from clearance import Agent, ContextStore, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.prompt import sha256_text
from clearance.models import ToolCall
from clearance.testing import FunctionModel

SECRET = "SECRET-VALUE-in-a/b"


async def test_a_shown_value_from_an_ungranted_namespace_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    store = ContextStore(f"sqlite:///{tmp_path / 'store.db'}")
    store.set("a", "b/c", "PUBLIC", "owner")
    store.set("a/b", "c", SECRET, "owner")

    def answer(request):
        if request.prompt.manifest.subject == "synthesis":
            return "SYNTHESIS"
        if "## Results of your tool calls" in request.prompt.messages[-1].content:
            return "done"
        return ToolCall(id="g", name="store_get", arguments={"namespace": "a", "key": "b/c"})

    team = Team(agents=(Agent(name="reader", instructions="You read.", tools=("store_get",),
                              store_grants={"a": "read"}),))  # fmt: skip
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(answer), ledger=ledger, store=store,
            options=RunOptions(workspace_root=tmp_path / "ws"),
        ).run_tasks([Task(id="t", title="T", description="Read.", assignee="reader")])  # fmt: skip
        assert result.status == "completed", result.error
        assert verify_run(ledger, result.run_id).ok
        (read_call,) = ledger.tool_calls(result.run_id)
        forge_item(rewrite_prompt, ledger, "task:t", "Store entry a/b/c", SECRET)
    updated = store.get_entry("a/b", "c").updated_at.isoformat()  # type: ignore[union-attr]
    conn = sqlite3.connect(db)
    try:
        reads = json.loads(conn.execute(
            "SELECT store_reads FROM tool_calls WHERE tool_call_id = ?", (read_call.tool_call_id,)
        ).fetchone()[0])  # fmt: skip
        reads.append({"namespace": "a/b", "key": "c", "sha256": sha256_text(SECRET),
                      "updated_at": updated})  # fmt: skip
        conn.execute("UPDATE tool_calls SET store_reads = ? WHERE tool_call_id = ?",
                     (json.dumps(reads), read_call.tool_call_id))  # fmt: skip
        conn.commit()
    finally:
        conn.close()
    rechain(db, result.run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        # Without the store at hand (`clearance verify` without --store), as with it.
        alone = [str(f) for f in verify_run(ledger, result.run_id).findings]
        audited = verify_run(ledger, result.run_id, store=store.get_entry).findings
    store.close()
    assert any("not granted for reads" in r for r in alone), alone
    assert audited
