"""Plan only: ``clearance plan`` writes the plan; a person edits it; ``clearance run`` replays."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app
from clearance.models import get_model

TEAM = """\
name: planned
model: fake:planner
agents:
  - {name: writer, instructions: "You write.", role: writes text}
  - {name: checker, instructions: "You check.", role: checks text}
"""

PLAN = {
    "tasks": [
        {"id": "draft", "title": "Draft", "description": "Write a draft.", "assignee": "writer",
         "depends_on": []},
        {"id": "check", "title": "Check", "description": "Check the draft.",
         "assignee": "checker", "depends_on": ["draft"]},
    ]
}  # fmt: skip


def test_plan_edit_replay(tmp_path, monkeypatch):
    # The coordinator plans with a scripted answer (the fake model has no plans of its own).
    from clearance.testing import FunctionModel

    def answer(request):
        return json.dumps(PLAN) if request.prompt.manifest.subject == "plan" else "ok"

    scripted = FunctionModel(answer, model_id="fake:planner")
    monkeypatch.setattr("clearance.cli._plan.configured_models", lambda options: {
        "fake:planner": scripted})  # fmt: skip
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    plan_file = tmp_path / "plan.yaml"
    db = f"sqlite:///{tmp_path}/runs.db"
    runner = CliRunner()
    result = runner.invoke(app, ["plan", str(team), "--goal", "Write and check.", "-o",
                                 str(plan_file), "--db", db])  # fmt: skip
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(plan_file.read_text())
    assert [t["id"] for t in written["tasks"]] == ["draft", "check"]
    assert written["goal"] == "Write and check." and written["agents"][0]["name"] == "writer"
    ledger = RunLedger(db)
    (plan_run,) = ledger.list_runs()
    assert written["plan"]["run_id"] == plan_run.run_id
    assert ledger.get_run(plan_run.run_id).graph is not None
    assert [c.subject for c in ledger.calls(plan_run.run_id)] == ["plan"]  # nothing ran
    assert runner.invoke(app, ["verify", plan_run.run_id, "--db", db]).exit_code == 0
    # A person edits the plan: one more task.
    written["tasks"].append({"id": "polish", "title": "Polish", "description": "Polish it.",
                             "assignee": "writer", "depends_on": ["check"]})  # fmt: skip
    plan_file.write_text(yaml.safe_dump(written, sort_keys=False))
    result = runner.invoke(app, ["run", str(plan_file), "--db", db])
    assert result.exit_code == 0, result.output
    replay = next(r for r in ledger.list_runs() if r.run_id != plan_run.run_id)
    statuses = {t.task_id: t.status for t in ledger.tasks(replay.run_id)}
    assert statuses == {"draft": "completed", "check": "completed", "polish": "completed"}
    (link,) = ledger.events(replay.run_id, "plan")
    assert link.data["plan_run_id"] == plan_run.run_id and link.data["edited"] is True
    assert runner.invoke(app, ["verify", replay.run_id, "--db", db]).exit_code == 0


def test_an_unedited_plan_replays_as_not_edited(tmp_path):
    from clearance._core.teamfile import load_team_file
    from clearance._orchestration.plan_only import PlannedRun, plan_link_event, plan_team_file
    from clearance._state.graph import TaskGraph

    graph = TaskGraph.from_dict([{**t, "memory_scope": "dependencies"} for t in PLAN["tasks"]])
    data = plan_team_file(yaml.safe_load(TEAM), PlannedRun(run_id="run_x", graph=graph), "G")
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    loaded = load_team_file(path)
    assert (
        plan_link_event(loaded.spec.plan.model_dump(), TaskGraph(loaded.tasks))["edited"] is False
    )
    assert get_model("fake:x").model_id == "fake:x"


def test_plan_needs_a_goal_and_a_fresh_output(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    runner = CliRunner()
    result = runner.invoke(app, ["plan", str(team), "--db", f"sqlite:///{tmp_path}/r.db"])
    assert result.exit_code == 2 and "--goal" in result.output
    (tmp_path / "plan.yaml").write_text("x")
    taken = str(tmp_path / "plan.yaml")
    db = f"sqlite:///{tmp_path}/r.db"
    result = runner.invoke(app, ["plan", str(team), "--goal", "G", "-o", taken, "--db", db])
    assert result.exit_code == 2 and "exists" in result.output


def test_plan_quotes_the_file_in_the_command_it_suggests(tmp_path, monkeypatch):
    # Before: "clearance run my plan.yaml", which runs "my" and fails.
    from clearance.testing import FunctionModel

    def answer(request):
        return json.dumps(PLAN) if request.prompt.manifest.subject == "plan" else "ok"

    scripted = FunctionModel(answer, model_id="fake:planner")
    monkeypatch.setattr("clearance.cli._plan.configured_models", lambda options: {
        "fake:planner": scripted})  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(TEAM)
    args = ["plan", "team.yaml", "--goal", "Write.", "-o", "my plan.yaml"]
    result = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp_path}/r.db"])
    assert result.exit_code == 0, result.output
    assert "edit it, then: clearance run 'my plan.yaml'" in result.output, result.output
    assert (tmp_path / "my plan.yaml").exists()


def test_a_plan_of_a_team_file_with_tasks_runs_as_written(tmp_path, monkeypatch):
    # The plan replaces the file's tasks: `isolation:` (read by an isolated task, which a
    # person may make of a planned one) is kept and not refused in the plan; a
    # `synthesis_from` naming the replaced tasks is left out (it would name unknown tasks).
    from clearance.testing import FunctionModel

    def answer(request):
        return json.dumps(PLAN) if request.prompt.manifest.subject == "plan" else "ok"

    scripted = FunctionModel(answer, model_id="fake:planner")
    monkeypatch.setattr("clearance.cli._plan.configured_models", lambda options: {
        "fake:planner": scripted})  # fmt: skip
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.py").write_text("x = 1\n")
    team = tmp_path / "team.yaml"
    team.write_text(
        TEAM + f"input: {{default: '{tmp_path / 'in'}', include: ['*.py']}}\n"
        "isolation: {max_rounds: 1}\n"
        "synthesis_from: [old]\n"
        "coordinator: {name: lead, instructions: You plan.}\n"
        "tasks:\n"
        "  - {id: old, title: Old, description: Look., assignee: writer, mode: isolated}\n"
    )
    plan_file = tmp_path / "plan.yaml"
    db = f"sqlite:///{tmp_path}/runs.db"
    runner = CliRunner()
    result = runner.invoke(app, ["plan", str(team), "--goal", "Write and check.", "-o",
                                 str(plan_file), "--db", db])  # fmt: skip
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(plan_file.read_text())
    assert "synthesis_from" not in written and written["isolation"] == {"max_rounds": 1}
    result = runner.invoke(app, ["run", str(plan_file), "--db", db])
    assert result.exit_code == 0, result.output
    with RunLedger(db) as ledger:
        replay = next(r for r in ledger.list_runs() if ledger.tasks(r.run_id))
        statuses = {t.task_id: t.status for t in ledger.tasks(replay.run_id)}
    assert statuses == {"draft": "completed", "check": "completed"}
    # The same keys in a team file that is no plan are still refused.
    written.pop("plan")
    plan_file.write_text(yaml.safe_dump(written, sort_keys=False))
    result = runner.invoke(app, ["run", str(plan_file), "--db", db])
    assert result.exit_code == 2
    assert "isolation: has no effect: no task has mode: isolated" in result.output
