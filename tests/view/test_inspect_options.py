"""``clearance inspect --json / --response-only / paging`` and ``clearance runs`` run ids."""

from __future__ import annotations

import json
import pydoc

from typer.testing import CliRunner

from clearance.cli import app
from clearance.cli._common import out, safe

runner = CliRunner()


async def test_inspect_json_is_the_runs_records(recorded):
    result = runner.invoke(app, ["inspect", recorded.run_id, "--json", "--db", recorded.db])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output  # control characters stay escaped
    document = json.loads(result.output)
    assert document["run"]["run_id"] == recorded.run_id
    assert [t["task_id"] for t in document["tasks"]] == [
        "spec", "evil", "flaky", "review", "summary", "broken", "after"
    ]  # fmt: skip
    evil = next(c for c in document["calls"] if c["subject"] == "task:evil")
    assert evil["response"] == recorded.hostile
    assert evil["messages"][0] == {"role": "system", "content": "You write."}
    assert evil["manifest"]["items"][0]["origin"] == "instructions"
    assert set(evil["usage"]) >= {"prompt_tokens", "completion_tokens"}
    assert document["tool_calls"] == [] and document["events"] == []


async def test_inspect_json_of_one_task(recorded):
    args = ["inspect", recorded.run_id, "--json", "--task", "flaky", "--db", recorded.db]
    document = json.loads(runner.invoke(app, args).output)
    assert [c["subject"] for c in document["calls"]] == ["task:flaky", "task:flaky"]
    assert document["calls"][0]["error"] and document["calls"][1]["response"]
    assert [t["task_id"] for t in document["tasks"]] == ["flaky"]


async def test_inspect_response_only(recorded):
    args = ["inspect", recorded.run_id, "--response-only", "--db", recorded.db]
    one = runner.invoke(app, [*args, "--task", "evil"])
    assert one.exit_code == 0, one.output
    assert one.output == safe(recorded.hostile) + "\n"
    assert "\x1b" not in one.output and "\\x1b[31m" in one.output
    every = runner.invoke(app, args).output
    assert "# task:spec (call_" in every and "ANSWER for task:spec" in every
    assert "error: attempt 1 of 3: HTTP 400 bad request" in every
    assert "Context from prerequisite tasks" not in every  # no prompt text


async def test_inspect_json_and_response_only_together_is_a_usage_error(recorded):
    args = ["inspect", recorded.run_id, "--json", "--response-only", "--db", recorded.db]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.output.startswith("error: --json: give --json or --response-only, not both")


async def test_inspect_pages_on_a_terminal_only(recorded, monkeypatch):
    paged: list[str] = []
    monkeypatch.setattr(pydoc, "pager", lambda text, *a: paged.append(text))
    args = ["inspect", recorded.run_id, "--db", recorded.db]
    result = runner.invoke(app, args)  # not a terminal: printed directly
    assert result.exit_code == 0 and "task:review" in result.output and paged == []
    monkeypatch.setattr(out, "_force_terminal", True)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(paged) == 1 and "task:review" in paged[0] and "task:review" not in result.output
    assert runner.invoke(app, [*args, "--no-pager"]).exit_code == 0
    assert len(paged) == 1


async def test_runs_never_cuts_a_run_id(recorded, monkeypatch):
    monkeypatch.setattr(out, "_width", 40)
    result = runner.invoke(app, ["runs", "--db", recorded.db])
    assert result.exit_code == 0, result.output
    assert recorded.run_id in result.output


async def test_runs_keeps_status_and_date_whole_at_80_columns(recorded, monkeypatch):
    monkeypatch.setattr(out, "_width", 80)
    result = runner.invoke(app, ["runs", "--db", recorded.db])
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.output.splitlines() if recorded.run_id in x]
    document = json.loads(
        runner.invoke(app, ["inspect", recorded.run_id, "--json", "--db", recorded.db]).output
    )
    created = document["run"]["created_at"][:16].replace("T", " ")
    assert f"  {document['run']['status']}  {created}  " in line
    assert max(len(x) for x in result.output.splitlines()) <= 80
