"""`clearance inspect` shows each call's cached prompt tokens and the run's hit rate."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance.cli import app

runner = CliRunner()

# A long shared system prompt: the second task's prompt starts with the same tokens.
INSTRUCTIONS = "You are a careful reviewer of Python modules. " * 30


@pytest.mark.embedded
async def test_embedded_model_run_twice_records_and_shows_cached_tokens(tmp_path) -> None:
    pytest.importorskip("llama_cpp")
    from clearance.models._llama_cpp import LlamaCppModel

    db = f"sqlite:///{tmp_path}/runs.db"
    model = LlamaCppModel(n_ctx=2048, n_threads=2)
    team = Team(agents=(Agent(name="w", instructions=INSTRUCTIONS),), name="cache")
    tasks = [
        Task(id="a", title="A", description="Name one Python keyword.", assignee="w"),
        Task(id="b", title="B", description="Name one Python builtin.", assignee="w"),
    ]
    try:
        with RunLedger(db) as ledger:
            orchestrator = Orchestrator(
                team, model=model, ledger=ledger, options=RunOptions(max_concurrency=1)
            )
            result = await orchestrator.run_tasks(tasks)
            calls = [c for c in ledger.calls(result.run_id) if c.subject.startswith("task:")]
    finally:
        model.close()
    first, second = calls
    assert first.usage.cached_prompt_tokens is not None
    assert 0 < second.usage.cached_prompt_tokens < second.usage.prompt_tokens
    assert second.usage.cached_prompt_tokens > second.usage.prompt_tokens // 2  # the shared system

    shown = runner.invoke(app, ["inspect", result.run_id, "--db", db, "--no-prompt"])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    cached = second.usage.cached_prompt_tokens
    assert "cached by the server" in text
    assert f"{cached} of {second.usage.prompt_tokens}" in text
    assert "prompt cache: " in text and "hit rate" in text

    as_json = runner.invoke(app, ["inspect", result.run_id, "--db", db, "--json"])
    document = json.loads(as_json.stdout)
    by_subject = {c["subject"]: c for c in document["calls"]}
    assert by_subject[second.subject]["usage"]["cached_prompt_tokens"] == cached
    summary = document["prompt_cache"]
    assert summary["calls_reporting"] == len(document["calls"])
    assert summary["cached_prompt_tokens"] >= cached
    assert summary["hit_rate"] == summary["cached_prompt_tokens"] / summary["prompt_tokens"]


async def test_inspect_says_when_no_call_reports_cached_tokens(tmp_path) -> None:
    from clearance.testing import FunctionModel

    db = f"sqlite:///{tmp_path}/runs.db"
    team = Team(agents=(Agent(name="w", instructions="x"),), name="nocache")
    with RunLedger(db) as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(lambda r: "ok"), ledger=ledger
        ).run_tasks([Task(id="a", title="A", description="d", assignee="w")])
    shown = runner.invoke(app, ["inspect", result.run_id, "--db", db, "--no-prompt"])
    assert "prompt cache: not reported by the model server for any call" in shown.output
    assert "cached by the server" not in shown.output
    document = json.loads(
        runner.invoke(app, ["inspect", result.run_id, "--db", db, "--json"]).stdout
    )
    assert document["prompt_cache"] == {
        "calls_reporting": 0,
        "prompt_tokens": 0,
        "cached_prompt_tokens": 0,
        "hit_rate": None,
    }
