"""Approvals and paused runs under attack, through the real command line.

The model is a real OpenAI-compatible server on 127.0.0.1 answering by script; the gated
tool is a real function named in the team file that appends to ``ran.log`` each time it runs
(its side effect). A second ``clearance resume`` is a real process. Each test runs on a real
SQLite file and on a real PostgreSQL server (when one can be started).

- Two ``resume`` processes of one paused run: the one that read the run before the other
  carried out the approved call is refused when it comes to take the run over (one line,
  exit 2), so the approved call runs once. Made deterministic by running the other resume
  to its end (or killing it inside the tool) at the exact point between this resume's read
  of the run and its take-over (`RunLedger.reopen_run`), where a loaded machine may put it.
- A resume killed inside the approved call: the stale resume is refused, the next one asks
  whether the call that may have run runs again (a ``rerun`` request; denied: it ran once).
- A decision recorded in that same window: that resume runs nothing; the next acts on it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli._app import app
from test_round18_review import TOOL_MODULE

pytestmark = pytest.mark.network

TEAM = """\
name: approvals
agents:
  - {name: janitor, instructions: "You tidy up.", tools: [remove]}
tools:
  remove: {function: "round17_approval_tools:remove", approval: required}
tasks:
  - {id: tidy, title: Tidy, description: Delete the file old.txt., assignee: janitor}
"""


def reply(messages: list[dict[str, Any]]) -> Any:
    text = "\n".join(m["content"] or "" for m in messages)
    if "Delete the file old.txt." in text:
        if "REMOVED old.txt" in text:
            return "removed it"
        if "denied this call" in text:
            return "left it in place"
        return [("remove", {"path": "old.txt"})]
    return "the summary"


@pytest.fixture(params=["sqlite", "postgresql"])
def env(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    openai_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    if request.param == "postgresql":
        db = str(request.getfixturevalue("postgres_url"))
    url = openai_server(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tmp_path / "round17_approval_tools.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "round17_approval_tools", raising=False)
    (tmp_path / "team.yaml").write_text(TEAM)
    return {
        "tmp": tmp_path,
        "db": db,
        "log": tmp_path / "ran.log",
        "proc_env": {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    }


def cli(env: dict[str, Any], *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--db", env["db"]])


def paused(env: dict[str, Any]) -> tuple[str, str]:
    """A run paused on its one approval request: its id and the request's."""
    run = cli(env, "run", str(env["tmp"] / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 3, run.output
    run_id = re.search(r"run id: (\S+)", run.output).group(1)  # type: ignore[union-attr]
    (call_id,) = re.findall(r"apr_[0-9a-z_]+", run.output.split("awaiting approval:")[1])
    return run_id, call_id


def resume_process(env: dict[str, Any], run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "clearance", "resume", run_id, "--db", env["db"]],
        env=env["proc_env"], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def ran(env: dict[str, Any]) -> list[str]:
    return env["log"].read_text().splitlines() if env["log"].exists() else []


def one_error_line(result: Any) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return str(lines[0])


def meanwhile(monkeypatch: pytest.MonkeyPatch, other: Any) -> list[Any]:
    """Run ``other()`` once, in the resume of this process, just before it takes the run over
    (after it read the run): what another process may do at that moment."""
    real = RunLedger.reopen_run
    done: list[Any] = []

    def reopen_run(self: RunLedger, *args: Any, **kwargs: Any) -> None:
        if not done:
            done.append(other())
        real(self, *args, **kwargs)

    monkeypatch.setattr(RunLedger, "reopen_run", reopen_run)
    return done


def test_a_second_resume_of_a_run_another_resume_completed_runs_nothing(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, call_id = paused(env)
    assert cli(env, "approve", run_id, call_id, "--by", "alice").exit_code == 0

    def other_resume() -> subprocess.CompletedProcess[str]:
        proc = resume_process(env, run_id)
        out, err = proc.communicate(timeout=120)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    done = meanwhile(monkeypatch, other_resume)
    second = cli(env, "resume", run_id)
    (first,) = done
    assert first.returncode == 0, first.stdout + first.stderr
    assert ran(env) == ["old.txt"], "the approved call ran more than once"
    line = one_error_line(second)
    assert line == (
        f"error: run {run_id} changed after this resume read it (another process recorded to "
        f"it meanwhile); nothing was run; see clearance inspect {run_id}, or resume it again"
    )
    with RunLedger(env["db"], create=False) as ledger:
        record = ledger.get_run(run_id)
        assert record.status == "completed" and record.synthesis == "the summary"
        (tool_call,) = ledger.tool_calls(run_id)
        assert tool_call.result == "REMOVED old.txt"
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output


def test_a_resume_killed_inside_the_approved_call_then_two_resumes_run_it_once(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other resume is SIGKILLed inside the approved call (its side effect done): the
    resume that read the run before is refused, and the next one asks a person whether the
    call that may have run runs again (denied here): it ran once."""
    run_id, call_id = paused(env)
    assert cli(env, "approve", run_id, call_id, "--by", "alice").exit_code == 0
    (env["tmp"] / "hang").touch()

    def killed_resume() -> int:
        proc = resume_process(env, run_id)
        deadline = time.monotonic() + 60
        while not ran(env) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        (env["tmp"] / "hang").unlink()
        return proc.returncode

    done = meanwhile(monkeypatch, killed_resume)
    second = cli(env, "resume", run_id)
    assert done == [-signal.SIGKILL]
    assert ran(env) == ["old.txt"], "the approved call ran again"
    assert "changed after this resume read it" in one_error_line(second)

    third = cli(env, "resume", run_id)
    assert third.exit_code == 3, third.output
    (rerun,) = re.findall(r"apr_[0-9a-z_]+", third.output.split("awaiting approval:")[1])
    assert ran(env) == ["old.txt"]
    denied = cli(env, "deny", run_id, rerun, "--by", "bob", "--reason", "it ran")
    assert denied.exit_code == 0, denied.output
    assert "may have run" in denied.output
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt"]
    with RunLedger(env["db"], create=False) as ledger:
        decided = ledger.events(run_id, "approval_decided")
        assert [(e.data["kind"], e.data["decision"], e.data["by"]) for e in decided] == [
            ("tool", "approved", "alice"),
            ("rerun", "denied", "bob"),
        ]
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output


def test_a_decision_recorded_while_a_resume_starts_is_kept_for_the_next_resume(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decision committed between a resume's read and its take-over changes the run too:
    that resume runs nothing (it is told in one line); the next acts on the decision, once."""
    run_id, call_id = paused(env)
    done = meanwhile(monkeypatch, lambda: cli(env, "approve", run_id, call_id, "--by", "alice"))
    refused = cli(env, "resume", run_id)
    assert [d.exit_code for d in done] == [0]
    assert "changed after this resume read it" in one_error_line(refused)
    assert ran(env) == []
    resumed = cli(env, "resume", run_id)
    assert resumed.exit_code == 0, resumed.output
    assert ran(env) == ["old.txt"]
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output
