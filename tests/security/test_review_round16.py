"""A review of round 16's refusals of team-file keys nothing reads: no legitimate file refused.

- ``clearance plan`` copies its team file's keys into the plan it writes, and a plan's tasks
  never list files nor run isolated. A team file whose ``input:`` (or the coordinator's
  ``limits.max_dependency_tokens``) was accepted for planning gave a plan file that
  ``clearance run`` then refused in one line ("has no effect"): the documented plan, edit,
  run loop broke on an unedited plan. A file written by ``clearance plan`` is checked as a
  team whose coordinator plans (its tasks are the plan, to be edited).
- ``clearance resume --team`` must be given the team file as the run recorded it
  (`check_team_file` refuses any other key). A run recorded before a key was refused for
  having no effect (``coordinator.role``, which the shipped examples had) could be resumed
  with neither that file (the key refused) nor an edited one (the record differs): the run
  was stranded. The team file of a resumed run is checked against its record, not refused
  for keys the run recorded.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clearance import ModelError, RunLedger, RunServices, RunSpec, run_spec
from clearance.cli import app
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

runner = CliRunner()

PLAN = {
    "tasks": [
        {"id": "draft", "title": "Draft", "description": "Write a draft.", "assignee": "writer",
         "depends_on": []},
        {"id": "check", "title": "Check", "description": "Check the draft.",
         "assignee": "writer", "depends_on": ["draft"]},
    ]
}  # fmt: skip


def _planner(request: ModelRequest) -> str:
    return json.dumps(PLAN) if request.prompt.manifest.subject == "plan" else "ok"


@pytest.mark.parametrize(
    ("extra", "coordinator"),
    [
        # An input folder: the plan is edited to give its tasks files from it.
        ("input: {default: '{tmp}/in'}\n", "{name: editor, instructions: You plan.}"),
        # The coordinator's dependency limit: the plan is edited to make a task isolated.
        (
            "",
            "{name: editor, instructions: You plan., limits: {max_dependency_tokens: 900}}",
        ),
    ],
    ids=["input", "coordinator-max_dependency_tokens"],
)
def test_a_plan_written_by_clearance_plan_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str, coordinator: str
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("notes\n")
    team = tmp_path / "team.yaml"
    team.write_text(
        "name: planned\nmodel: fake:planner\n"
        + extra.replace("{tmp}", str(tmp_path))
        + "agents:\n  - {name: writer, instructions: You write., role: writes text}\n"
        + f"coordinator: {coordinator}\n"
    )
    scripted = FunctionModel(_planner, model_id="fake:planner")
    monkeypatch.setattr(
        "clearance.cli._plan.configured_models", lambda options: {"fake:planner": scripted}
    )
    plan_file = tmp_path / "plan.yaml"
    db = f"sqlite:///{tmp_path}/runs.db"
    planned = runner.invoke(
        app, ["plan", str(team), "--goal", "Write and check.", "-o", str(plan_file), "--db", db]
    )
    assert planned.exit_code == 0, planned.output
    written = yaml.safe_load(plan_file.read_text())
    assert [t["id"] for t in written["tasks"]] == ["draft", "check"]
    # The unedited plan runs: its keys came from a team file the plan command accepted.
    result = runner.invoke(app, ["run", str(plan_file), "--db", db])
    assert result.exit_code == 0, result.output
    with RunLedger(db) as ledger:
        replay = next(r for r in ledger.list_runs() if r.goal and r.status == "completed"
                      and ledger.events(r.run_id, "plan") and ledger.tasks(r.run_id))  # fmt: skip
        statuses = {t.task_id: t.status for t in ledger.tasks(replay.run_id)}
    assert statuses == {"draft": "completed", "check": "completed"}


def test_the_same_keys_in_a_team_file_not_written_by_plan_are_still_refused(
    tmp_path: Path,
) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(
        f"model: fake:x\ninput: {{default: '{tmp_path}'}}\n"
        "agents: [{name: writer, instructions: You write.}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: writer}]\n"
    )
    result = runner.invoke(app, ["run", str(team), "--db", f"sqlite:///{tmp_path}/r.db"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: {team}: input.default: has no effect: no task reads the input folder (files, "
        "for_each_file, an isolated task without project:, or a run: step)"
    ]


OLD_TEAM = """\
name: older
model: fake:older
agents:
  - {name: writer, instructions: You write., role: writes text}
coordinator:
  name: editor
  role: Writes the summary on top of the report.
  instructions: You write the final answer.
tasks:
  - {id: t, title: T, description: Write it., assignee: writer}
"""


def test_a_run_recorded_before_a_key_was_refused_resumes_with_its_team_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(OLD_TEAM)
    db = f"sqlite:///{tmp_path}/runs.db"
    # The run as an older version recorded it: coordinator.role was accepted then.
    monkeypatch.setattr("clearance._core.teamfile.check_unread", lambda spec, tasks: None)

    def down(request: ModelRequest) -> str:
        raise ModelError("the model server is down", model_id="fake:older")

    failing = FunctionModel(down, model_id="fake:older")
    services = RunServices(models={"fake:older": failing})
    with RunLedger(db) as ledger:
        first = asyncio.run(run_spec(RunSpec.from_file(team), ledger=ledger, services=services))
    assert first.status == "failed", first
    monkeypatch.undo()  # this version: the role would be refused in a new run
    fresh = runner.invoke(app, ["run", str(team), "--db", f"sqlite:///{tmp_path}/new.db"])
    assert fresh.exit_code == 2 and "coordinator.role: has no effect" in fresh.output
    # ... and the run is resumed with the team file it was recorded from.
    resumed = runner.invoke(app, ["resume", first.run_id, "--team", str(team), "--db", db])
    assert resumed.exit_code == 0, resumed.output
    with RunLedger(db) as ledger:
        assert ledger.get_run(first.run_id).status == "completed"
        assert {t.task_id: t.status for t in ledger.tasks(first.run_id)} == {"t": "completed"}
    # A team file edited to drop the role differs from the record: still refused, one line.
    team.write_text(OLD_TEAM.replace("  role: Writes the summary on top of the report.\n", ""))
    edited = runner.invoke(app, ["resume", first.run_id, "--team", str(team), "--db", db])
    assert edited.exit_code == 2, edited.output
    assert len(edited.output.strip().splitlines()) == 1, edited.output
