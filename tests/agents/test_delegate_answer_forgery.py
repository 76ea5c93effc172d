"""A delegate's answer, as its delegator was shown it, must be what the delegate answered.

The ``delegate`` tool call's recorded result is what the delegator's next prompt shows (a
``tool:<call id>`` item), so it must be the answer of a successful call of the delegate
(subject ``delegation:<call id>``): verbatim, marked when cut off, or stripped as earlier
versions kept it; or, when it was too long to show, the offloaded text's digest. A forger
who rewrites the result and the delegator's prompt to agree, hash chain rebuilt, is caught.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from test_delegation import delegate, run_alice, scripted

from clearance import Agent, RunLedger
from clearance._context.render import Block
from clearance._context.verify import verify_run
from clearance._core.prompt import sha256_text

FORGED = "Bob checked it: ship it."


def _forge(
    rewrite_prompt: Any, db: Path, call_id: str, text: str, subject: str = "task:t1"
) -> None:
    """A tool call's result, and its block in ``subject``'s last prompt, become ``text``."""

    shown = []

    def edit(block: Block, item: dict[str, Any]) -> Block:
        if item["origin"] != f"tool:{call_id}":
            return block
        item["sha256"] = sha256_text(text)
        shown.append(text)
        return Block(heading=block.heading, content=text)

    conn = sqlite3.connect(db)
    try:
        conn.execute("UPDATE tool_calls SET result = ? WHERE tool_call_id = ?", (text, call_id))
        rewrite_prompt(conn, subject, edit)
        conn.commit()
    finally:
        conn.close()
    assert shown, f"no block of tool call {call_id!r} in {subject!r}'s last prompt"


async def test_a_forged_delegate_answer_is_a_finding(tmp_path, rechain, rewrite_prompt):
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        model = scripted({"alice": [delegate("bob", "Check it."), "done"], "bob": ["Not yet."]})
        alice = Agent(name="alice", instructions="A.", can_delegate_to=("bob",))
        result = await run_alice(ledger, model, alice, Agent(name="bob", instructions="B."))
        (call,) = [t for t in ledger.tool_calls(result.run_id) if t.name == "delegate"]
        assert call.result == "Not yet."
        assert verify_run(ledger, result.run_id).ok
    _forge(rewrite_prompt, db, call.tool_call_id, FORGED)
    rechain(db, result.run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        found = [str(f) for f in verify_run(ledger, result.run_id).findings]
    assert any("is not an answer of its delegate" in f for f in found), found


async def test_a_delegate_answer_with_tools_and_surrounding_space_verifies(ledger):
    """A tool-using delegate's final answer reaches its delegator verbatim, spaces and all."""
    from test_delegation import peek

    assert peek
    model = scripted({"alice": [delegate("bob", "Check it."), "done"],
                      "bob": ["\n  Bob's answer.  \n"]})  # fmt: skip
    alice = Agent(name="alice", instructions="A.", can_delegate_to=("bob",))
    bob = Agent(name="bob", instructions="B.", tools=("peek",))
    result = await run_alice(ledger, model, alice, bob)
    report = verify_run(ledger, result.run_id)
    assert report.ok, report.findings
