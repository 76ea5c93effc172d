"""The result's task table: every task for a small run; counts and the tasks to look at for a
large one (a table of thousands of rows would scroll the run off the terminal)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance.cli import _run_output, app

TEAM = """\
name: small
goal: Sum up.
model: fake:echo
agents:
  - {name: w, instructions: Do it.}
  - {name: tiny, instructions: Do it., limits: {max_prompt_tokens: 5}}
tasks:
  - {id: a, title: A, description: Do a., assignee: tiny}
  - {id: b, title: B, description: Do b., assignee: w, depends_on: [a]}
  - {id: c, title: C, description: Do c., assignee: w}
"""


def run(tmp_path: Path) -> str:
    team = tmp_path / "team.yaml"
    team.write_text(TEAM, encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(team), "--db", f"sqlite:///{tmp_path}/r.db"])
    assert result.exit_code == 1, result.output  # task a fails: its prompt is over its limit
    return result.output.split("run finished")[1]


def rows(output: str) -> dict[str, str]:
    """``{task: status}`` of the table's rows."""
    cells = [line.split("│")[1:-1] for line in output.splitlines() if line.count("│") == 5]
    return {task.strip(): status.strip() for task, _, status, _ in cells}


def test_a_small_run_lists_every_task(tmp_path: Path) -> None:
    output = run(tmp_path)
    assert rows(output) == {"a": "failed", "b": "skipped", "c": "completed"}


@pytest.mark.parametrize(
    ("rows_at_most", "title", "listed"),
    [
        (2, "Tasks not completed", {"a": "failed", "b": "skipped"}),
        (1, "The first 1 of 2 tasks not completed", {"a": "failed"}),
    ],
)
def test_a_large_run_counts_per_status_and_lists_the_tasks_not_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows_at_most, title, listed
) -> None:
    monkeypatch.setattr(_run_output, "TABLE_ROWS", rows_at_most)
    output = run(tmp_path)
    assert "Tasks: 3 (" in output and "every task: --json FILE, or clearance inspect run_" in output
    assert all(f"1 {status}" in output for status in ("failed", "skipped", "completed"))
    assert title in output
    assert rows(output) == listed
