"""``clearance run --stream``: the running tasks' text shown as it streams, made harmless."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.verify import verify_run
from clearance.cli._app import app

pytestmark = pytest.mark.network

TEAM = """\
name: streamed
agents:
  - {name: writer, instructions: "You write."}
tasks:
  - {id: a, title: First, description: Write the first part., assignee: writer}
"""

HOSTILE = "line one\nsafe \x1b]0;owned\x07 title \x1b[2J cleared\nlast words"


def reply(messages: list[dict[str, Any]]) -> str:
    if "Write the first part." in messages[-1]["content"]:
        return HOSTILE
    return "summary"


def test_run_stream_shows_text_live_and_escaped(tmp_path, openai_server, monkeypatch) -> None:
    url = openai_server(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tmp_path / "team.yaml").write_text(TEAM)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m", "--db", db, "--stream"]
    )
    assert result.exit_code == 0, result.output
    assert "task:a | line one" in result.output
    assert "task:a | last words" in result.output
    assert "synthesis | summary" in result.output
    # Model output reaches the terminal only escaped: no escape or bell character is obeyed.
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "\\x1b]0;owned\\x07 title \\x1b[2J cleared" in result.output
    assert all(body["stream"] is True for body in url.bodies)
    with RunLedger(db) as ledger:
        (run,) = ledger.list_runs()
        assert [c.response for c in ledger.calls(run.run_id)] == [HOSTILE, "summary"]
        assert verify_run(ledger, run.run_id).ok
