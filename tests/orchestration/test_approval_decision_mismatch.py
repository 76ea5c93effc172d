"""A recorded decision counts only for the request it is about, as ``verify`` reads it.

Attack: a decision written into the ledger (through the ledger's own API, so the hash chain
holds) with the id of a real request but about another call (other arguments, another
task). ``verify`` says it "answers no recorded request"; the run must not act on it either:
the call it names stays undecided and never runs on the forged word. Real SQLite files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance import (
    ApprovalDecision,
    ApprovalRequest,
    ClearanceError,
    Orchestrator,
    RunLedger,
)
from clearance._context.verify import verify_run
from clearance._orchestration.approval import pending_approvals
from clearance.runs import decide
from janitor import TASK, janitor


def orchestrator(ledger: RunLedger, tmp_path: Path, ran: list[str], approver=None) -> Orchestrator:
    return janitor(ledger, tmp_path, ran, path="/etc/passwd", approver=approver)


def forge(ledger: RunLedger, run_id: str, **changes: str) -> str:
    """Record an approval with the id of the run's request, but about something else."""
    (asked,) = ledger.events(run_id, "awaiting_approval")
    data = {**asked.data, "decision": "approved", "by": "mallory", "reason": "", **changes}
    data.pop("arguments")
    ledger.record_event(run_id, "approval_decided", "task:tidy", data)
    return str(asked.data["call_id"])


@pytest.mark.parametrize(
    "changes",
    [{"arguments_sha256": "0" * 64}, {"task_id": "other"}, {"agent": "editor"}],
)
async def test_a_decision_about_another_call_is_not_acted_on(tmp_path, changes):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[str] = []
    with RunLedger(db) as ledger:
        first = await orchestrator(ledger, tmp_path, ran).run_tasks([TASK])
        assert first.status == "awaiting_approval", first.error
        call_id = forge(ledger, first.run_id, **changes)
        # The forged record decides nothing: the request is still open ...
        assert [r.call_id for r in pending_approvals(ledger, first.run_id)] == [call_id]
        # ... and the resumed run pauses on it again instead of running the call.
        again = await orchestrator(ledger, tmp_path, ran).resume(first.run_id)
        assert ran == [], "a call ran on a decision about another call"
        assert again.status == "awaiting_approval", again.error
        findings = [f.reason for f in verify_run(ledger, first.run_id).findings]
        assert findings == ["a decision that answers no recorded request"]


async def test_deciding_a_request_with_a_forged_decision_names_the_forgery(tmp_path):
    """`clearance approve` on it: one error naming the edited record, nothing recorded."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[str] = []
    with RunLedger(db) as ledger:
        first = await orchestrator(ledger, tmp_path, ran).run_tasks([TASK])
        call_id = forge(ledger, first.run_id, arguments_sha256="0" * 64)
        with pytest.raises(ClearanceError) as caught:
            decide(ledger, first.run_id, call_id, ApprovalDecision(approved=False, by="alice"))
        assert "is not about this request" in str(caught.value)
        assert "clearance verify" in str(caught.value)
        assert len(ledger.events(first.run_id, "approval_decided")) == 1


async def test_the_terminal_is_not_overruled_by_a_forged_decision(tmp_path):
    """With a person at the terminal, a forged decision is not acted on, and the person is not
    asked (their answer could not be recorded in its place): the task stops with one line
    naming the edited record, and the call never ran."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[str] = []
    asked: list[str] = []

    async def terminal(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request.call_id)
        return ApprovalDecision(approved=False, by="alice")

    with RunLedger(db) as ledger:
        first = await orchestrator(ledger, tmp_path, ran).run_tasks([TASK])
        forge(ledger, first.run_id, arguments_sha256="0" * 64)
        again = await orchestrator(ledger, tmp_path, ran, terminal).resume(first.run_id)
        assert ran == []
        assert asked == [], "its answer could not be recorded: nobody is asked"
        (task,) = [t for t in ledger.tasks(first.run_id) if t.task_id == "tidy"]
        assert task.status != "completed", again
        assert "is not about this request" in str(task.error)
