"""An approval asked at the terminal that can never be answered pauses its task.

With ``--interactive`` and nobody to answer (stdin closed, as in a pipeline), the request
stays open: the task pauses like any task awaiting approval and ``clearance run`` exits with
the command that decides it (it used to fail the task with ``EOFError``).
"""

from __future__ import annotations

import re

import pytest
from test_approval_cli import TEAM, cli, env

__all__ = ["env"]  # the fixture, shared with the approval tests

pytestmark = pytest.mark.network


def test_an_interactive_approval_without_an_answer_pauses_the_task(env) -> None:
    team = env["tmp"] / "team.yaml"
    team.write_text(TEAM % "approval: none")

    run = cli(env, "run", str(team), "--model", "openai:m", "--interactive", input="")

    assert run.exit_code == 3, run.output
    assert "EOFError" not in run.output
    run_id = re.search(r"run id: (\S+)", run.output).group(1)
    (call_id,) = re.findall(r"apr_[0-9a-z_]+", run.output.split("awaiting approval:")[1])
    assert f"clearance approve {run_id} {call_id}" in run.output
    assert not env["log"].exists()  # the tool did not run
    # A person decides later; the run resumes and the tool runs once.
    assert cli(env, "approve", run_id, call_id).exit_code == 0
    resumed = cli(env, "resume", run_id)
    assert resumed.exit_code == 0, resumed.output
    assert env["log"].read_text() == "old.txt\n"
    assert cli(env, "verify", run_id).exit_code == 0
