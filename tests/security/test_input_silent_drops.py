"""Nothing is silently dropped or silently shown: unknown recipients, escaping files, roles."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import Agent, ConfigError, Orchestrator, RunServices, Task, Team
from clearance._context.builder import ContextBuilder
from clearance._core.teamfile import load_team_file
from clearance._state.messages import BROADCAST, MessageBus
from clearance.cli import app
from clearance.testing import FunctionModel

runner = CliRunner()
TEAM_FILE = (
    "agents: [{name: alpha, instructions: A.}, {name: beta, instructions: B.}]\n"
    "tasks:\n  - {id: t1, title: T, description: d, assignee: alpha}\n"
)


def test_a_team_file_message_to_an_unknown_agent_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(TEAM_FILE + "messages: [{from: alpha, to: ghost, content: hello}]\n")
    with pytest.raises(ConfigError, match=r"messages\.0\.to: message to unknown agent 'ghost'"):
        load_team_file(path)
    result = runner.invoke(app, ["graph", str(path)])
    assert result.exit_code == 2 and "unknown agent 'ghost'" in result.output
    path.write_text(TEAM_FILE + "messages: [{from: alpha, to: '*', content: hello}]\n")
    assert load_team_file(path).spec.messages[0].to == "*"


def test_a_bus_with_its_agents_refuses_an_unknown_recipient() -> None:
    bus = MessageBus(agents=["alpha", "beta"])
    with pytest.raises(ConfigError, match="unknown agent 'ghost'"):
        bus.send("alpha", "ghost", "hello")
    assert bus.all() == ()
    bus.send("alpha", "beta", "hi")
    bus.send("alpha", BROADCAST, "all")
    assert len(bus.all()) == 2


async def test_the_orchestrator_refuses_a_message_to_nobody_before_running(ledger) -> None:
    bus = MessageBus()
    bus.send("alpha", "ghost", "hello")
    calls: list[object] = []
    team = Team(agents=(Agent(name="alpha", instructions="A."),))
    orchestrator = Orchestrator(
        team,
        model=FunctionModel(lambda r: calls.append(r) or "x"),
        ledger=ledger,
        services=RunServices(messages=bus),
    )
    with pytest.raises(ConfigError, match="unknown agent 'ghost'"):
        await orchestrator.run_tasks([Task(id="t", title="T", description="d", assignee="alpha")])
    assert calls == []
    assert ledger.list_runs() == []


@pytest.mark.parametrize("files", ["[../secret.txt]", "[/etc/passwd]", "[link/x.txt]"])
def test_graph_refuses_task_files_that_escape_the_input_folder(tmp_path: Path, files) -> None:
    inp = tmp_path / "input"
    inp.mkdir()
    (tmp_path / "secret.txt").write_text("s")
    (inp / "link").symlink_to(tmp_path)
    path = tmp_path / "team.yaml"
    path.write_text(
        "agents: [{name: alpha, instructions: A.}]\n"
        f"input: {{default: '{inp}'}}\n"
        f"tasks:\n  - {{id: t1, title: T, description: d, assignee: alpha, files: {files}}}\n"
    )
    result = runner.invoke(app, ["graph", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "escapes" in lines[0]


def test_graph_accepts_task_files_inside_the_input_folder(tmp_path: Path) -> None:
    inp = tmp_path / "input"
    inp.mkdir()
    (inp / "a.txt").write_text("a")
    path = tmp_path / "team.yaml"
    path.write_text(
        "agents: [{name: alpha, instructions: A.}]\n"
        f"input: {{default: '{inp}'}}\n"
        "tasks:\n  - {id: t1, title: T, description: d, assignee: alpha, files: [a.txt]}\n"
    )
    result = runner.invoke(app, ["graph", str(path)])
    assert result.exit_code == 0, result.output


def test_the_planning_roster_shows_declared_roles_only() -> None:
    roster = [
        Agent(name="alice", instructions="FIRST-LINE-A\nmore", role="Researcher"),
        Agent(name="bob", instructions="FIRST-LINE-B\nmore"),
    ]
    coordinator = Agent(name="lead", instructions="Plan.")
    prompt = ContextBuilder(count_tokens=len).build_plan_prompt(
        "G", coordinator=coordinator, roster=roster
    )
    assert "Researcher" in prompt.text and "bob" in prompt.text
    assert "FIRST-LINE" not in prompt.text
