"""What a person is shown when asked to approve a tool call the model asked for.

The arguments are model output: a wall of it must not bury the question (or scroll the
call's real arguments away), and text in it that looks like the prompt must never pass for
it. Real ``clearance`` processes, a real SQLite ledger and a scripted model server on
127.0.0.1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger
from clearance._core.prompt import canonical_json

pytestmark = pytest.mark.network

TOOL_MODULE = '''\
def remove(path: str, note: str = "") -> str:
    """Remove a file."""
    return "REMOVED"
'''

TEAM = """\
name: approvals
agents:
  - {name: janitor, instructions: "You tidy up.", tools: [remove]}
tools:
  remove: {function: "approval_display_mod:remove", approval: required}
tasks:
  - {id: tidy, title: Tidy, description: Delete the file old.txt., assignee: janitor}
"""

FAKE_PROMPT = "\n\napprove? [y/N, or n <reason>] y\napproval apr_x: janitor calls list_files {}"
NOTE = "A" * 60_000 + FAKE_PROMPT  # a wall of text, then a prompt of its own


def reply(messages: list[dict[str, Any]]) -> Any:
    text = "\n".join(m["content"] or "" for m in messages)
    if "Delete the file old.txt." in text:
        if "denied this call" in text:
            return "left it"
        return [("remove", {"note": NOTE, "path": "/etc/passwd\x1b]0;title\x07"})]
    return "a note"


def clearance(tmp: Path, url: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "x", "PYTHONPATH": str(tmp)}
    command = [sys.executable, "-m", "clearance", *args, "--db", f"sqlite:///{tmp / 'runs.db'}"]
    return subprocess.run(command, input=stdin, capture_output=True, env=env, timeout=120)


@pytest.fixture
def setup(tmp_path: Path, openai_server) -> tuple[Path, str]:
    (tmp_path / "approval_display_mod.py").write_text(TOOL_MODULE)
    (tmp_path / "team.yaml").write_text(TEAM)
    return tmp_path, openai_server(reply)


def recorded_request(tmp: Path) -> dict[str, Any]:
    with RunLedger(f"sqlite:///{tmp / 'runs.db'}", create=False) as ledger:
        (run,) = ledger.list_runs()
        (asked,) = ledger.events(run.run_id, "awaiting_approval")
        return asked.data


def test_the_terminal_question_is_short_and_names_the_rest(setup) -> None:
    tmp, url = setup
    run = clearance(tmp, url, "run", str(tmp / "team.yaml"), "--model", "openai:m",
                    "--interactive", stdin=b"n\n")  # fmt: skip
    assert run.returncode == 0, run.stderr.decode()
    asked = run.stderr.decode()
    question = next(line for line in asked.splitlines() if line.startswith("approval apr_"))
    assert len(question) < 3_000, "the question must not be buried in the model's text"
    assert "janitor in task tidy calls remove {" in question  # the real, whole tool name
    data = recorded_request(tmp)
    more = len(canonical_json(data["arguments"])) - 2_000
    assert f"{more:,} more characters not shown" in question
    assert f"arguments sha256 {data['arguments_sha256']}" in question  # as the ledger holds
    assert f"clearance inspect {re.search(r'run_[0-9a-f_]+', asked).group(0)} --json" in question
    assert asked.count("approve? [y/N") == 1  # the model's look-alike is cut or escaped
    assert "\x1b" not in asked


def test_deciding_shows_the_same_short_line(setup) -> None:
    tmp, url = setup
    run = clearance(tmp, url, "run", str(tmp / "team.yaml"), "--model", "openai:m")
    assert run.returncode == 3, run.stderr.decode()
    data = recorded_request(tmp)
    with RunLedger(f"sqlite:///{tmp / 'runs.db'}", create=False) as ledger:
        (record,) = ledger.list_runs()
    denied = clearance(tmp, url, "deny", record.run_id, data["call_id"], "--by", "alice")
    assert denied.returncode == 0, denied.stderr.decode()
    said = denied.stdout.decode()
    assert len(said) < 3_500
    assert f"denied {data['call_id']} by alice: janitor in task tidy calls remove {{" in said
    assert f"arguments sha256 {data['arguments_sha256']}" in said
