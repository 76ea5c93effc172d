"""`clearance resume` checks the run's hash chain once, and still refuses a broken one.

A resume read the run back three times (`resume_run`, `Orchestrator.from_run`,
`Orchestrator.resume`), and each read walked every record of the run against its chain.
These tests count the chain checks of one resume through the CLI (a real run on a scripted
OpenAI-compatible server on 127.0.0.1, a real SQLite ledger).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance._orchestration import resume_checks
from clearance.cli._app import app

pytestmark = pytest.mark.network

TOOL_MODULE = '''\
def remove(path: str) -> str:
    """Remove a file."""
    return f"REMOVED {path}"
'''

TEAM = """\
name: once
agents:
  - {name: janitor, instructions: "You tidy up.", tools: [remove]}
tools:
  remove: {function: "chain_once_tools:remove", approval: required}
tasks:
  - {id: tidy, title: Tidy, description: Delete the file old.txt., assignee: janitor}
"""


def reply(messages: list[dict[str, Any]]) -> Any:
    text = "\n".join(m["content"] or "" for m in messages)
    if "REMOVED old.txt" in text:
        return "removed it"
    if "Delete the file old.txt." in text:
        return [("remove", {"path": "old.txt"})]
    return "done"


@pytest.fixture
def env(tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    monkeypatch.delenv("CLEARANCE_LEDGER_KEY", raising=False)
    monkeypatch.delenv("CLEARANCE_LEDGER_KEY_FILE", raising=False)
    (tmp_path / "chain_once_tools.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "team.yaml").write_text(TEAM)
    return {"tmp": tmp_path, "db": tmp_path / "runs.db"}


def cli(env: dict[str, Any], *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--db", f"sqlite:///{env['db']}"])


def approved_run(env: dict[str, Any]) -> str:
    """A run paused for approval, then approved: `resume` finishes it."""
    run = cli(env, "run", str(env["tmp"] / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 3, run.output  # awaiting approval
    run_id = re.search(r"run id: (\S+)", run.output).group(1)
    (call_id,) = re.findall(r"apr_[0-9a-z_]+", run.output.split("awaiting approval:")[1])
    approved = cli(env, "approve", run_id, call_id)
    assert approved.exit_code == 0, approved.output
    return run_id


@pytest.fixture
def chain_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids `check_run_record` walked the chain of."""
    walked: list[str] = []
    original = resume_checks.check_chain

    def counting(ledger: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
        walked.append(run_id)
        return original(ledger, run_id, *args, **kwargs)

    monkeypatch.setattr(resume_checks, "check_chain", counting)
    return walked


def test_one_resume_checks_the_chain_once(env, chain_checks) -> None:
    run_id = approved_run(env)
    chain_checks.clear()

    resumed = cli(env, "resume", run_id)

    assert resumed.exit_code == 0, resumed.output
    assert chain_checks == [run_id]  # three before: resume_run, from_run, resume
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output


def test_a_tampered_run_is_still_refused_with_one_line(env, chain_checks) -> None:
    run_id = approved_run(env)
    conn = sqlite3.connect(env["db"])
    conn.execute("UPDATE runs SET goal = 'something else' WHERE run_id = ?", (run_id,))
    conn.commit()
    conn.close()
    chain_checks.clear()

    resumed = cli(env, "resume", run_id)

    assert resumed.exit_code == 2, resumed.output
    (line,) = resumed.output.strip().splitlines()
    assert line.startswith(f"error: run {run_id} cannot be resumed: run: the record differs")
    assert "nothing was replayed or run" in line
    assert chain_checks == [run_id]


def test_each_resume_checks_again(env, chain_checks) -> None:
    # The one check is per resume: a chain broken after a refused resume is refused again.
    run_id = approved_run(env)
    conn = sqlite3.connect(env["db"])
    conn.execute("UPDATE runs SET goal = 'something else' WHERE run_id = ?", (run_id,))
    conn.commit()
    conn.close()
    chain_checks.clear()

    first = cli(env, "resume", run_id)
    second = cli(env, "resume", run_id)

    assert (first.exit_code, second.exit_code) == (2, 2)
    assert first.output == second.output
    assert chain_checks == [run_id, run_id]
