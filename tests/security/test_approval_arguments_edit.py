"""An approval request whose recorded arguments were edited is refused, never acted on.

The resumed run runs a tool with the arguments of the model's recorded answer (replayed),
while ``clearance approve`` and the terminal show the request's recorded arguments. A forger
who can write the ledger (rebuilding its hash chain, `rechain`) edits a pending request's
arguments, keeping its digest or editing both, or records the request twice under one id,
so that a person approves one call while another runs. Each such request is refused in one
line naming it and pointing to ``clearance verify`` (exit 2 on the CLI), the call never runs,
and ``verify`` reports it. Real SQLite files, edited through sqlite3.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import (
    ApprovalDecision,
    ApprovalRequest,
    ClearanceError,
    Orchestrator,
    RunLedger,
)
from clearance._context.verify import verify_run
from clearance._context.verify_approvals import arguments_sha256
from clearance._orchestration.approval_request import decision_data
from clearance.cli import app
from clearance.runs import decide
from janitor import TASK, janitor

ASKED = {"path": "/etc/passwd"}  # what the model's answer asks for
SHOWN = {"path": "old.txt"}  # what the forger shows the person


def orchestrator(ledger: RunLedger, tmp_path: Path, ran: list[str], approver=None) -> Orchestrator:
    return janitor(ledger, tmp_path, ran, path=ASKED["path"], approver=approver)


async def paused(tmp_path: Path, ran: list[str]) -> tuple[Path, str, str]:
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        first = await orchestrator(ledger, tmp_path, ran).run_tasks([TASK])
        assert first.status == "awaiting_approval", first.error
        (asked,) = ledger.events(first.run_id, "awaiting_approval")
    return db, first.run_id, str(asked.data["call_id"])


def edit_request(db: Path, call_id: str, *, digest: str | None, duplicate: bool = False) -> None:
    """Give the request the arguments ``SHOWN`` (and ``digest``); ``duplicate`` keeps the
    original beside it, under the same id, recorded after it."""
    conn = sqlite3.connect(db)
    ordinal, event_id, run_id, subject, raw, created = conn.execute(
        "SELECT ordinal, event_id, run_id, subject, data, created_at FROM events "
        "WHERE kind = 'awaiting_approval'"
    ).fetchone()
    data = json.loads(raw)
    assert data["call_id"] == call_id
    edited = {**data, "arguments": SHOWN, "arguments_sha256": digest or data["arguments_sha256"]}
    conn.execute("UPDATE events SET data = ? WHERE ordinal = ?", (json.dumps(edited), ordinal))
    if duplicate:
        conn.execute(
            "INSERT INTO events (event_id, run_id, kind, subject, data, created_at) "
            "VALUES (?, ?, 'awaiting_approval', ?, ?, ?)",
            (event_id + "x", run_id, subject, raw, created),
        )
    conn.commit()
    conn.close()


EDITS = {
    "arguments only": {"digest": None},
    "arguments and digest": {"digest": arguments_sha256(SHOWN)},
    "recorded twice": {"digest": arguments_sha256(SHOWN), "duplicate": True},
}
REASONS = {
    "arguments only": "its recorded arguments do not match its recorded arguments digest",
    "arguments and digest": "its tool call is not one a recorded model answer asked for",
    "recorded twice": "requested more than once under one id",
}


@pytest.mark.parametrize("edit", list(EDITS))
async def test_approve_refuses_an_edited_request(tmp_path, rechain, edit):
    ran: list[str] = []
    db, run_id, call_id = await paused(tmp_path, ran)
    edit_request(db, call_id, **EDITS[edit])
    rechain(db, run_id)
    runner = CliRunner()
    for command in ("approve", "deny"):
        result = runner.invoke(app, [command, run_id, call_id, "--db", f"sqlite:///{db}"])
        assert result.exit_code == 2, result.output
        assert result.output.count("\n") == 1, result.output
        assert f"approval request {call_id} of run {run_id} was edited in the ledger" in (
            result.output
        )
        assert REASONS[edit] in result.output
        assert f"see: clearance verify {run_id}" in result.output
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        assert ledger.events(run_id, "approval_decided") == []
        findings = [(f.subject, f.reason) for f in verify_run(ledger, run_id).findings]
    assert (f"approval {call_id}", REASONS[edit]) in findings
    assert ran == []


@pytest.mark.parametrize("edit", list(EDITS))
async def test_resume_refuses_an_edited_request_approved_as_shown(tmp_path, rechain, edit):
    """The person approved the request as shown (recorded as an earlier `approve` would):
    the resumed run refuses it before any task runs, and the model's call never runs."""
    ran: list[str] = []
    db, run_id, call_id = await paused(tmp_path, ran)
    edit_request(db, call_id, **EDITS[edit])
    with RunLedger(f"sqlite:///{db}") as ledger:
        shown = ApprovalRequest(
            call_id=call_id, run_id=run_id, kind="tool", task_id="tidy", agent="janitor",
            tool="remove", arguments=SHOWN,
        )  # fmt: skip
        data = decision_data(shown, ApprovalDecision(approved=True, by="alice"))
        ledger.record_event(run_id, "approval_decided", "task:tidy", data)
    rechain(db, run_id)
    asked: list[str] = []

    async def terminal(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request.describe())
        return ApprovalDecision(approved=True, by="alice")

    for approver in (None, terminal):
        with RunLedger(f"sqlite:///{db}") as ledger, pytest.raises(ClearanceError) as caught:
            await orchestrator(ledger, tmp_path, ran, approver).resume(run_id)
        message = str(caught.value)
        assert "\n" not in message
        assert f"approval request {call_id} of run {run_id} was edited in the ledger" in message
        assert REASONS[edit] in message
        assert f"see: clearance verify {run_id}" in message
    assert ran == [], "a call ran that the person was not shown"
    assert asked == []


async def test_an_honest_request_still_verifies_and_runs(tmp_path):
    ran: list[str] = []
    db, run_id, call_id = await paused(tmp_path, ran)
    with RunLedger(f"sqlite:///{db}") as ledger:
        decide(ledger, run_id, call_id, ApprovalDecision(approved=True, by="alice"))
        again = await orchestrator(ledger, tmp_path, ran).resume(run_id)
        assert again.status == "completed", again.error
        assert ran == ["/etc/passwd"]
        assert list(verify_run(ledger, run_id).findings) == []
