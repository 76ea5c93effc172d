"""Team-file keys and command-line options that were accepted and then never read.

Each is refused through the command (``clearance run``, ``graph``, ``plan``, ``resume``):
exit 2, one line naming the file (for a team-file key) and the key or option, before any
model is called. Where the same key is read, it is kept, and the test shows what it did.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app

runner = CliRunner()

A = "{name: a, instructions: You work.}"
TASK = "tasks: [{id: t, title: T, description: Go., assignee: a}]\n"


def team(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text("model: fake:x\n" + body.replace("{tmp}", str(tmp_path)))
    return path


def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/runs.db"


def run(tmp_path: Path, body: str, *extra: str, stdin: str | None = None):
    args = ["run", str(team(tmp_path, body)), "--db", db(tmp_path), *extra]
    return runner.invoke(app, args, input=stdin)


def one_line(result, start: str, why: str = "has no effect") -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {start}"), lines[0]
    assert why in lines[0], lines[0]
    return lines[0]


def no_run_started(tmp_path: Path) -> None:
    """Refused before anything ran: no ledger was written, or it holds no run."""
    if not (tmp_path / "runs.db").exists():
        return
    with RunLedger(db(tmp_path)) as ledger:
        assert ledger.list_runs() == []


REFUSED = [
    # The roster the coordinator plans with lists the workers; its own role reached nobody.
    (
        f"coordinator: {{name: boss, instructions: You lead., role: Leads.}}\nagents: [{A}]\n"
        + TASK,
        "coordinator.role",
    ),
    # The coordinator (no task of its own) reads the store through no tool.
    (
        "coordinator: {name: boss, instructions: You lead., store_read_extends_ttl_s: 60}\n"
        f"agents: [{A}]\n" + TASK,
        "coordinator.store_read_extends_ttl_s",
    ),
    # No clarification of an isolated task with dependencies: no prompt of it admits a result.
    (
        "coordinator: {name: boss, instructions: You lead., limits: {max_dependency_tokens: 9}}\n"
        f"agents: [{A}]\n"
        "tasks:\n  - {id: s, title: S, description: Go., assignee: a}\n"
        "  - {id: t, title: T, description: Go., assignee: a, depends_on: [s]}\n",
        "coordinator.limits.max_dependency_tokens",
    ),
    # ... nor when isolated tasks may ask no question (max_rounds: 0).
    (
        "isolation: {max_rounds: 0}\n"
        "coordinator: {name: boss, instructions: You lead., limits: {max_dependency_tokens: 9}}\n"
        f"agents: [{A}]\n"
        "tasks:\n  - {id: s, title: S, description: Go., assignee: a}\n"
        "  - {id: t, title: T, description: Go., assignee: a, depends_on: [s], mode: isolated}\n",
        "coordinator.limits.max_dependency_tokens",
    ),
    # The call's deadline ends every attempt first.
    (
        "agents: [{name: a, instructions: You work., limits: {timeout_s: 10,"
        " attempt_timeout_s: 10}}]\n" + TASK,
        "agents.a.limits.attempt_timeout_s",
    ),
    # ... the default deadline (600 s) too.
    (
        "agents: [{name: a, instructions: You work., limits: {attempt_timeout_s: 900}}]\n" + TASK,
        "agents.a.limits.attempt_timeout_s",
    ),
    (
        "coordinator: {name: boss, instructions: You lead., limits: {timeout_s: 5,"
        " attempt_timeout_s: 6}}\n"
        f"agents: [{A}]\n" + TASK,
        "coordinator.limits.attempt_timeout_s",
    ),
    # An input folder no task reads from.
    (f"input: {{default: '{{tmp}}'}}\nagents: [{A}]\n" + TASK, "input.default"),
    # ... nor an isolated task, whose project: is another folder.
    (
        f"input: {{default: '{{tmp}}'}}\nproject: '{{tmp}}/p'\nagents: [{A}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a, mode: isolated}]\n",
        "input.default",
    ),
]


@pytest.mark.parametrize(("body", "field"), REFUSED)
def test_a_key_nothing_reads_is_refused(tmp_path: Path, body: str, field: str) -> None:
    (tmp_path / "p").mkdir()
    one_line(run(tmp_path, body), f"{tmp_path / 'team.yaml'}: {field}: ")
    no_run_started(tmp_path)


def test_input_option_nothing_reads_is_named_as_the_option(tmp_path: Path) -> None:
    body = f"agents: [{A}]\n" + TASK
    line = one_line(run(tmp_path, body, "--input", str(tmp_path)), "--input: ")
    assert "no task reads the input folder" in line
    graph = runner.invoke(app, ["graph", str(tmp_path / "team.yaml"), "--input", str(tmp_path)])
    one_line(graph, "--input: ")
    plan = runner.invoke(app, ["plan", str(tmp_path / "team.yaml"), "--goal", "G",
                               "--input", str(tmp_path), "--db", db(tmp_path),
                               "-o", str(tmp_path / "plan.yaml")])  # fmt: skip
    one_line(plan, "--input: ")
    assert not (tmp_path / "plan.yaml").exists()
    no_run_started(tmp_path)


def test_an_input_folder_a_task_reads_is_kept(tmp_path: Path) -> None:
    """The file reaches the task's prompt: the folder was read."""
    (tmp_path / "notes.txt").write_text("NOTE-4711\n")
    body = (
        f"input: {{default: '{{tmp}}'}}\nagents: [{A}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a, files: [notes.txt]}]\n"
    )
    result = run(tmp_path, body)
    assert result.exit_code == 0, result.output
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
        (call,) = [c for c in ledger.calls(record.run_id) if c.subject == "task:t"]
    assert "NOTE-4711" in str(call.messages)


@pytest.mark.parametrize(
    "tasks",
    [
        # an isolated task whose project is the input folder
        "tasks: [{id: t, title: T, description: Go., assignee: a, mode: isolated}]\n",
        # a step, which reads its files and names the folder
        "tasks: [{id: t, title: T, description: Go., run: 'step:package_facts'}]\n",
    ],
)
def test_an_input_folder_read_otherwise_is_kept(tmp_path: Path, tasks: str) -> None:
    team(tmp_path, f"input: {{default: '{{tmp}}'}}\nagents: [{A}]\n" + tasks)
    result = runner.invoke(app, ["graph", str(tmp_path / "team.yaml")])
    assert result.exit_code == 0, result.output


def test_the_coordinators_dependency_limit_is_kept_where_it_answers_questions(
    tmp_path: Path,
) -> None:
    body = (
        "coordinator: {name: boss, instructions: You lead., limits: {max_dependency_tokens: 9}}\n"
        f"agents: [{A}]\n"
        "tasks:\n  - {id: s, title: S, description: Go., assignee: a}\n"
        "  - {id: t, title: T, description: Go., assignee: a, depends_on: [s], mode: isolated}\n"
    )
    team(tmp_path, body)
    result = runner.invoke(app, ["graph", str(tmp_path / "team.yaml")])
    assert result.exit_code == 0, result.output


def test_a_workers_role_is_kept_and_reaches_the_planning_prompt(tmp_path: Path) -> None:
    body = "agents: [{name: a, instructions: You work., role: ROLE-OF-A}]\n"
    result = run(tmp_path, body, "--goal", "Say hi.")
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
        plans = [c for c in ledger.calls(record.run_id) if c.subject == "plan"]
    assert plans, result.output
    assert "ROLE-OF-A" in str(plans[0].messages)


def test_interactive_with_nobody_to_ask_is_refused(tmp_path: Path) -> None:
    line = one_line(run(tmp_path, f"agents: [{A}]\n" + TASK, "--interactive"), "--interactive: ")
    assert "nobody would be asked" in line
    no_run_started(tmp_path)


def test_interactive_is_refused_where_isolated_tasks_may_ask_nothing(tmp_path: Path) -> None:
    body = (
        f"isolation: {{max_rounds: 0}}\nagents: [{A}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a, mode: isolated}]\n"
    )
    one_line(run(tmp_path, body, "--interactive"), "--interactive: ")


def test_interactive_decides_a_tasks_approval_at_the_terminal(tmp_path: Path) -> None:
    """Kept where it has an effect: the task's approval is asked and given at the terminal."""
    body = f"agents: [{A}]\n" + (
        "tasks: [{id: t, title: T, description: Go., assignee: a, approval: required}]\n"
    )
    result = run(tmp_path, body, "--interactive", stdin="y\n")
    assert result.exit_code == 0, result.output
    assert "approve?" in result.output
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
        assert record.status == "completed"


def test_resume_interactive_with_nobody_to_ask_is_refused(tmp_path: Path) -> None:
    result = run(tmp_path, f"agents: [{A}]\n" + TASK)
    assert result.exit_code == 0, result.output
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
    resumed = runner.invoke(app, ["resume", record.run_id, "--db", db(tmp_path), "--interactive"])
    one_line(resumed, "--interactive: ")
