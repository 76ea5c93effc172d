"""A name that ends in a newline is refused: round 17.

The name patterns were anchored with ``$``, which also matches before a final newline, so a
task id ``"abc\\n"``, an agent ``"w\\n"``, a workspace folder name and a ``run:`` reference ending
in a newline were accepted: a line break inside ids that prompts, the ledger, ``inspect``
lines and folder names are made of. They are matched whole now.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import Agent, Task
from clearance._agents.workspace import check_agent_id
from clearance._core.errors import ConfigError
from clearance.cli._app import app


@pytest.mark.parametrize(
    "make",
    [
        lambda: Task(id="abc\n", title="T", description="d", assignee="a"),
        lambda: Agent(name="w\n", instructions="i"),
        lambda: Task(id="abc", title="T", description="d", assignee="a", run="step:echo\n"),
    ],
    ids=["task id", "agent name", "run reference"],
)
def test_a_name_ending_in_a_newline_is_refused(make) -> None:
    with pytest.raises(ConfigError):
        make()


def test_a_workspace_folder_name_ending_in_a_newline_is_refused() -> None:
    with pytest.raises(ConfigError):
        check_agent_id("w\n")
    assert check_agent_id("w") == "w"


def test_a_team_file_task_id_ending_in_a_newline_is_one_line_exit_2(tmp_path: Path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(
        'name: t\nagents: [{name: w, instructions: "i"}]\n'
        'tasks: [{id: "a\\n", title: A, description: d, assignee: w}]\n'
    )
    result = CliRunner().invoke(app, ["graph", str(team)])
    assert result.exit_code == 2, result.output
    assert "'a\\n' is not valid" in result.output
