"""Conditional routing: a dependency edge that holds only for some structured results."""

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from clearance import Agent, ConfigError, GraphError, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._context.verify_routing import check_routing
from clearance._core.routing import EdgeCondition
from clearance._core.teamfile import load_team_file
from clearance._state.graph import TaskGraph
from clearance._state.queue import TaskQueue, TaskStatus
from clearance.cli import app
from clearance.testing import FunctionModel

SCHEMA = {"type": "object", "properties": {"severity": {"type": "string"}}}
TEAM = Team(agents=(Agent(name="alpha", instructions="You are Alpha."),))


def routed_tasks() -> list[Task]:
    high = EdgeCondition.of("triage", {"/severity": "high"})
    low = EdgeCondition.of("triage", {"/severity": "low"})
    return [
        Task(id="triage", title="Triage", description="Rate it.", assignee="alpha",
             output_schema=SCHEMA),
        Task(id="fix", title="Fix", description="Fix it.", assignee="alpha",
             depends_on=("triage",), when=(high,)),
        Task(id="ship", title="Ship", description="Ship the fix.", assignee="alpha",
             depends_on=("fix",)),
        Task(id="note", title="Note", description="Note it.", assignee="alpha",
             depends_on=("triage",), when=(low,)),
    ]  # fmt: skip


def answers(request):
    text = request.prompt.messages[-1].content
    return json.dumps({"severity": "low"}) if "Rate it." in text else "ok"


def test_conditions_compare_json_values_at_pointers():
    cond = EdgeCondition.of("t", {"/a/0/b": 1, "/c~1d": True})
    assert cond.unmet('{"a": [{"b": 1.0}], "c/d": true}') is None
    assert "is false, not true" in cond.unmet('{"a": [{"b": 1}], "c/d": false}')
    assert "absent" in cond.unmet('{"a": [], "c/d": true}')
    assert "not JSON" in cond.unmet("free text")
    assert EdgeCondition.of("t", {"/x": 1}).unmet('{"x": true}') is not None  # true is not 1
    with pytest.raises(ConfigError, match="JSON Pointer"):
        EdgeCondition.of("t", {"severity": "high"})


async def test_a_false_condition_skips_the_dependent_with_the_reason(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    model = FunctionModel(answers)
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(routed_tasks())
    assert result.status == "completed", result.error
    statuses = {k: o.status for k, o in result.tasks.items()}
    assert statuses == {"triage": "completed", "fix": "skipped", "ship": "skipped",
                        "note": "completed"}  # fmt: skip
    assert result.tasks["fix"].error == (
        'skipped: condition not met: /severity of \'triage\' is "low", not "high"'
    )
    assert result.tasks["ship"].error == "skipped: dependency 'fix' was skipped"
    asked = [r.prompt.messages[-1].content for r in model.requests]
    assert not any("Fix it." in a or "Ship the fix." in a for a in asked)  # never called
    recorded = {t.task_id: t for t in ledger.tasks(result.run_id)}
    assert recorded["fix"].error == result.tasks["fix"].error
    assert verify_run(ledger, result.run_id).ok
    # The graph is recorded with its conditions, for verify and resume.
    graph = TaskGraph.from_dict(ledger.get_run(result.run_id).graph)
    assert graph.get("fix").when == routed_tasks()[1].when


async def test_verify_flags_a_skip_the_recorded_result_does_not_explain(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    result = await Orchestrator(TEAM, model=FunctionModel(answers), ledger=ledger).run_tasks(
        routed_tasks()
    )
    graph = TaskGraph.from_dict(ledger.get_run(result.run_id).graph)
    records = ledger.tasks(result.run_id)
    assert list(check_routing(graph, records, [])) == []
    # The triage result said "high": fix should have run, and note been skipped.
    forged = [
        dataclasses.replace(t, result='{"severity":"high"}') if t.task_id == "triage" else t
        for t in records
    ]
    problems = [reason for _, _, reason in check_routing(graph, forged, [])]
    assert len(problems) == 2
    assert any("holds for the recorded result" in p for p in problems)
    assert any("routes the task out" in p and "recorded completed" in p for p in problems)


def test_resume_applies_conditions_to_kept_results():
    graph = TaskGraph(routed_tasks())
    queue = TaskQueue(graph, completed={"triage": '{"severity":"high"}'})
    assert queue.get("note").status is TaskStatus.SKIPPED
    assert queue.get("fix").status is TaskStatus.READY
    assert queue.routed == {"note"}


def test_a_condition_needs_a_structured_upstream_and_a_dependency():
    tasks = routed_tasks()
    tasks[0] = dataclasses.replace(tasks[0], output_schema=None)
    with pytest.raises(GraphError, match="give 'triage' an output_schema"):
        TaskGraph(tasks)
    with pytest.raises(ConfigError, match="must be on a dependency"):
        Task(id="x", title="X", description="X.", assignee="alpha",
             when=(EdgeCondition.of("triage", {"/a": 1}),))  # fmt: skip


TEAM_FILE = """\
name: routed
model: fake:routing
agents:
  - {name: alpha, instructions: "You are Alpha."}
tasks:
  - id: triage
    title: Triage
    description: Rate it.
    assignee: alpha
    output_schema: {type: string}
  - id: fix
    title: Fix
    description: Fix it.
    assignee: alpha
    depends_on: [{task: triage, when: {"": "NEVER"}}]
  - {id: report, title: Report, description: Report., assignee: alpha, depends_on: [triage]}
"""


def test_team_file_conditions_on_the_cli_path(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM_FILE)
    loaded = load_team_file(path)
    fix = next(t for t in loaded.tasks if t.id == "fix")
    assert fix.depends_on == ("triage",)
    assert fix.when == (EdgeCondition.of("triage", {"": "NEVER"}),)
    db = f"sqlite:///{tmp_path}/runs.db"
    result = CliRunner().invoke(app, ["run", str(path), "--db", db])
    assert result.exit_code == 0, result.output
    ledger = RunLedger(db)
    (run,) = ledger.list_runs()
    recorded = {t.task_id: t for t in ledger.tasks(run.run_id)}
    assert recorded["fix"].status == "skipped" and "condition not met" in recorded["fix"].error
    assert recorded["report"].status == "completed"
    assert CliRunner().invoke(app, ["verify", run.run_id, "--db", db]).exit_code == 0


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("{task: triage, when: {}}", "tasks.1.depends_on"),
        ('{task: triage, when: {"severity": high}}', "JSON Pointer"),
        ('{task: triage, when: {"/s": 1}, extra: 2}', "tasks.1.depends_on"),
    ],
)
def test_bad_conditions_are_one_line_errors(tmp_path, entry, fragment):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM_FILE.replace('{task: triage, when: {"": "NEVER"}}', entry))
    result = CliRunner().invoke(app, ["run", str(path), "--db", f"sqlite:///{tmp_path}/r.db"])
    assert result.exit_code == 2
    assert fragment in result.output
