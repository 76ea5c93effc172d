"""Memory keys of a team file either work or are refused (or, when another command uses them,
named as having no effect where they have none)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

from clearance import Agent, AgentChat, AgentLimits, RunLedger
from clearance._core.memory_spec import AgentMemory
from clearance.cli import app
from clearance.memory import PersistentMemory
from clearance.testing import FunctionModel

SRC = str(Path(__file__).parents[2] / "src")


def test_record_to_with_record_none_is_refused_in_one_line(tmp_path):
    # Accepted, and nothing was ever recorded to the group: the key had no effect.
    team = {
        "memory_groups": [{"name": "research", "agents": ["scout", "analyst"]}],
        "agents": [
            {"name": "scout", "instructions": "S.",
             "memory": {"record": "none", "record_to": "research"}},
            {"name": "analyst", "instructions": "A.", "memory": {}},
        ],
        "tasks": [{"id": "a", "title": "A", "description": "do a", "assignee": "scout"}],
    }  # fmt: skip
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(team))
    result = CliRunner().invoke(app, ["graph", str(path)])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "agents.scout.memory.record_to" in line and "record: none" in line


def _chat(tmp_path: Path, memory: AgentMemory | None, name: str) -> tuple[AgentChat, str]:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    agent = Agent(
        name=name, instructions="Talk.", limits=AgentLimits(max_output_tokens=16), memory=memory
    )
    model = FunctionModel(lambda request: "noted", model_id="test:function")
    chat = AgentChat(
        agent=agent,
        model=model,
        memory=PersistentMemory(url, agent=name),
        ledger=RunLedger(f"sqlite:///{tmp_path / 'runs.db'}"),
        context_window=300,
    )
    return chat, url


async def test_a_chat_agent_whose_memory_records_nothing_keeps_nothing_it_drops(tmp_path):
    # `memory: {record: none}` was ignored by chat: every turn compression dropped was
    # written to long-term memory and recalled into later sessions' prompts.
    lines = ["my pin is 4711", *(f"filler {n} about the weather today" for n in range(12))]
    for name, memory in (("quiet", AgentMemory(record="none")), ("keeper", None)):
        chat, url = _chat(tmp_path, memory, name)
        for line in lines:
            assert await chat.say(line) == "noted"
        assert chat.compressions, "the small window forced compression"
        chat.finish()
        later, _ = _chat(tmp_path, memory, name)
        await later.say("what is my pin 4711?")
        shown = [o for o in later.prompts[-1].manifest.origins if o.startswith("memory:")]
        stored = PersistentMemory(url, agent=name).recent(100)
        if name == "quiet":
            assert stored == [] and shown == []  # nothing recorded, nothing recalled
            assert all(r.recorded_to_memory == () for r in chat.compressions)
        else:  # the default still records what it drops
            assert any("4711" in r.content for r in stored) and shown


def test_chat_refuses_on_error_continue_in_one_line(tmp_path):
    # A chat turn fails with its memory: continue has no effect there, so it is refused
    # (it was a warning, and the session went on to fail at the memory's first failure).
    team = {
        "memory": {"on_error": "continue"},
        "agents": [{"name": "alice", "instructions": "A.", "memory": {},
                    "limits": {"max_output_tokens": 32}}],
    }  # fmt: skip
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(team))
    env = dict(os.environ, PYTHONPATH=SRC)
    result = subprocess.run(
        [sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", "alice",
         "--model", "fake:x", "--context-window", "2000",
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=env, input="hello\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: team.yaml: memory.on_error: continue has no effect in clearance chat: a "
        "failure of the memory ends the session (remove on_error, or run the team file)"
    ], result.stderr
    assert not (tmp_path / "runs.db").exists()


def test_memory_on_an_agent_that_only_reviews_is_refused_in_one_line(tmp_path):
    # A reviewer answers with the task's text and the candidate only: it recalls and records
    # nothing, so its memory settings were accepted and ignored.
    team = {
        "agents": [
            {"name": "writer", "instructions": "W."},
            {"name": "critic", "instructions": "C.", "memory": {"recall": 3}},
        ],
        "tasks": [{"id": "a", "title": "A", "description": "do a", "assignee": "writer",
                   "review": {"by": ["critic"]}}],
    }  # fmt: skip
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(team))
    result = CliRunner().invoke(app, ["graph", str(path)])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "agents.critic.memory" in line and "only as a reviewer of task 'a'" in line
    team["tasks"].append(
        {"id": "b", "title": "B", "description": "do b", "assignee": "critic"}
    )  # an agent that also has a task of its own recalls for it: accepted
    path.write_text(yaml.safe_dump(team))
    assert CliRunner().invoke(app, ["graph", str(path)]).exit_code == 0
