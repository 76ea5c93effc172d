"""A run's budget against a hostile model server and a hostile team file.

- `clearance run --stream` against a real OpenAI-compatible server on 127.0.0.1 that streams
  a usage without token counts (``{}``): the calls are counted locally, so the token budget
  stops the run (it was charged 0 tokens a call and never stopped it), and what the ledger,
  ``clearance inspect --json`` and ``clearance verify`` show agrees with what was charged.
- ``prices:`` keyed by something that is no model id (it prices no model, so it has no
  effect) is refused in one line naming ``prices`` (exit 2), as ``model_options.by_model``'s
  keys are.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app

sys.path.insert(0, str(Path(__file__).parent.parent / "models"))
from raw_http import Server

TEAM = """\
name: budgeted
budget: {tokens: 50}
agents:
  - {name: alpha, instructions: "You are Alpha."}
tasks:
  - {id: a, title: First, description: Do the first step., assignee: alpha}
  - {id: b, title: Second, description: Do the second step., assignee: alpha, depends_on: [a]}
"""

WORDS = "one two three four five six seven eight nine ten " * 4


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _streamed_with_empty_usage(n: int, conn: Any) -> None:
    base = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    first = {"index": 0, "finish_reason": None, "delta": {"role": "assistant", "content": WORDS}}
    body = _event({**base, "choices": [first]})
    body += _event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body += _event({**base, "choices": [], "usage": {}})  # a usage chunk with no counts
    body += b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    conn.sendall(head + body)


@pytest.fixture
def server() -> Iterator[Server]:
    served = Server(_streamed_with_empty_usage)
    yield served
    served.close()


def test_a_streamed_usage_without_counts_still_stops_a_run_at_its_budget(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(TEAM)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run = CliRunner().invoke(
        app, ["run", "team.yaml", "--model", "openai:m", "--stream", "--db", db]
    )
    assert run.exit_code == 2, run.output
    said = " ".join(run.output.split())
    assert "reached its budget.tokens" in said and "a model call for task:b;" in said, said
    assert len(server.heads) == 1, said  # the second task's call was refused, nothing sent
    with RunLedger(db, read_only=True) as ledger:
        (record,) = ledger.list_runs()
        (call,) = ledger.calls(record.run_id)
        statuses = {t.task_id: t.status for t in ledger.tasks(record.run_id)}
    assert statuses == {"a": "completed", "b": "interrupted"}
    assert call.usage.counted and call.usage.completion_tokens >= 40
    assert record.usage.total_tokens == call.usage.total_tokens > 50  # what was charged
    shown = CliRunner().invoke(app, ["inspect", record.run_id, "--json", "--db", db])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    (shown_call,) = data["calls"]
    assert shown_call["usage"]["prompt_tokens"] == call.usage.prompt_tokens
    assert shown_call["usage"]["completion_tokens"] == call.usage.completion_tokens
    assert CliRunner().invoke(app, ["verify", record.run_id, "--db", db]).exit_code == 0


@pytest.mark.parametrize("key", ['""', "gpt 4o", "'openai:'", "no-provider"])
def test_a_price_for_no_model_id_is_one_line_naming_prices(tmp_path: Path, key: str) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(
        "budget: {cost_usd: 1}\n"
        "prices:\n"
        "  fake:m: {input_per_mtok: 1, output_per_mtok: 1}\n"
        f"  {key}: {{input_per_mtok: 1, output_per_mtok: 1}}\n"
        "name: t\nmodel: fake:m\n"
        "agents:\n  - {name: alpha, instructions: You are Alpha.}\n"
        "tasks:\n  - {id: a, title: A, description: Do it., assignee: alpha}\n"
    )
    result = CliRunner().invoke(app, ["run", str(team), "--db", f"sqlite:///{tmp_path}/r.db"])
    assert result.exit_code == 2, result.output
    (line,) = [part for part in result.output.strip().splitlines() if part.strip()] or [""]
    assert line.startswith("error: ") and ": prices: model id " in line
    assert "must look like 'provider:name'" in line
    assert not (tmp_path / "r.db").exists()  # refused before anything ran
