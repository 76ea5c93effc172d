"""Team-file keys and command-line options that were accepted and then never read.

Each is refused through the command (``clearance run``, ``graph``, ``plan``, ``resume``):
exit 2, one line naming the file (for a team-file key) and the key or option, before any
model is called. Where the same key is read, it is kept, and the test shows what it did.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app

runner = CliRunner()
SRC = str(Path(__file__).parents[2] / "src")

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
    # A memory group none of whose agents has memory: nothing recalls or records its memory.
    (
        "memory_groups: [{name: g, agents: [a, b]}]\n"
        f"agents: [{A}, {{name: b, instructions: You help.}}]\n" + TASK,
        "memory_groups.g",
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


# -- keys and options whose effect no other test showed ----------------------------------------


@pytest.mark.network
def test_accept_when_decides_which_review_answer_accepts(
    tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first review answers verdict accept, which the default would take; accept_when
    asks for findings 'none', so the task is sent back with the findings, then accepted."""
    reviews: list[str] = []

    def reply(messages):
        if "You review." not in messages[0]["content"]:
            return "a candidate"
        reviews.append(messages[-1]["content"])
        findings = "FIX-THE-TITLE-42" if len(reviews) == 1 else "none"
        return f'{{"verdict": "accept", "findings": "{findings}"}}'

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    body = (
        "agents: [{name: a, instructions: You work.}, {name: r, instructions: You review.}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a,"
        " review: {by: [r], rounds: 3, accept_when: {/findings: none}}}]\n"
    )
    result = run(tmp_path, body, "--model", "openai:m")
    assert result.exit_code == 0, result.output
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
        rounds = ledger.events(record.run_id, "review_round")
        work = [c for c in ledger.calls(record.run_id) if c.subject == "task:t"]
    assert [(e.data["round"], e.data["accepted"]) for e in rounds] == [(1, False), (2, True)]
    assert len(work) == 2 and "FIX-THE-TITLE-42" in str(work[1].messages)
    assert record.status == "completed"


def _finished_run(tmp_path: Path) -> str:
    body = "agents: [{name: a, instructions: INSTRUCTIONS-CANARY-9.}]\n" + TASK
    assert run(tmp_path, body).exit_code == 0
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
    return record.run_id


def test_inspect_prompt_shows_the_prompt_text_and_no_prompt_leaves_it_out(tmp_path: Path) -> None:
    run_id = _finished_run(tmp_path)
    shown = runner.invoke(app, ["inspect", run_id, "--db", db(tmp_path), "--prompt"])
    hidden = runner.invoke(app, ["inspect", run_id, "--db", db(tmp_path), "--no-prompt"])
    assert shown.exit_code == 0 and hidden.exit_code == 0, shown.output + hidden.output
    assert "INSTRUCTIONS-CANARY-9" in shown.output
    assert "INSTRUCTIONS-CANARY-9" not in hidden.output
    assert run_id in hidden.output  # the run is still shown, without its prompt text


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
@pytest.mark.parametrize("flag", ["--pager", "--no-pager"])
def test_inspect_pages_on_a_terminal_unless_no_pager(tmp_path: Path, flag: str) -> None:
    """On a terminal, --pager sends the text to $PAGER; --no-pager prints it on the terminal."""
    import pty  # POSIX only

    run_id = _finished_run(tmp_path)
    paged = tmp_path / "paged.txt"
    env = dict(os.environ, PAGER=f"cat > {paged}", TERM="xterm", COLUMNS="200")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    main, child = pty.openpty()
    shown = bytearray()
    reader = threading.Thread(target=_drain, args=(main, shown), daemon=True)
    reader.start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "clearance", "inspect", run_id, "--db", db(tmp_path), flag],
            stdin=child, stdout=child, stderr=child, env=env, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(child)
        reader.join(timeout=10)
        os.close(main)
    assert proc.returncode == 0, bytes(shown)
    if flag == "--pager":
        assert "INSTRUCTIONS-CANARY-9" in paged.read_text()
        assert b"INSTRUCTIONS-CANARY-9" not in shown
    else:
        assert not paged.exists()
        assert b"INSTRUCTIONS-CANARY-9" in shown


def _drain(fd: int, into: bytearray) -> None:
    """Read a pseudo-terminal until it closes (so the child never blocks on a full one)."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        into.extend(chunk)


def test_the_team_files_name_model_goal_title_and_synthesis_from_are_read(
    tmp_path: Path,
) -> None:
    """Each reaches the run: the record's team, the calls' model, the task's and the
    synthesis prompts (the synthesis holds the goal and only synthesis_from's results)."""
    body = (
        "name: TEAM-CANARY\ngoal: GOAL-CANARY-3\nsynthesis_from: [s]\n"
        f"agents: [{A}]\n"
        "tasks:\n  - {id: s, title: TITLE-CANARY-5, description: Go., assignee: a}\n"
        "  - {id: t, title: T, description: Go., assignee: a}\n"
    )
    result = run(tmp_path, body)
    assert result.exit_code == 0, result.output
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
        calls = {c.subject: c for c in ledger.calls(record.run_id)}
    assert record.team == "TEAM-CANARY"
    assert {c.model_id for c in calls.values()} == {"fake:x"}
    assert "TITLE-CANARY-5" in str(calls["task:s"].messages)
    synthesis = calls["synthesis"]
    origins = [item["origin"] for item in synthesis.manifest["items"]]
    assert "task_result:s" in origins and "task_result:t" not in origins
    assert "GOAL-CANARY-3" in str(synthesis.messages)


def test_project_and_constraints_reach_an_isolated_tasks_prompt(tmp_path: Path) -> None:
    """The isolated prompt shows the project folder's modules and the task's constraints."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "canary_module_77.py").write_text("def f():\n    return 1\n")
    body = (
        f"project: '{{tmp}}/p'\nagents: [{A}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a, mode: isolated,"
        " constraints: [CONSTRAINT-CANARY-6]}]\n"
    )
    result = run(tmp_path, body)
    assert result.exit_code == 0, result.output
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
        (call,) = [c for c in ledger.calls(record.run_id) if c.subject == "isolated:t"]
    assert "canary_module_77" in str(call.messages)
    assert "CONSTRAINT-CANARY-6" in str(call.messages)


def test_the_input_option_gives_the_folder_a_task_reads(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("NOTE-4712\n")
    body = (
        f"agents: [{A}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a, files: [notes.txt]}]\n"
    )
    result = run(tmp_path, body, "--input", str(tmp_path / "in"))
    assert result.exit_code == 0, result.output
    with RunLedger(db(tmp_path)) as ledger:
        (record,) = ledger.list_runs()
        (call,) = [c for c in ledger.calls(record.run_id) if c.subject == "task:t"]
    assert "NOTE-4712" in str(call.messages)


def test_the_memory_option_is_where_the_run_records_its_agents_memory(tmp_path: Path) -> None:
    """The memory goes to the database --memory names, not to the default beside the ledger."""
    body = "agents: [{name: a, instructions: You work., memory: {recall: 3}}]\n" + TASK
    url = f"sqlite:///{tmp_path}/chosen-memory.db"
    result = run(tmp_path, body, "--memory", url)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "memory.db").exists()
    listing = runner.invoke(app, ["memory", str(tmp_path / "team.yaml"), "--memory", url])
    assert listing.exit_code == 0, listing.output
    assert "agent:a" in listing.output


def test_an_include_an_isolated_tasks_file_requests_are_held_to_is_kept(tmp_path: Path) -> None:
    # Its FILE: requests are held to input.include when project: names no other folder,
    # so the key has an effect there (it was refused as reading nothing); with
    # isolation.max_rounds 0 no request is made, and it is refused.
    isolated = "tasks: [{id: t, title: T, description: Go., assignee: a, mode: isolated}]\n"
    body = f"input: {{default: '{{tmp}}', include: ['*.py']}}\nagents: [{A}]\n" + isolated
    team(tmp_path, body)
    result = runner.invoke(app, ["graph", str(tmp_path / "team.yaml")])
    assert result.exit_code == 0, result.output
    team(tmp_path, body + "isolation: {max_rounds: 0}\n")
    result = runner.invoke(app, ["graph", str(tmp_path / "team.yaml")])
    one_line(result, f"{tmp_path / 'team.yaml'}: input.include")
