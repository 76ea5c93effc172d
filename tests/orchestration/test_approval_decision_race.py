"""Two decisions on one approval request at the same moment: exactly one is recorded.

``clearance approve`` and ``clearance deny`` run in two real processes released together for
each of many requests (on a real SQLite file, and on a real PostgreSQL server when one can be
started); the person at the terminal (``--interactive``) racing a colleague's command is the
same check on the gate's side. The first decision wins; the second is told, in one line
naming the run, the request and the decision already recorded, and exits 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import (
    Agent,
    ApprovalDecision,
    ApprovalRequest,
    Orchestrator,
    RunLedger,
    RunOptions,
    RunServices,
    Task,
    Team,
)
from clearance._context.verify import verify_run
from clearance._orchestration.approval import ApprovalGate
from clearance.cli._app import app
from clearance.testing import FunctionModel
from janitor import TASK, TEAM, removing

ROUNDS = 16

WRITERS = Team(
    agents=(Agent(name="writer", instructions="You write."),),
    coordinator=Agent(name="editor", instructions="You edit."),
)

# One decider process: for each line ``<run> <call> <verb> <by>`` it says "ready", waits for
# "go" (the parent releases both deciders together), runs the command and prints its outcome.
_DECIDER = """
import json, sys
from typer.testing import CliRunner
from clearance.cli._app import app
db = sys.argv[1]
runner = CliRunner()
for line in sys.stdin:
    run_id, call_id, verb, by = line.split()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        break
    result = runner.invoke(app, [verb, run_id, call_id, "--by", by, "--db", db])
    print(json.dumps({"code": result.exit_code, "output": result.output}), flush=True)
"""


async def paused_run(db: str, tmp_path: Path, tasks: int) -> tuple[str, list[str]]:
    """A run paused on ``tasks`` open requests (tasks that need approval); its id and theirs."""
    graph = [
        Task(id=f"t{i}", title=f"T{i}", description="Work.", assignee="writer",
             approval="required")
        for i in range(tasks)
    ]  # fmt: skip
    with RunLedger(db) as ledger:
        result = await Orchestrator(
            WRITERS, model=FunctionModel(lambda request: "done"), ledger=ledger,
            options=RunOptions(workspace_root=tmp_path / "ws"),
        ).run_tasks(graph)  # fmt: skip
        assert result.status == "awaiting_approval", result.error
        asked = [e.data["call_id"] for e in ledger.events(result.run_id, "awaiting_approval")]
    assert len(asked) == tasks
    return result.run_id, asked


def race(db: str, run_id: str, calls: list[str]) -> list[tuple[dict[str, Any], ...]]:
    """Decide each request twice at once: alice approves, bob denies (in turn first)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    deciders = [
        subprocess.Popen(
            [sys.executable, "-c", _DECIDER, db],
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outcomes = []
    try:
        for i, call_id in enumerate(calls):
            people = [("approve", "alice"), ("deny", "bob")]
            if i % 2:  # either one is released first, in turn
                people.reverse()
            for proc, (verb, by) in zip(deciders, people, strict=True):
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{run_id} {call_id} {verb} {by}\n")
                proc.stdin.flush()
            for proc in deciders:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "ready"
            for proc in deciders:  # released together
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            outcomes.append(
                tuple(json.loads(proc.stdout.readline()) for proc in deciders if proc.stdout)
            )
    finally:
        for proc in deciders:  # end of input ends each decider; its pipes are closed
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate(timeout=10)
    return outcomes


def check_one_decision_each(
    db: str, run_id: str, calls: list[str], outcomes: list[tuple[dict[str, Any], ...]]
) -> None:
    with RunLedger(db, create=False) as ledger:
        decided = ledger.events(run_id, "approval_decided")
        assert sorted(e.data["call_id"] for e in decided) == sorted(calls), "one per request"
        recorded = {e.data["call_id"]: (e.data["decision"], e.data["by"]) for e in decided}
        report = verify_run(ledger, run_id)
        assert report.ok, report.findings
    for call_id, pair in zip(calls, outcomes, strict=True):
        assert sorted(o["code"] for o in pair) == [0, 2], pair
        (lost,) = (o["output"] for o in pair if o["code"] == 2)
        decision, by = recorded[call_id]
        assert lost.strip() == (
            f"error: call_id: approval {call_id} of run {run_id} was already {decision} by "
            f"{by}; a decision is final"
        )
        (won,) = (o["output"] for o in pair if o["code"] == 0)
        assert won.startswith(f"{'approved' if decision == 'approved' else 'denied'} {call_id}")


async def test_an_approval_and_a_denial_at_once_on_sqlite_record_one(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id, calls = await paused_run(db, tmp_path, ROUNDS)
    outcomes = race(db, run_id, calls)
    check_one_decision_each(db, run_id, calls, outcomes)
    verified = CliRunner().invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output


async def test_an_approval_and_a_denial_at_once_on_postgresql_record_one(
    postgres_url: str, tmp_path: Path
) -> None:
    run_id, calls = await paused_run(postgres_url, tmp_path, ROUNDS)
    outcomes = race(postgres_url, run_id, calls)
    check_one_decision_each(postgres_url, run_id, calls, outcomes)


reply = removing("old.txt")


async def test_a_decision_committed_after_the_terminals_last_look_is_not_doubled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The person at the terminal answers; a colleague's denial is committed after the gate
    last looked for one (simulated: the gate's look finds nothing): the gate's write sees the
    denial, records nothing, and the run acts on the denial."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[str] = []

    def remove(path: str) -> str:
        """Remove a file."""
        ran.append(path)
        return f"REMOVED {path}"

    async def terminal(request: ApprovalRequest) -> ApprovalDecision:
        denied = CliRunner().invoke(
            app, ["deny", request.run_id, request.call_id, "--by", "bob", "--reason", "keep it",
                  "--db", db],
        )  # fmt: skip
        assert denied.exit_code == 0, denied.output
        return ApprovalDecision(approved=True, by="alice")

    monkeypatch.setattr(ApprovalGate, "_recorded_decision", lambda self, call_id: None)
    with RunLedger(db) as ledger:
        result = await Orchestrator(
            TEAM,
            model=FunctionModel(reply),
            ledger=ledger,
            tools={"remove": remove},
            options=RunOptions(approval_tools=["remove"], workspace_root=tmp_path / "ws"),
            services=RunServices(approver=terminal),
        ).run_tasks([TASK])
        assert result.status == "completed", result.error
        assert ran == [], "the denial was recorded first: the call must not run"
        decided = ledger.events(result.run_id, "approval_decided")
        assert [(e.data["decision"], e.data["by"]) for e in decided] == [("denied", "bob")]
        report = verify_run(ledger, result.run_id)
        assert report.ok, report.findings


async def test_verify_flags_two_decisions_recorded_for_one_request(tmp_path: Path) -> None:
    """A ledger holding two decisions on one request (as one written before this fix, or
    by hand) fails verify, naming the request."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id, (call_id,) = await paused_run(db, tmp_path, 1)
    with RunLedger(db, create=False) as ledger:
        (asked,) = ledger.events(run_id, "awaiting_approval")
        data = {**asked.data, "by": "alice", "reason": ""}
        data.pop("arguments")
        ledger.record_event(run_id, "approval_decided", "task:t0", {**data, "decision": "denied"})
        ledger.record_event(run_id, "approval_decided", "task:t0",
                            {**data, "decision": "approved"})  # fmt: skip
        report = verify_run(ledger, run_id)
    assert not report.ok
    assert [(f.subject, f.reason) for f in report.findings] == [
        (f"approval {call_id}", "decided more than once")
    ]
    verified = CliRunner().invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code != 0 and "decided more than once" in verified.output


async def test_a_huge_or_control_character_request_id_is_one_short_line(tmp_path: Path) -> None:
    """The request id comes from the command line: echoed back cut and escaped, never whole."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id, _ = await paused_run(db, tmp_path, 1)
    runner = CliRunner()
    huge = runner.invoke(app, ["approve", run_id, "apr_" + "x" * 100_000, "--db", db])
    assert huge.exit_code == 2
    assert f"run {run_id} has no approval request 'apr_xxx" in huge.output
    assert "[cut: 100006 characters]" in huge.output
    assert len(huge.output) < 400 and len(huge.output.strip().splitlines()) == 1
    forged = runner.invoke(app, ["deny", run_id, "apr_\x1b[2J\nFAKE", "--db", db])
    assert forged.exit_code == 2
    assert "\x1b" not in forged.output and len(forged.output.strip().splitlines()) == 1
    with RunLedger(db, create=False) as ledger:
        assert not ledger.events(run_id, "approval_decided")
