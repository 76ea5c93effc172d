"""Fake-model runs keep their long-term memory apart from real-model runs.

A run on ``--model fake:...`` (a demo, a test) records into the same memory database as any
run, but its records are marked as the fake model's: a later run on a real model (here a
scripted OpenAI-compatible server on 127.0.0.1) never recalls them, and a fake run still
recalls the fake records, so fake demos show memory working.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli._app import app

pytestmark = pytest.mark.network

TEAM = """\
name: remembering
memory: sqlite:///{tmp}/memory.db
agents:
  - name: scout
    instructions: You note one short fact about water.
    memory: {{recall: 5, record: task_and_result}}
tasks:
  - {{id: note, title: Note a fact about water, description: Note one fact about water.,
      assignee: scout}}
"""


def run(tmp: Path, model: str) -> tuple[str, str]:
    """Run the team on ``model``; returns (run id, the output)."""
    team = tmp / "team.yaml"
    team.write_text(TEAM.format(tmp=tmp))
    db = f"sqlite:///{tmp / 'runs.db'}"
    result = CliRunner().invoke(app, ["run", str(team), "--model", model, "--db", db])
    assert result.exit_code == 0, result.output
    found = re.search(r"run id: (\S+)", result.output)
    assert found, result.output
    return found.group(1), result.output


def prompts(tmp: Path, run_id: str) -> list[str]:
    """Every prompt of a run's task calls, as one text each (what the model received)."""
    with RunLedger(f"sqlite:///{tmp / 'runs.db'}") as ledger:
        return [
            "\n".join(m["content"] for m in call.messages)
            for call in ledger.calls(run_id)
            if call.subject == "task:note"
        ]


def result_of(tmp: Path, run_id: str) -> str:
    with RunLedger(f"sqlite:///{tmp / 'runs.db'}") as ledger:
        (task,) = ledger.tasks(run_id)
        return task.result or ""


def test_a_real_run_never_recalls_what_a_fake_run_recorded(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fake_run, _ = run(tmp_path, "fake:demo")
    fake_text = result_of(tmp_path, fake_run)
    assert fake_text.startswith("demo result for")

    # A second fake run recalls the first one's record: memory works in fake demos.
    again, _ = run(tmp_path, "fake:demo")
    assert any(fake_text in p for p in prompts(tmp_path, again))

    # A real-model run is sent none of it.
    url = openai_server(lambda messages: "Water boils at 100 C at sea level.")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    real_run, _ = run(tmp_path, "openai:m")
    received = ["\n".join(m.get("content") or "" for m in b["messages"]) for b in url.bodies]
    assert received, "the real model was sent nothing"
    assert not any("demo result for" in text for text in received)

    # A second real run recalls the first real run's record, and still no fake one.
    real_again, _ = run(tmp_path, "openai:m")
    received = ["\n".join(m.get("content") or "" for m in b["messages"]) for b in url.bodies]
    assert "Water boils at 100 C" in received[-1]
    assert not any("demo result for" in text for text in received)

    # The fake model's runs still recall only the fake records.
    fake_again, _ = run(tmp_path, "fake:demo")
    (last,) = prompts(tmp_path, fake_again)
    assert fake_text in last and "Water boils" not in last

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    for run_id in (again, real_run, real_again, fake_again):
        check = CliRunner().invoke(app, ["verify", run_id, "--db", db])
        assert check.exit_code == 0, check.output
    # The ledger names the partition each recall and record used.
    with RunLedger(db) as ledger:
        for run_id, partition in ((again, "fake"), (real_again, "real")):
            notes = [t for t in ledger.tool_calls(run_id) if t.name.startswith("memory_")]
            assert {t.name for t in notes} == {"memory_recall", "memory_record"}
            assert {t.arguments["partition"] for t in notes} == {partition}

    # `clearance memory` lists both, the fake model's marked.
    listing = CliRunner().invoke(
        app, ["memory", str(tmp_path / "team.yaml"), "--db", db], env={"COLUMNS": "200"}
    )
    assert listing.exit_code == 0, listing.output
    rows = [line for line in listing.output.splitlines() if "agent:scout" in line]
    assert len(rows) == 5
    assert sum("fake run" in r for r in rows) == 3
    assert sum("openai" in r for r in rows) == 2

    # Verify catches a fake record in a real model's prompt (here: the real ones relabelled).
    with sqlite3.connect(tmp_path / "memory.db") as conn:
        conn.execute("UPDATE clearance_memories SET provider = 'fake'")
    check = CliRunner().invoke(app, ["verify", real_again, "--db", db])
    assert check.exit_code == 1, check.output
    assert "a record of the fake partition reached openai:m" in check.output
