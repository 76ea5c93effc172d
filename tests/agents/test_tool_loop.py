"""The tool-using agent loop: store tools behind grants, user tools, max_steps, the ledger."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import (
    Agent,
    AgentLimits,
    ConfigError,
    ContextStore,
    Orchestrator,
    RunLedger,
    Task,
    TaskStatus,
    Team,
)
from clearance._agents.tools import Tool
from clearance._context.verify import verify_run
from clearance.cli import app
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel, ScriptedModel

COORD = Agent(name="lead", instructions="You lead.")


@pytest.fixture
def store(tmp_path: Path):
    with ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as s:
        yield s


def task(assignee: str = "alice", description: str = "Do the work.") -> Task:
    return Task(id="t1", title="Work", description=description, assignee=assignee)


def synth_or(script):
    """A FunctionModel: the synthesis says SYNTH; task prompts are answered by ``script``."""

    def answer(request: ModelRequest):
        if request.prompt.manifest.subject == "synthesis":
            return "SYNTH"
        return script(request)

    return FunctionModel(answer)


def task_requests(model):
    return [r for r in model.requests if r.prompt.manifest.subject != "synthesis"]


async def test_store_tools_write_then_read_enter_prompt_with_origin(ledger, store):
    alice = Agent(
        name="alice",
        instructions="You are Alice.",
        tools=("store_set", "store_get"),
        store_grants={"notes": "read_write"},
    )
    calls = iter(
        [
            ToolCall(id="x", name="store_set", arguments={"namespace": "notes", "key": "k%_1",
                                                          "value": "STORED-FACT"}),
            ToolCall(id="y", name="store_get", arguments={"namespace": "notes", "key": "k%_1"}),
            "FINAL",
        ]
    )  # fmt: skip
    model = synth_or(lambda r: next(calls))
    orch = Orchestrator(Team(agents=(alice,), coordinator=COORD), model=model, ledger=ledger,
                        store=store)  # fmt: skip
    result = await orch.run_tasks([task()])
    assert result.tasks["t1"].result == "FINAL"
    assert store.get_entry("notes", "k%_1").agent == "alice"  # type: ignore[union-attr]

    reqs = task_requests(model)
    assert len(reqs) == 3
    # Tools are offered natively (OpenAI function format) and listed in the prompt.
    names = [t["function"]["name"] for t in reqs[0].tools]
    assert names == ["store_set", "store_get"]
    assert reqs[0].prompt.manifest.origins == (
        "instructions", "tool_spec:store_set", "tool_spec:store_get", "task:t1",
    )  # fmt: skip
    last = reqs[2].prompt
    origins = last.manifest.origins
    assert origins[-1] == "store:notes/k%_1"
    assert origins[-3].startswith("tool:") and origins[-2].startswith("tool:")
    assert "STORED-FACT" in last.messages[1].content
    assert last.manifest.clearance["store_read"] == ["notes"]

    records = ledger.tool_calls(result.run_id)
    assert [(r.name, r.step, r.is_error) for r in records] == [
        ("store_set", 1, False),
        ("store_get", 2, False),
    ]
    assert records[1].store_reads[0]["namespace"] == "notes"
    report = verify_run(ledger, result.run_id)
    assert report.ok, report.findings


async def test_agent_without_grant_cannot_read_or_write_through_any_tool(ledger, store):
    store.set("secret", "plan", "TOP-SECRET-VALUE", "admin")
    mallory = Agent(
        name="mallory",
        instructions="You are Mallory.",
        tools=("store_get", "store_set", "store_query"),
        store_grants={"public": "read"},
    )
    calls = iter(
        [
            [
                ToolCall(id="1", name="store_get",
                         arguments={"namespace": "secret", "key": "plan"}),
                ToolCall(id="2", name="store_query", arguments={"namespace": "secret"}),
                ToolCall(id="3", name="store_set",
                         arguments={"namespace": "secret", "key": "plan", "value": "pwned"}),
                ToolCall(id="4", name="store_set",
                         arguments={"namespace": "public", "key": "k", "value": "v"}),
            ],
            "done",
        ]
    )  # fmt: skip
    model = synth_or(lambda r: next(calls))
    team = Team(agents=(mallory,), coordinator=COORD)
    result = await Orchestrator(team, model=model, ledger=ledger, store=store).run_tasks(
        [task("mallory")]
    )
    assert result.tasks["t1"].status is TaskStatus.COMPLETED
    records = ledger.tool_calls(result.run_id)
    assert all(r.is_error for r in records)
    assert "agent 'mallory' may not read 'store:secret'" in records[0].result
    assert "may not read 'store:secret'" in records[1].result
    assert "agent 'mallory' may not write 'store:secret'" in records[2].result
    assert "may not write 'store:public'" in records[3].result
    assert store.get("secret", "plan") == "TOP-SECRET-VALUE"
    assert store.get("public", "k") is None
    assert all("TOP-SECRET-VALUE" not in r.prompt.text for r in model.requests)
    # The error reached the model as a tool result.
    assert "may not read 'store:secret'" in task_requests(model)[1].prompt.text
    assert verify_run(ledger, result.run_id).ok


async def test_tools_are_opt_in(ledger, store):
    plain = Agent(name="alice", instructions="Plain.", store_grants={"notes": "read"})
    model = synth_or(lambda r: "ANSWER")
    result = await Orchestrator(
        Team(agents=(plain,), coordinator=COORD), model=model, ledger=ledger, store=store
    ).run_tasks([task()])
    assert result.status == "completed"
    assert task_requests(model)[0].tools == ()
    # A tool call from an agent without tools is never executed: it has no loop.
    assert ledger.tool_calls(result.run_id) == []


async def test_max_steps_fails_the_task(ledger, store):
    looper = Agent(
        name="alice",
        instructions="Loops.",
        tools=("store_get",),
        store_grants={"n": "read"},
        limits=AgentLimits(max_steps=3),
    )
    model = synth_or(
        lambda r: ToolCall(id="c", name="store_get", arguments={"namespace": "n", "key": "k"})
    )
    result = await Orchestrator(
        Team(agents=(looper,), coordinator=COORD), model=model, ledger=ledger, store=store
    ).run_tasks([task()])
    outcome = result.tasks["t1"]
    assert outcome.status is TaskStatus.FAILED
    assert "max_steps exceeded" in (outcome.error or "")
    assert len(task_requests(model)) == 3
    assert len(ledger.tool_calls(result.run_id)) == 3


def word_count(text: str, minimum: int = 1) -> dict[str, int]:
    """Count the words of a text.

    Longer explanation that is not part of the description.
    """
    return {"words": max(len(text.split()), minimum)}


def test_tool_schema_from_signature():
    tool = Tool.from_function(word_count)
    spec = tool.to_openai()
    assert spec["type"] == "function"
    assert spec["function"]["name"] == "word_count"
    assert spec["function"]["description"] == "Count the words of a text."
    params = spec["function"]["parameters"]
    assert params["type"] == "object"
    assert params["properties"]["text"] == {"type": "string"}
    assert params["properties"]["minimum"] == {"type": "integer", "default": 1}
    assert params["required"] == ["text"]

    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ConfigError, match="no type hint"):
        Tool.from_function(untyped)


async def test_user_tool_runs_with_validated_arguments(ledger):
    alice = Agent(name="alice", instructions="A.", tools=("word_count",))
    calls = iter(
        [
            ToolCall(id="a", name="word_count", arguments={"text": "one two three"}),
            ToolCall(id="b", name="word_count", arguments={"text": 5, "bogus": 1}),
            ToolCall(id="c", name="no_such_tool", arguments={}),
            "FINAL",
        ]
    )
    model = synth_or(lambda r: next(calls))
    orch = Orchestrator(
        Team(agents=(alice,), coordinator=COORD), model=model, ledger=ledger, tools=[word_count]
    )
    result = await orch.run_tasks([task()])
    records = ledger.tool_calls(result.run_id)
    assert json.loads(records[0].result) == {"words": 3}
    assert records[1].is_error and "invalid arguments" in records[1].result
    assert records[2].is_error and "unknown tool 'no_such_tool'" in records[2].result
    assert verify_run(ledger, result.run_id).ok


async def test_unknown_tool_or_missing_store_refused_before_running(ledger):
    team = Team(agents=(Agent(name="alice", instructions="A.", tools=("nope",)),))
    with pytest.raises(ConfigError, match="unknown tool 'nope'"):
        await Orchestrator(team, model=ScriptedModel([]), ledger=ledger).run_tasks([task()])
    team = Team(agents=(Agent(name="alice", instructions="A.", tools=("store_get",)),))
    with pytest.raises(ConfigError, match="needs a context store"):
        await Orchestrator(team, model=ScriptedModel([]), ledger=ledger).run_tasks([task()])


async def test_verify_detects_a_forged_store_read(tmp_path, store):
    db = tmp_path / "runs.db"
    store.set("notes", "k", "REAL", "admin")
    alice = Agent(name="alice", instructions="A.", tools=("store_get",),
                  store_grants={"notes": "read"})  # fmt: skip
    calls = iter([ToolCall(id="1", name="store_get", arguments={"namespace": "notes", "key": "k"}),
                  "FINAL"])  # fmt: skip
    model = synth_or(lambda r: next(calls))
    with RunLedger(f"sqlite:///{db}") as led:
        result = await Orchestrator(
            Team(agents=(alice,), coordinator=COORD), model=model, ledger=led, store=store
        ).run_tasks([task()])
        assert verify_run(led, result.run_id).ok
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE tool_calls SET store_reads = ?",
            (json.dumps([{"namespace": "notes", "key": "k", "sha256": "0" * 64}]),),
        )
    with RunLedger(f"sqlite:///{db}") as led:
        report = verify_run(led, result.run_id)
    assert not report.ok
    assert any(f.origin == "store:notes/k" for f in report.findings)


def test_store_cli(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    runner = CliRunner()
    r = runner.invoke(app, ["store", "set", "ns", "a%b", '{"x": 1}', "--db", url])
    assert r.exit_code == 0, r.output
    runner.invoke(app, ["store", "set", "ns", "axb", "other", "--db", url, "--ttl-s", "0.001"])
    r = runner.invoke(app, ["store", "get", "ns", "a%b", "--db", url])
    assert r.exit_code == 0 and '{"x": 1}' in r.output
    r = runner.invoke(app, ["store", "query", "ns", "--prefix", "a%", "--json", "--db", url])
    assert r.exit_code == 0
    lines = [json.loads(line) for line in r.output.splitlines()]
    assert [e["key"] for e in lines] == ["a%b"]
    r = runner.invoke(app, ["store", "cleanup", "--db", url])
    assert r.exit_code == 0 and "removed 1 expired entries" in r.output
    r = runner.invoke(app, ["store", "get", "ns", "missing", "--db", url])
    assert r.exit_code == 1
    r = runner.invoke(app, ["store", "get", "ns", "k", "--db", "mysql://u:pw@h/db"])
    assert r.exit_code == 2 and "pw" not in r.output


async def test_answer_at_max_steps_makes_the_last_call_without_tools(ledger, store):
    agent = Agent(
        name="alice",
        instructions="A.",
        tools=("store_get",),
        store_grants={"n": "read"},
        limits=AgentLimits(max_steps=2, answer_at_max_steps=True),
    )

    def script(request: ModelRequest):
        if request.tools:
            return ToolCall(id="c", name="store_get", arguments={"namespace": "n", "key": "k"})
        return "ANSWER WITHOUT TOOLS"

    model = synth_or(script)
    result = await Orchestrator(
        Team(agents=(agent,), coordinator=COORD), model=model, ledger=ledger, store=store
    ).run_tasks([task()])
    assert result.tasks["t1"].result == "ANSWER WITHOUT TOOLS"
    last = task_requests(model)[-1]
    assert last.tools == ()
    assert not any(o.startswith("tool_spec:") for o in last.prompt.manifest.origins)
    assert any(o.startswith("tool:") for o in last.prompt.manifest.origins)
    assert verify_run(ledger, result.run_id).ok
