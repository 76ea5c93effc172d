"""A report that fails to be made loses nothing: one line, the run recorded, ``--json`` kept."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import clearance.runs
from clearance import RunLedger
from clearance.cli._app import app

pytestmark = pytest.mark.network

TEAM = """\
name: report-failure
agents:
  - {name: writer, instructions: You write.}
tasks:
  - {id: note, title: Note, description: Write a note., assignee: writer}
"""


def test_a_failing_report_is_one_line_and_the_run_and_json_are_kept(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = openai_server(lambda messages: "NOTE-TEXT")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")

    def broken(report: str | None) -> Any:
        def make(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom\nsecond line")

        return make

    monkeypatch.setattr(clearance.runs, "report_function", broken)
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        app, ["run", str(team), "--model", "openai:m", "--db", db, "--json", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    (line,) = [ln for ln in result.output.splitlines() if "could not be made" in ln]
    assert "(RuntimeError: boom second line)" in line and "clearance inspect run_" in line
    data = json.loads(out.read_text())
    assert [t["result"] for t in data["tasks"]] == ["NOTE-TEXT"]
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    with RunLedger(db) as ledger:
        assert ledger.get_run(run_id).status == "completed"
