"""A streaming server that reports no usage (llama.cpp's): tokens are counted, marked, limited."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.verify import verify_run
from clearance.cli._app import app
from clearance.tokens import heuristic_tokens

pytestmark = pytest.mark.network

TEAM = """\
name: counted
agents:
  - {name: writer, instructions: "You write.", limits: {max_tokens_per_step: %d}}
tasks:
  - {id: a, title: First, description: Write the first part., assignee: writer}
"""

ANSWER = "The first part, written out at some length so that its tokens are worth counting."


def reply(messages: list[dict[str, Any]]) -> str:
    return ANSWER if "Write the first part." in messages[-1]["content"] else "summary"


def run(tmp_path, openai_server, monkeypatch, per_step: int) -> tuple[Any, str]:
    url = openai_server(reply, stream_usage=False)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tmp_path / "team.yaml").write_text(TEAM % per_step)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["run", str(tmp_path / "team.yaml"), "--model", "openai:local-llama", "--stream"]
    return CliRunner().invoke(app, [*args, "--db", db]), db


def test_tokens_are_counted_and_marked_when_the_stream_has_no_usage(
    tmp_path, openai_server, monkeypatch
) -> None:
    result, db = run(tmp_path, openai_server, monkeypatch, per_step=400)
    assert result.exit_code == 0, result.output
    with RunLedger(db) as ledger:
        (record,) = ledger.list_runs()
        calls = ledger.calls(record.run_id)
        task = next(c for c in calls if c.subject == "task:a")
        assert task.usage.counted and task.usage.completion_tokens == heuristic_tokens(ANSWER)
        prompt = sum(heuristic_tokens(m["content"]) for m in task.messages)
        assert task.usage.prompt_tokens == prompt > 0
        assert all(c.usage.counted for c in calls)
        assert ledger.get_run(record.run_id).usage.total_tokens == sum(
            c.usage.total_tokens for c in calls
        )
        assert verify_run(ledger, record.run_id).ok
    inspected = CliRunner().invoke(app, ["inspect", record.run_id, "--db", db, "--no-prompt"])
    assert "counted (server reported none)" in inspected.output
    document = CliRunner().invoke(app, ["inspect", record.run_id, "--db", db, "--json"]).output
    assert json.loads(document)["calls"][0]["usage"]["counted"] is True


def test_a_token_limit_sees_counted_tokens(tmp_path, openai_server, monkeypatch) -> None:
    result, db = run(tmp_path, openai_server, monkeypatch, per_step=5)
    assert result.exit_code == 1, result.output
    with RunLedger(db) as ledger:
        (record,) = ledger.list_runs()
        (task,) = ledger.tasks(record.run_id)
    assert task.status == "failed" and "max_tokens_per_step" in (task.error or "")
