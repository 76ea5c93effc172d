"""A chat's ``compression`` record is checked by ``clearance verify``, and a window the agent's
instructions fill is refused when the chat starts.

The manifest's ``compression`` record (what the context-window monitor dropped or
summarized) was checked by nothing: a forger could claim any compression, name a summary the
model never wrote, or take a turn out of a prompt with no compression at all, and ``verify``
said OK. And a ``--context-window`` smaller than the agent's instructions started a session
in which every message was refused, one by one, exit 0."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clearance import Agent, AgentChat, AgentLimits, ConfigError, RunLedger
from clearance._context.verify import verify_run
from clearance._context.window import MAX_CONTEXT_WINDOW
from clearance._core.prompt import sha256_text
from clearance.testing import FunctionModel

SRC = str(Path(__file__).parents[2] / "src")


def _agent(instructions: str = "Alice.") -> Agent:
    return Agent(name="alice", instructions=instructions, limits=AgentLimits(max_output_tokens=32))


def _reply(request):
    if request.prompt.manifest.subject == "summary:alice":
        return "The user talked about the weather."
    return "noted"


async def _chat(db: Path, *, strategy: str = "drop_oldest", messages: int = 3) -> str:
    with RunLedger(f"sqlite:///{db}") as ledger:
        chat = AgentChat(
            agent=_agent(),
            model=FunctionModel(_reply, model_id="test:function"),
            ledger=ledger,
            context_window=400 if strategy == "summarize" else 2000,
            strategy=strategy,  # type: ignore[arg-type]
        )
        for i in range(messages):
            await chat.say(f"message {i} about the weather " + "word " * 20)
        chat.finish()
        report = verify_run(ledger, chat.run_id)
        assert report.ok, [str(f) for f in report.findings]
        return chat.run_id


def _findings(db: Path, run_id: str, rechain) -> list[str]:
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


def _forge_compression(db: Path, rewrite_prompt, record: dict) -> None:
    def manifest_edit(manifest):
        manifest["compression"] = record

    conn = sqlite3.connect(db)
    rewrite_prompt(conn, "conversation:alice", lambda block, item: block, manifest_edit)
    conn.commit()
    conn.close()


def _turn_ids(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    (manifest,) = conn.execute(
        "SELECT manifest FROM calls WHERE subject = 'conversation:alice' ORDER BY rowid DESC"
    ).fetchone()
    conn.close()
    return [
        i["origin"].partition(":")[2]
        for i in json.loads(manifest)["items"]
        if i["origin"].startswith("turn:")
    ]


def _record(**change) -> dict:
    record = {
        "strategy": "drop_oldest", "context_window": 2000, "tokens_before": 1600,
        "tokens_after": 700, "dropped": [], "summary_id": None, "summary_sha256": None,
        "recorded_to_memory": [],
    }  # fmt: skip
    return {**record, **change}


async def test_a_compression_that_dropped_a_turn_still_shown_is_a_finding(
    tmp_path, rewrite_prompt, rechain
):
    db = tmp_path / "runs.db"
    run_id = await _chat(db)
    first = _turn_ids(db)[0]
    _forge_compression(db, rewrite_prompt, _record(dropped=[first]))
    findings = _findings(db, run_id, rechain)
    assert any(
        f"turn:{first}" in f and "recorded as dropped by compression, yet in the prompt" in f
        for f in findings
    ), findings


async def test_a_compression_naming_a_summary_the_model_never_wrote_is_a_finding(
    tmp_path, rewrite_prompt, rechain
):
    db = tmp_path / "runs.db"
    run_id = await _chat(db)
    forged = _record(
        strategy="summarize", summary_id="summary_forged", summary_sha256=sha256_text("lies")
    )
    _forge_compression(db, rewrite_prompt, forged)
    findings = _findings(db, run_id, rechain)
    assert any("names a summary the model never wrote" in f for f in findings), findings


@pytest.mark.parametrize(
    "change",
    [{"strategy": "forget_everything"}, {"tokens_after": -5}, {"dropped": "turn_x"}],
)
async def test_a_malformed_compression_record_is_a_finding(
    tmp_path, rewrite_prompt, rechain, change
):
    db = tmp_path / "runs.db"
    run_id = await _chat(db, messages=2)
    _forge_compression(db, rewrite_prompt, _record(**change))
    findings = _findings(db, run_id, rechain)
    assert any("the compression record" in f for f in findings), findings


async def test_a_turn_taken_out_of_a_prompt_without_a_compression_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    # The user's first message (what the agent was asked) silently removed from the last
    # prompt, every digest recomputed: only the check against the earlier prompt can tell.
    db = tmp_path / "runs.db"
    run_id = await _chat(db)
    removed = []

    def edit(block, item):  # the prompt's first block: the oldest turn of the conversation
        if removed:
            return block
        assert item["origin"].startswith("turn:")
        removed.append(item)
        return None

    conn = sqlite3.connect(db)
    rewrite_prompt(conn, "conversation:alice", edit)
    conn.commit()
    conn.close()
    (removed,) = removed
    findings = _findings(db, run_id, rechain)
    assert any(
        removed["origin"] in f and "left the conversation with no compression recorded" in f
        for f in findings
    ), findings


async def test_summarized_and_dropped_conversations_still_verify(tmp_path):
    # The honest records pass: turns leave only as recorded drops, summaries are the model's.
    run_id = await _chat(tmp_path / "runs.db", strategy="summarize", messages=12)
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        calls = ledger.calls(run_id)
    assert any(c.manifest.get("compression") for c in calls)


def test_a_window_the_instructions_fill_is_refused_when_the_chat_starts():
    agent = _agent("You are Alice. " + "Remember every detail the user tells you. " * 5)
    model = FunctionModel(_reply, model_id="test:function")
    with pytest.raises(ConfigError) as caught:
        AgentChat(agent=agent, model=model, context_window=80)
    assert caught.value.field == "context_window"
    assert "the instructions of agent 'alice'" in str(caught.value)
    AgentChat(agent=agent, model=model, context_window=2000)  # room enough: accepted


def test_clearance_chat_refuses_such_a_window_in_one_line_exit_2(tmp_path):
    team = {
        "agents": [{
            "name": "alice", "limits": {"max_output_tokens": 8},
            "instructions": "You are Alice. " + "Remember every detail the user tells you. " * 5,
        }],
    }  # fmt: skip
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(team))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = dict(os.environ, PYTHONPATH=SRC)
    result = subprocess.run(
        [sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", "alice",
         "--model", "fake:x", "--context-window", "40", "--db", db],
        cwd=tmp_path, env=env, input="hello\nhi\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: context_window: a context window of 40")
    assert "use a larger context window" in lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize("window", [10**400, MAX_CONTEXT_WINDOW + 1])
def test_a_huge_context_window_is_refused_in_one_line(window):
    # 10**400 tokens raised OverflowError (int too large to convert to float) from the ratios.
    model = FunctionModel(_reply, model_id="test:function")
    with pytest.raises(ConfigError) as caught:
        AgentChat(agent=_agent(), model=model, context_window=window)
    assert caught.value.field == "context_window"
    assert f"from 1 to {MAX_CONTEXT_WINDOW}" in str(caught.value)
    AgentChat(agent=_agent(), model=model, context_window=MAX_CONTEXT_WINDOW)
