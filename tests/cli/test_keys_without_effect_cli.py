"""Team-file keys that were accepted but changed nothing: refused at load, or made to work.

Each refusal goes through ``clearance run`` (exit 2, one line naming the file and the key,
before any model is called); each key made to work is checked on what the run or the chat
session did with it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.authority import Authority
from clearance._core.teamfile import load_team_file
from clearance.cli import app

runner = CliRunner()

A = "{name: a, instructions: You work., limits: {max_output_tokens: 100}}"


def team(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(body)
    return path


def run(tmp_path: Path, body: str, *extra: str):
    args = ["run", str(team(tmp_path, body)), "--db", f"sqlite:///{tmp_path}/runs.db", *extra]
    return runner.invoke(app, args)


def refused(result, field: str, why: str = "has no effect") -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert f"team.yaml: {field}: " in lines[0], lines[0]
    assert why in lines[0], lines[0]


REFUSED = [
    # The Messages API has no repeat penalty: it was dropped from every request.
    (
        "model: anthropic:claude-x\n"
        "agents: [{name: a, instructions: You work., sampling: {repeat_penalty: 1.2}}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a}]\n",
        "agents.a.sampling.repeat_penalty",
        "anthropic",
    ),
    # store_set reads nothing: there is no read whose entry's expiry could move.
    (
        "store: sqlite:///{tmp}/s.db\n"
        "agents: [{name: a, instructions: You work., tools: [store_set],"
        " store_grants: {n: write}, store_read_extends_ttl_s: 60}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a}]\n",
        "agents.a.store_read_extends_ttl_s",
        "has no effect",
    ),
    # A delegate's reads extend expiry only when its caller's do: lead's never do.
    (
        "store: sqlite:///{tmp}/s.db\n"
        "agents:\n"
        "  - {name: lead, instructions: You lead., can_delegate_to: [reader],"
        " store_grants: {n: read}}\n"
        "  - {name: reader, instructions: You read., tools: [store_get],"
        " store_grants: {n: read}, store_read_extends_ttl_s: 60}\n"
        "tasks: [{id: t, title: T, description: Go., assignee: lead}]\n",
        "agents.reader.store_read_extends_ttl_s",
        "has no effect",
    ),
    # A limit on admitted results, for an agent whose tasks admit none.
    (
        "agents: [{name: a, instructions: You work., limits: {max_dependency_tokens: 100}}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a}]\n",
        "agents.a.limits.max_dependency_tokens",
        "has no effect",
    ),
    # Recalls nothing and records nothing.
    (
        "memory: sqlite:///{tmp}/m.db\n"
        "agents: [{name: a, instructions: You work., memory: {recall: 0, record: none}}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a}]\n",
        "agents.a.memory",
        "has no effect",
    ),
    # Transitive adds nothing to a task whose dependencies have none of their own.
    (
        f"agents: [{A}]\n"
        "tasks:\n"
        "  - {id: t, title: T, description: Go., assignee: a}\n"
        "  - {id: u, title: U, description: Go., assignee: a, depends_on: [t],"
        " memory_scope: transitive}\n",
        "tasks.u.memory_scope",
        "has no effect",
    ),
    # Messages reach task prompts only: a reviewer-only agent reads none.
    (
        "messages: [{from: a, to: b, content: Be strict.}]\n"
        f"agents: [{A}, {{name: b, instructions: You review.}}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a, review: {by: [b]}}]\n",
        "messages.0.to",
        "has no effect",
    ),
    # ... nor does the coordinator (it plans and synthesizes without them).
    (
        "messages: [{from: a, to: boss, content: Be brief.}]\n"
        "coordinator: {name: boss, instructions: You lead.}\n"
        f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n",
        "messages.0.to",
        "has no effect",
    ),
    # ... nor an isolated task's subagent (it sees its task, files and project only).
    (
        "messages: [{from: a, to: a, content: Be brief.}]\n"
        f"agents: [{A}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a, mode: isolated}]\n",
        "messages.0.to",
        "has no effect",
    ),
    # include: bounds the files tasks read; one outside it was read all the same.
    (
        "input: {default: '{tmp}', include: ['*.py']}\n"
        f"agents: [{A}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a, files: [notes.txt]}]\n",
        "tasks.t.files",
        "input.include",
    ),
    # include: without a task that reads files bounds nothing.
    (
        "input: {default: '{tmp}', include: ['*.py']}\n"
        f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n",
        "input.include",
        "has no effect",
    ),
]


@pytest.mark.parametrize(("body", "field", "why"), REFUSED)
def test_a_key_without_effect_is_refused_by_run(
    tmp_path: Path, body: str, field: str, why: str
) -> None:
    (tmp_path / "notes.txt").write_text("notes\n")
    model = "" if body.startswith("model:") else "model: fake:x\n"  # never a real model
    refused(run(tmp_path, model + body.replace("{tmp}", str(tmp_path))), field, why)


def test_a_message_to_a_task_assignee_reaches_its_prompt(tmp_path: Path) -> None:
    body = (
        "model: fake:x\nmessages: [{from: a, to: a, content: MESSAGE-CANARY-7}]\n"
        f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n"
    )
    result = run(tmp_path, body)
    assert result.exit_code == 0, result.output
    with RunLedger(f"sqlite:///{tmp_path}/runs.db") as ledger:
        (run_id,) = [r.run_id for r in ledger.list_runs()]
        calls = ledger.calls(run_id, subject="task:t")
    assert any("MESSAGE-CANARY-7" in m["content"] for c in calls for m in c.messages)


def test_a_file_inside_include_is_read(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text("X = 1\n")
    body = (
        f"input: {{default: '{tmp_path}', include: ['*.py']}}\n"
        f"model: fake:x\nagents: [{A}]\n"
        "tasks: [{id: t, title: T, description: Go., assignee: a, files: [mod.py]}]\n"
    )
    result = run(tmp_path, body)
    assert result.exit_code == 0, result.output


def test_chat_uses_the_team_files_model_options(tmp_path: Path) -> None:
    # Chat made its model without model_options: the fake's window was "unknown".
    body = (
        "model: fake:x\nmodel_options: {by_model: {'fake:x': {context_window: 4096}}}\n"
        f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n"
    )
    path = team(tmp_path, body)
    args = ["chat", str(path), "--agent", "a", "--db", f"sqlite:///{tmp_path}/runs.db"]
    result = runner.invoke(app, args, input="hello\n")
    assert result.exit_code == 0, result.output
    assert "context window" not in result.output, result.output
    assert "chat run " in result.output, result.output


def test_chat_refuses_model_options_its_model_cannot_take(tmp_path: Path) -> None:
    body = (
        "model: fake:x\nmodel_options: {threads: 2}\n"
        f"agents: [{A}]\ntasks: [{{id: t, title: T, description: Go., assignee: a}}]\n"
    )
    path = team(tmp_path, body)
    args = ["chat", str(path), "--agent", "a", "--db", f"sqlite:///{tmp_path}/runs.db"]
    refused(runner.invoke(app, args, input="hello\n"), "model_options.threads", "llama-cpp")


def test_a_delegators_read_extension_bounds_its_delegate(tmp_path: Path) -> None:
    # Refused before ("reads the store through no tool"), so the delegate's never applied.
    body = (
        f"store: sqlite:///{tmp_path}/s.db\n"
        "agents:\n"
        "  - {name: lead, instructions: You lead., can_delegate_to: [reader],"
        " store_grants: {n: read}, store_read_extends_ttl_s: 30}\n"
        "  - {name: reader, instructions: You read., tools: [store_get],"
        " store_grants: {n: read}, store_read_extends_ttl_s: 60}\n"
        "tasks: [{id: t, title: T, description: Go., assignee: lead}]\n"
    )
    loaded = load_team_file(team(tmp_path, body))
    lead, reader = loaded.team.agents
    acting = Authority.of(reader, Authority.of(lead, None))
    assert acting.read_extends_ttl_s == 30
