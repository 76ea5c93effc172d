"""``clearance inspect`` on a big run: plain text, not rich's tables and panels.

rich measured and wrapped every cell and line of every call: about 3 ms a task, so 20,000
tasks took a minute (8,000 tool calls: 41 s). Output to a pipe or file, or a run of more than
`RICH_MAX_RECORDS` records on a terminal, is now written as plain aligned lines. These tests
count rich's renders (not wall time, so they hold on a loaded machine) and check that both
layouts show the same text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance.cli import _inspect, app
from clearance.cli._common import out, safe
from clearance.models._base import ModelRequest
from clearance.testing import FunctionModel

runner = CliRunner()
FORGED = "task:forged  agent w  model test:function  completed"


def reply(request: ModelRequest) -> Any:
    return f"answer one\n{FORGED}\n\nlast line \x1b[2J"


async def make_run(tmp_path: Path, tasks: int) -> tuple[str, str]:
    db = f"sqlite:///{tmp_path / f'runs{tasks}.db'}"
    team = Team(agents=(Agent(name="w", instructions="Work."),))
    listed = [Task(id="t0", title="First", description="Do the first.", assignee="w")]
    listed += [
        Task(id=f"t{i}", title=f"T{i}", description="d", assignee="w", depends_on=("t0",))
        for i in range(1, tasks)
    ]
    with RunLedger(db) as ledger:
        result = await Orchestrator(team, model=FunctionModel(reply), ledger=ledger).run_tasks(
            listed, goal="The goal,\non two lines"
        )
    return result.run_id, db


def rich_renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of rich's renders of anything (a table, a panel, a text)."""
    count = [0]
    original = Console.render

    def counted(self: Console, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Console, "render", counted)
    return count


def inspect(run_id: str, db: str, *args: str) -> str:
    result = runner.invoke(app, ["inspect", run_id, "--db", db, "--no-pager", *args])
    assert result.exit_code == 0, result.output
    return result.output


async def test_inspect_to_a_pipe_renders_nothing_with_rich(tmp_path, monkeypatch):
    run_id, db = await make_run(tmp_path, 30)
    renders = rich_renders(monkeypatch)
    shown = inspect(run_id, db)
    # Before: several renders per call (its table, a panel per message, the response).
    assert renders[0] == 0
    assert shown.count("\n─ response\n") == 30 + 1  # every task's call, and the synthesis
    assert shown.count("\n─ user\n") == 30 + 1


async def test_a_big_run_on_a_terminal_is_plain_too(tmp_path, monkeypatch):
    run_id, db = await make_run(tmp_path, 12)
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    renders = rich_renders(monkeypatch)
    drawn = inspect(run_id, db)
    assert renders[0] > 0 and "┏" in drawn  # a small run on a terminal: rich's tables
    monkeypatch.setattr(_inspect, "RICH_MAX_RECORDS", 10)
    renders[0] = 0
    plain = inspect(run_id, db)
    assert renders[0] == 0 and "┏" not in plain


def pieces(output: str) -> list[str]:
    """Each line's text without rich's borders and padding, split at runs of spaces."""
    found = []
    for line in output.splitlines():
        for part in line.strip().strip("│┃").split("│"):
            found.extend(p.strip() for p in part.strip().strip("┃").split("  ") if p.strip())
    return found


async def test_both_layouts_show_the_same_text(tmp_path, monkeypatch):
    run_id, db = await make_run(tmp_path, 3)
    plain = inspect(run_id, db)
    with RunLedger(db, read_only=True) as ledger:
        calls = ledger.calls(run_id)
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    monkeypatch.setattr(out, "_width", 2000)  # no wrapping, so rich's lines are whole
    drawn = inspect(run_id, db)
    assert "┏" in drawn and "╭─ response" in drawn
    expected = [f"run {run_id}", "The goal,", "on two lines", "total prompt"]
    for call in calls:
        expected += [call.subject, f"agent {call.agent}", f"model {call.model_id}"]  # the header
        for item in call.manifest["items"]:
            expected += [item["origin"], item["title"], str(item["tokens"])]
        expected.append(str(call.manifest["total_tokens"]))
        for message in call.messages:
            expected += [safe(line) for line in message["content"].splitlines() if line.strip()]
        expected += ["answer one", FORGED, "last line \\x1b[2J"]
    expected.append("prompt cache: not reported by the model server for any call")
    for layout, text in (("rich", drawn), ("plain", plain)):
        found = "\n".join(pieces(text))
        missing = [e for e in expected if all(e not in p for p in found.split("\n"))]
        missing = [e for e in missing if e not in text]
        assert not missing, (layout, missing[:5])
        assert "\x1b" not in text


async def test_plain_text_from_a_model_cannot_pose_as_a_call_header(tmp_path):
    run_id, db = await make_run(tmp_path, 2)
    lines = inspect(run_id, db).splitlines()
    assert any(line.startswith("task:t1  agent w") for line in lines)
    assert not any(line.startswith("task:forged") for line in lines)
    assert f"│ {FORGED}" in lines
