"""A plan's records tell the truth: ``plan`` events are checked against the recorded graphs.

``clearance plan`` records a ``plan`` event (its tasks' hash and count); ``clearance run`` of
the planned team file records a link (the plan's run, the planned and the run's tasks'
hashes, ``edited``). A forger who edits one of these events and rebuilds the hash chain
(`rechain`), or a person who copies the edited tasks' hash into the file's ``plan:``, must
not make edited tasks read as planned ones.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
import yaml
from test_plan_cli import PLAN, TEAM
from typer.testing import CliRunner

from clearance import RunLedger, verify_run
from clearance._core.teamfile import load_team_file
from clearance._state.graph import TaskGraph, tasks_sha256
from clearance.cli import app

runner = CliRunner()


@pytest.fixture
def planned(tmp_path, monkeypatch):
    """A plan-only run and the team file it wrote: ``(db path, plan run id, plan file)``."""
    from clearance.testing import FunctionModel

    def answer(request):
        return json.dumps(PLAN) if request.prompt.manifest.subject == "plan" else "ok"

    scripted = FunctionModel(answer, model_id="fake:planner")
    monkeypatch.setattr("clearance.cli._plan.configured_models", lambda options: {
        "fake:planner": scripted})  # fmt: skip
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    plan_file = tmp_path / "plan.yaml"
    db = tmp_path / "runs.db"
    result = runner.invoke(app, ["plan", str(team), "--goal", "G", "-o", str(plan_file),
                                 "--db", f"sqlite:///{db}"])  # fmt: skip
    assert result.exit_code == 0, result.output
    return db, yaml.safe_load(plan_file.read_text())["plan"]["run_id"], plan_file


def _replay(db, plan_run, plan_file, edit):
    """Run the plan file after ``edit(data)``; return the replay's run id."""
    data = yaml.safe_load(plan_file.read_text())
    edit(data)
    plan_file.write_text(yaml.safe_dump(data, sort_keys=False))
    result = runner.invoke(app, ["run", str(plan_file), "--db", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    with RunLedger(f"sqlite:///{db}") as ledger:
        return next(r.run_id for r in ledger.list_runs() if r.run_id != plan_run)


def _edit_description(data):
    data["tasks"][0]["description"] = "Something else entirely."


def _forge_plan_event(db, run_id, rechain, **changes):
    conn = sqlite3.connect(db)
    ((event_id, raw),) = conn.execute(
        "SELECT event_id, data FROM events WHERE run_id = ? AND kind = 'plan'", (run_id,)
    ).fetchall()
    data = {**json.loads(raw), **changes}
    conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id))
    conn.commit()
    conn.close()
    rechain(db, run_id)


def _findings(db, run_id):
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


def test_unforged_plan_runs_verify(planned):
    db, plan_run, plan_file = planned
    replay = _replay(db, plan_run, plan_file, _edit_description)
    assert _findings(db, plan_run) == [] and _findings(db, replay) == []


def test_edited_tasks_forged_as_not_edited_fail_verify(planned, rechain):
    db, plan_run, plan_file = planned
    replay = _replay(db, plan_run, plan_file, _edit_description)
    _forge_plan_event(db, replay, rechain, edited=False)
    (finding,) = _findings(db, replay)
    assert "it says edited: False, but the run's tasks differ from the plan's" in finding
    result = runner.invoke(app, ["verify", replay, "--db", f"sqlite:///{db}"])
    assert result.exit_code != 0 and "edited: False" in result.output


def test_a_forged_planned_hash_fails_verify(planned, rechain):
    db, plan_run, plan_file = planned
    replay = _replay(db, plan_run, plan_file, _edit_description)
    with RunLedger(f"sqlite:///{db}") as ledger:
        digest = tasks_sha256(ledger.get_run(replay).graph)
    # Edited consistently: the planned hash is the run's own, and "not edited".
    _forge_plan_event(db, replay, rechain, planned_tasks_sha256=digest, edited=False)
    (finding,) = _findings(db, replay)
    assert f"is not the hash of the tasks run {plan_run} planned" in finding


def test_a_plan_only_runs_forged_count_and_hash_fail_verify(planned, rechain):
    db, plan_run, _ = planned
    _forge_plan_event(db, plan_run, rechain, tasks=7, tasks_sha256="0" * 64)
    findings = _findings(db, plan_run)
    assert len(findings) == 2
    assert "tasks_sha256 is not the hash of the run's recorded tasks" in findings[0]
    assert "it counts 7 tasks; the run's recorded graph has 2" in findings[1]


def test_the_files_plan_hash_cannot_hide_an_edit(planned):
    # A person edits the tasks, then writes the edited tasks' hash into `plan:` as well.
    db, plan_run, plan_file = planned

    def edit(data):
        _edit_description(data)
        path = plan_file.with_name("edited.yaml")
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        data["plan"]["tasks_sha256"] = tasks_sha256(TaskGraph(load_team_file(path).tasks))

    replay = _replay(db, plan_run, plan_file, edit)
    with RunLedger(f"sqlite:///{db}") as ledger:
        (link,) = ledger.events(replay, "plan")
        assert link.data["edited"] is True
        assert link.data["planned_tasks_sha256"] == tasks_sha256(ledger.get_run(plan_run).graph)
    assert _findings(db, replay) == []
