"""`clearance graph` of a big team file: plain lines past `RICH_MAX_ROWS` tasks, every task kept.

rich's tree and table took about a millisecond a task (a valid 10,000-task file: 7-9 s for
``graph --estimate``, almost all of it drawing); a bigger graph is now printed as plain lines,
each task's line and details as before (escaped as before).
"""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from clearance.cli import app
from clearance.cli._graph import RICH_MAX_ROWS

runner = CliRunner()
BOX = re.compile("[│┃─━┌┐└┘├┤┬┴┼╭╮╰╯]")


def _team(tmp_path: Path, tasks: int) -> Path:
    lines = ["name: big", "model: fake:x", "agents: [{name: a, instructions: You work.}]", "tasks:"]
    for i in range(tasks):
        dep = f", depends_on: [t{i - 1}]" if i else ""
        lines.append(f"  - {{id: t{i}, title: Task {i}, description: Do {i}., assignee: a{dep}}}")
    path = tmp_path / "team.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_graph_past_the_rich_limit_is_plain_lines_with_every_task(tmp_path: Path) -> None:
    count = RICH_MAX_ROWS + 100
    result = runner.invoke(app, ["graph", str(_team(tmp_path, count))])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"big: {count} tasks"
    assert not BOX.search(result.output)
    assert [line for line in lines if re.match(r"t\d+  \[a\]  ", line)] == [
        f"t{i}  [a]  Task {i}" for i in range(count)
    ]
    assert lines[-1] == f"  depends on: t{count - 2}"


def test_an_estimate_past_the_rich_limit_is_plain_aligned_rows(tmp_path: Path) -> None:
    count = RICH_MAX_ROWS + 100
    result = runner.invoke(app, ["graph", str(_team(tmp_path, count)), "--estimate"])
    assert result.exit_code == 0, result.output
    assert not BOX.search(result.output)
    rows = [line.split() for line in result.output.splitlines() if re.match(r"t\d+ ", line)]
    assert [row[0] for row in rows] == [f"t{i}" for i in range(count)]
    assert all(row[1].isdigit() and row[-1] == "ok" for row in rows)
    assert "task  estimate  budget  context window" in result.output


def test_a_small_graph_is_still_drawn_by_rich(tmp_path: Path) -> None:
    result = runner.invoke(app, ["graph", str(_team(tmp_path, 5)), "--estimate"])
    assert result.exit_code == 0, result.output
    assert BOX.search(result.output)
