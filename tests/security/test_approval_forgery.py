"""Forged approval records in a ledger: ``verify`` flags each, honest runs verify.

A forger without the ledger key rebuilds the hash chain from the rows, here keeping the
chain's order except for the one record they move: what they cannot hide is the order
itself (a call recorded before the approval it needed). Real SQLite files throughout.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from clearance import (
    Agent,
    ApprovalDecision,
    ApprovalRequest,
    FanOut,
    Orchestrator,
    RunLedger,
    RunOptions,
    RunServices,
    Task,
    Team,
)
from clearance._context.verify import verify_run
from clearance._context.verify_chain import chained_records
from clearance._state.chain import chain_sha256

TEAM = Team(agents=(
    Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
    Agent(name="helper", instructions="You help."),
))  # fmt: skip
TASK = Task(id="p", title="P", description="Publish.", assignee="lead", approval="required",
            fan_out=FanOut(agent="helper", goals=("Find the notes.",)))  # fmt: skip


def rechain_moving(db: Path, run_id: str, record: tuple[str, str], before: tuple[str, str]) -> None:
    """Rebuild the run's chain (unkeyed), one entry per record, in the chain's order except
    that ``record`` (kind, subject) is moved to just before ``before``."""
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        records, problems = chained_records(ledger.chain_entries(run_id))
    assert not problems
    rows = [(r.kind, r.subject, r.payload_sha256) for r in records]
    moved = next(r for r in rows if r[:2] == record)
    rows.remove(moved)
    at = next(i for i, r in enumerate(rows) if r[:2] == before)
    rows.insert(at, moved)
    entries, previous = [], ""
    for seq, (kind, subject, payload) in enumerate(rows, 1):
        previous = chain_sha256(previous, run_id, seq, kind, subject, payload, None)
        entries.append((run_id, seq, kind, subject, payload, previous))
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET chain_key_id = NULL WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM ledger_entries WHERE run_id = ?", (run_id,))
    conn.executemany(
        "INSERT INTO ledger_entries (run_id, seq, kind, subject, payload_sha256, chain_sha256) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        entries,
    )
    conn.commit()
    conn.close()


async def approved_run(tmp_path: Path) -> tuple[Path, str]:
    async def approve(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, by="alice")

    def answer(request):
        subject = request.prompt.manifest.subject
        return "NOTES" if subject.startswith("child:") else "DONE"

    from clearance.testing import FunctionModel

    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            TEAM, model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(workspace_root=tmp_path / "ws"),
            services=RunServices(approver=approve),
        ).run_tasks([TASK])  # fmt: skip
        assert result.status == "completed", result.error
        report = verify_run(ledger, result.run_id)
        assert report.ok, report.findings  # the honest run verifies
    return db, result.run_id


async def test_a_child_that_ran_before_its_tasks_approval_is_flagged(tmp_path):
    db, run_id = await approved_run(tmp_path)
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        (decided,) = ledger.events(run_id, "approval_decided")
        (child,) = [c for c in ledger.calls(run_id) if c.subject.startswith("child:")]
    # Forged: the child's call recorded before the task's approval (the task's own after it).
    rechain_moving(db, run_id, ("call", child.call_id), before=("event", decided.event_id))
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        findings = verify_run(ledger, run_id).findings
    assert [(f.call_id, f.reason) for f in findings] == [
        (child.call_id, "a model call before the task's approval")
    ]


async def test_moving_nothing_keeps_the_run_verified(tmp_path):
    """The forger's tool itself changes nothing verify reads: the finding above is the move."""
    db, run_id = await approved_run(tmp_path)
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        (child,) = [c for c in ledger.calls(run_id) if c.subject.startswith("child:")]
        records, _ = chained_records(ledger.chain_entries(run_id))
    after = next(r for r in records if (r.kind, r.subject) == ("call", child.call_id)).position
    following = records[after]  # the record after the child's call: moving before it is a no-op
    rechain_moving(db, run_id, ("call", child.call_id), before=(following.kind, following.subject))
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        report = verify_run(ledger, run_id)
        assert report.ok, report.findings
