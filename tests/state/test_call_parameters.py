"""Each recorded model call carries what the model was asked besides the prompt, chained.

Sampling, max tokens, the tools offered and the JSON schema asked for are recorded with the
call (``calls.parameters``), are part of the call's hash-chain entry (an edit is caught by
``clearance verify``) and are shown by ``clearance inspect --json``.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.builder import ContextBuilder
from clearance._context.verify import verify_run
from clearance._core.agent_spec import Sampling
from clearance._core.prompt import canonical_json, sha256_text
from clearance._state.graph import TaskGraph
from clearance._state.queue import TaskQueue
from clearance.cli import app
from clearance.models import ModelRequest, ModelResponse, Usage, estimate_tokens
from clearance.testing import FunctionModel

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def peek() -> str:
    """Look at something."""
    return "seen"


def answer(request: ModelRequest) -> str:
    return '{"n": 1}' if request.json_schema is not None else "done"


async def recorded_run(tmp_path) -> tuple[str, str, FunctionModel]:
    sampling = Sampling(temperature=0.7, top_p=0.9, stop=("END",), repeat_penalty=1.1)
    team = Team(
        agents=(
            Agent(name="a", instructions="You answer.", tools=("peek",), sampling=sampling),
            Agent(name="b", instructions="You count."),
        ),
        coordinator=Agent(name="lead", instructions="You lead."),
    )
    tasks = [
        Task(id="t", title="T", description="Look.", assignee="a"),
        Task(id="s", title="S", description="Count.", assignee="b", output_schema=SCHEMA),
    ]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    model = FunctionModel(answer)
    with RunLedger(url) as ledger:
        orchestrator = Orchestrator(team, model=model, ledger=ledger, tools=[peek])
        result = await orchestrator.run_tasks(tasks)
    assert result.status == "completed", result
    return url, result.run_id, model


async def test_a_call_records_what_the_model_was_asked_as_it_received_it(tmp_path) -> None:
    url, run_id, model = await recorded_run(tmp_path)
    (sent,) = [r for r in model.requests if r.prompt.manifest.subject == "task:t"]
    (counted,) = [r for r in model.requests if r.prompt.manifest.subject == "task:s"]
    with RunLedger(url) as ledger:
        calls = {c.subject: c for c in ledger.calls(run_id)}
        assert verify_run(ledger, run_id).ok
    params = calls["task:t"].parameters
    assert params is not None
    assert (params["temperature"], params["top_p"], params["stop"]) == (0.7, 0.9, ["END"])
    assert (params["repeat_penalty"], params["seed"]) == (1.1, sent.seed)
    assert params["max_tokens"] == sent.max_tokens
    assert params["json_schema"] is None
    schema_params = calls["task:s"].parameters
    assert schema_params is not None
    assert schema_params["json_schema"] == counted.json_schema == SCHEMA
    assert schema_params["temperature"] == 0.0 and schema_params["tools"] == []
    assert schema_params == counted.parameters()
    offered = [t["function"]["name"] for t in sent.tools]
    assert "peek" in offered
    assert params["tools"] == [
        {"name": name, "sha256": sha256_text(canonical_json(tool))}
        for name, tool in zip(offered, sent.tools, strict=True)
    ]
    assert params == sent.parameters()


async def test_an_edited_temperature_fails_verify(tmp_path) -> None:
    url, run_id, _ = await recorded_run(tmp_path)
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        (call_id, stored) = conn.execute(
            "SELECT call_id, parameters FROM calls WHERE subject = 'task:t'"
        ).fetchone()
        forged = {**json.loads(stored), "temperature": 0.0}
        conn.execute(
            "UPDATE calls SET parameters = ? WHERE call_id = ?", (json.dumps(forged), call_id)
        )
    with RunLedger(url) as ledger:
        report = verify_run(ledger, run_id)
    assert not report.ok
    assert any(f.call_id == call_id and "hash chain" in f.reason for f in report.findings)
    checked = CliRunner().invoke(app, ["verify", run_id, "--db", url])
    assert checked.exit_code != 0, checked.output


async def test_inspect_json_shows_each_call_s_parameters(tmp_path) -> None:
    url, run_id, _ = await recorded_run(tmp_path)
    shown = CliRunner().invoke(app, ["inspect", run_id, "--db", url, "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.output)
    (call,) = [c for c in document["calls"] if c["subject"] == "task:t"]
    assert call["parameters"]["temperature"] == 0.7
    assert [t["name"] for t in call["parameters"]["tools"]][:1] == ["peek"]
    (counted,) = [c for c in document["calls"] if c["subject"] == "task:s"]
    assert counted["parameters"]["json_schema"] == SCHEMA


def test_parameters_stay_chained_when_another_ledger_records_the_outcome(tmp_path) -> None:
    """The outcome's chain entry is then digested from the row read back, parameters included."""
    graph = TaskGraph([Task(id="a", title="A", description="First.", assignee="w")])
    agent = Agent(name="w", instructions="You work.")
    prompt = ContextBuilder(count_tokens=estimate_tokens).build_task_prompt(
        graph.get("a"), agent=agent, queue=TaskQueue(graph)
    )
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    asked = {"temperature": 0.3, "max_tokens": 64, "tools": []}
    with RunLedger(url) as ledger:
        ledger.start_run(run_id="run_p", team="t", goal=None, graph=graph.to_dict())
        call_id = ledger.record_request(
            run_id="run_p", subject="task:a", agent="w", model_id="test:m", prompt=prompt,
            started_at=datetime.now(UTC), parameters=asked,
        )  # fmt: skip
    response = ModelResponse(text="done", usage=Usage(requests=1), model_id="test:m")
    with RunLedger(url) as other:  # it did not record the request
        other.finish_call(call_id, run_id="run_p", response=response, error=None, latency_s=0.1)
        (call,) = other.calls("run_p")
        assert call.parameters == asked and not call.pending
        assert verify_run(other, "run_p").ok
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        forged = json.dumps({**asked, "temperature": 1.5})
        conn.execute("UPDATE calls SET parameters = ? WHERE call_id = ?", (forged, call_id))
    with RunLedger(url) as ledger:
        report = verify_run(ledger, "run_p")
    assert any(f.call_id == call_id and "hash chain" in f.reason for f in report.findings)
