"""Text from the ledger reaches the terminal shown, not obeyed.

The attack: a model answers with terminal escape sequences (set the window title, clear the
screen, plant a hyperlink, a CSI through the 8-bit C1 introducer) and rich markup; the goal
and an upstream result carry them too, and so does a task title written into the ledger by
hand (a title given to Clearance may not hold a control character at all). ``clearance
inspect`` and ``clearance runs`` must print none of the control characters raw and must not
interpret the markup.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance.cli import app
from clearance.cli._common import safe
from clearance.testing import FunctionModel

runner = CliRunner()

HOSTILE = (
    "ok\x1b]0;owned title\x07\x1b[2J\x1b[H"
    "\x1b]8;;https://evil.example/\x1b\\click me\x1b]8;;\x1b\\"
    "\x9b31m\r\x08\x00[bold red]not markup[/bold red] [link=https://evil.example/]x[/link]"
)
RAW = ("\x1b", "\x07", "\x9b", "\x00", "\x08", "\r")


async def hostile_run(tmp_path: Path) -> tuple[str, str]:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    team = Team(agents=(Agent(name="a", instructions="Do it."),))
    tasks = [
        Task(id="t1", title="Title [bold]x[/bold]", description="d", assignee="a"),
        Task(id="t2", title="Two", description="d", assignee="a", depends_on=("t1",)),
    ]
    with RunLedger(db) as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(lambda request: HOSTILE), ledger=ledger
        ).run_tasks(tasks, goal="Goal \x1b]0;title\x07")
    return result.run_id, db


def assert_no_raw_controls(output: str) -> None:
    for char in RAW:
        assert char not in output, (char, output[:3000])


async def test_inspect_shows_escape_sequences_instead_of_sending_them(tmp_path: Path) -> None:
    run_id, db = await hostile_run(tmp_path)
    result = runner.invoke(app, ["inspect", run_id, "--db", db])
    assert result.exit_code == 0, result.output
    assert_no_raw_controls(result.output)
    # Shown, escaped: nothing is lost.
    assert "\\x1b]0;owned title\\x07" in result.output
    assert "\\x9b31m" in result.output
    # Markup is text, not styling or a link.
    assert "[bold red]not markup[/bold red]" in result.output
    assert "[link=https://evil.example/]x[/link]" in result.output


async def test_runs_lists_a_hostile_goal_safely(tmp_path: Path) -> None:
    _, db = await hostile_run(tmp_path)
    result = runner.invoke(app, ["runs", "--db", db])
    assert result.exit_code == 0, result.output
    assert_no_raw_controls(result.output)


def test_safe_keeps_tab_and_newline_and_escapes_the_rest() -> None:
    assert safe("a\tb\nc") == "a\tb\nc"
    assert safe("\x1b[2J\x07\x7f\x85\u202e") == "\\x1b[2J\\x07\\x7f\\x85\\u202e"
    assert safe("naïve 東京 🚀") == "naïve 東京 🚀"
