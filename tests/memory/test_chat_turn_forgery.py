"""``clearance verify`` against a forged chat prompt: a turn rewritten after an earlier prompt
showed it, or a summary the model never wrote.

A chat prompt's turns and summaries are checked by nothing but their origin's kind: a forger
could make an earlier turn of alice's conversation read as another agent's private memory
(the turn laundering it), or replace a summary with any text, and ``verify`` said OK."""

from __future__ import annotations

import dataclasses
import sqlite3

from clearance import Agent, AgentChat, AgentLimits, RunLedger
from clearance._context.verify import verify_run
from clearance._core.prompt import sha256_text
from clearance.testing import FunctionModel

SECRET = "bob's private note: the vault code is 7741"


def _agent() -> Agent:
    return Agent(name="alice", instructions="Alice.", limits=AgentLimits(max_output_tokens=32))


def _forge(db, run_id, rewrite_prompt, rechain, kind: str) -> None:
    def edit(block, item):
        if item["origin"].startswith(f"{kind}:") and not edit.done:
            edit.done = True
            item["sha256"] = sha256_text(SECRET)
            return dataclasses.replace(block, content=SECRET)
        return block

    edit.done = False
    conn = sqlite3.connect(db)
    rewrite_prompt(conn, "conversation:alice", edit)
    conn.commit()
    conn.close()
    assert edit.done, "the forger rewrote a block"
    rechain(db, run_id)


async def test_a_turn_rewritten_after_an_earlier_prompt_showed_it_is_a_finding(
    tmp_path, rewrite_prompt, rechain
):
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        model = FunctionModel(lambda request: "noted", model_id="test:function")
        chat = AgentChat(agent=_agent(), model=model, ledger=ledger, context_window=2000)
        for line in ("hello", "my name is Alice", "what did I say?"):
            await chat.say(line)
        chat.finish()
        assert verify_run(ledger, chat.run_id).ok
    _forge(db, chat.run_id, rewrite_prompt, rechain, "turn")
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, chat.run_id)
    reasons = [str(f) for f in report.findings]
    assert not report.ok
    assert any("not the turn an earlier prompt of the conversation showed" in r for r in reasons)


async def test_a_summary_the_model_never_wrote_is_a_finding(tmp_path, rewrite_prompt, rechain):
    db = tmp_path / "runs.db"

    def reply(request):
        if request.prompt.manifest.subject == "summary:alice":
            return "The user talked about the weather."
        return "noted"

    with RunLedger(f"sqlite:///{db}") as ledger:
        model = FunctionModel(reply, model_id="test:function")
        chat = AgentChat(
            agent=_agent(), model=model, ledger=ledger, context_window=400, strategy="summarize"
        )
        for i in range(12):
            await chat.say(f"message {i} about the weather " + "word " * 20)
        chat.finish()
        assert "summary:" in " ".join(chat.prompts[-1].manifest.origins)
        report = verify_run(ledger, chat.run_id)
        assert report.ok, [str(f) for f in report.findings]
    _forge(db, chat.run_id, rewrite_prompt, rechain, "summary")
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, chat.run_id)
    reasons = [str(f) for f in report.findings]
    assert not report.ok
    assert any("not a summary the model wrote" in r for r in reasons), reasons
