"""Isolated tasks and children from a team file, end to end: `clearance run`, `inspect`, `verify`.

The model is a real OpenAI-compatible HTTP server on 127.0.0.1, started by the test, that
answers by what each prompt holds (a scripted server), so the run goes through the real
provider, the CLI, the ledger and `verify` exactly as with any served model.
"""

import json
import re
import subprocess
import sys
import time

import pytest
import yaml

TEAM = {
    "name": "subagents-cli",
    "goal": "Report.",
    "max_concurrency": 3,
    "input": {"default": "project", "include": ["*.py"]},
    "isolation": {"max_rounds": 2, "file_caps": {"max_file_bytes": 4096}},
    "agents": [
        {"name": "reviewer", "instructions": "You are a Python reviewer."},
        {
            "name": "lead",
            "instructions": "You combine answers.",
            "can_spawn": ["helper"],
            "limits": {"spawn_timeout_s": 2, "max_children": 3},
        },
        {
            "name": "helper",
            "instructions": "You answer one narrow question.",
            "tools": ["write_output"],
            "limits": {"max_output_files": 1, "max_steps": 3},
        },
    ],
    "coordinator": {"name": "editor", "instructions": "You are the editor."},
    "tasks": [
        {
            "id": "review-a",
            "mode": "isolated",
            "title": "Review of a.py",
            "description": "Review the module a.py.",
            "assignee": "reviewer",
            "files": ["a.py"],
            "constraints": ["Name one function."],
        },
        {
            "id": "review-b",
            "mode": "isolated",
            "title": "Review of b.py",
            "description": "Review the module b.py. SIBLING-CANARY-b",
            "assignee": "reviewer",
            "files": ["b.py"],
        },
        {
            "id": "questions",
            "title": "Questions",
            "description": "Combine the helpers' answers.",
            "assignee": "lead",
            "fan_out": {"agent": "helper", "goals": ["goal ok", "goal slow", "goal write"]},
        },
    ],
}


def reply(messages):
    """The scripted answer: text, or tool calls, from what the prompt holds."""
    system, user = messages[0]["content"], messages[-1]["content"]
    if "Python reviewer" in system:
        if "Review the module b.py" in user:
            return "- b.py defines beta().\nSTATUS: done"
        if "### Clarification 1" not in user:
            return "STATUS: needs_context\nQUESTION: Which Python version is this for?"
        if "### helper.py" not in user:
            return "STATUS: needs_context\nFILE: helper.py"
        return "- a.py defines alpha().\nSTATUS: done"
    if "## Question from the subagent" in user:
        return "Python 3.11."
    if "one narrow question" in system:
        if "goal slow" in user:
            time.sleep(4)
        if "goal write" in user and "## Results of your tool calls" not in user:
            return [("write_output", {"name": f"{n}.txt", "content": n}) for n in "ab"]
        return "An answer."
    if "You combine answers" in system:
        return "- combined"
    return "The report."


@pytest.fixture
def server(openai_server):
    return openai_server(reply)


def clearance(tmp_path, server, *args):
    env = {"OPENAI_BASE_URL": server, "OPENAI_API_KEY": "test", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.network
def test_a_team_file_with_isolated_tasks_and_children_runs_inspects_and_verifies(tmp_path, server):
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("def alpha():\n    return 1\n")
    (project / "b.py").write_text("def beta():\n    return 2\n")
    (project / "helper.py").write_text("def helper():\n    return 3\n")
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(TEAM))

    run = clearance(tmp_path, server, "run", "team.yaml", "--model", "openai:scripted")
    assert run.returncode == 0, run.stdout + run.stderr
    run_id = re.search(r"run id: (\S+)", run.stdout).group(1)

    verify = clearance(tmp_path, server, "verify", run_id)
    assert verify.returncode == 0, verify.stdout + verify.stderr

    inspect = clearance(tmp_path, server, "inspect", run_id, "--no-prompt")
    text = inspect.stdout
    assert inspect.returncode == 0, inspect.stderr
    for expected in (
        "isolated:review-a",
        "clarification:review-a",
        "child:questions.",
        "spawn",
        "timed_out",
        "max_output_files exceeded",
        "file helper.py served",
    ):
        assert expected in text, expected

    # --task selects every call made for a task: its rounds and its question.
    one = clearance(tmp_path, server, "inspect", run_id, "--task", "review-a", "--no-prompt")
    assert one.returncode == 0, one.stderr
    assert "clarification:review-a" in one.stdout and "review-b" not in one.stdout

    # No isolated or child prompt held the sibling's task text.
    from clearance import RunLedger

    with RunLedger(f"sqlite:///{tmp_path / '.clearance' / 'runs.db'}") as ledger:
        for call in ledger.calls(run_id):
            if call.subject != "isolated:review-b" and call.subject != "synthesis":
                assert "SIBLING-CANARY-b" not in json.dumps(call.messages), call.subject
    # Each child has its own folder; the writer kept one file, the second was refused.
    (run_dir,) = (tmp_path / ".clearance" / "workspaces").iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == [f"questions.{n}" for n in (1, 2, 3)]
    assert sorted(p.name for p in (run_dir / "questions.3" / "outputs").iterdir()) == ["a.txt"]


def test_a_team_file_key_with_no_effect_is_refused(tmp_path):
    team = {
        "agents": [
            {"name": "a", "instructions": "x", "limits": {"max_output_files": 2}},
        ],
        "tasks": [{"id": "t", "title": "T", "description": "d", "assignee": "a"}],
    }
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(team))
    result = subprocess.run(
        [sys.executable, "-m", "clearance", "graph", "team.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "max_output_files" in result.stderr and "no effect" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
