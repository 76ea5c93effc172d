"""Approvals decided by two people at once: one decision counts, everywhere.

A run asking at the terminal (an ``approver``) and a colleague deciding the same request with
``clearance approve`` / ``deny`` meanwhile: the decision recorded first is the one the run
acts on, the one ``verify`` reads, and the only one recorded. Real SQLite files throughout.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from clearance import (
    ApprovalDecision,
    ApprovalRequest,
    Orchestrator,
    RunLedger,
    RunOptions,
    RunServices,
)
from clearance._context.verify import verify_run
from clearance.runs import decide
from clearance.testing import FunctionModel
from janitor import TASK, TEAM, removing

reply = removing("old.txt")


async def visible(db: str, run_id: str, call_id: str) -> None:
    """Wait (at most 5 s) until the request is committed where another process would see it."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with RunLedger(db, create=False) as other:
            if any(e.data.get("call_id") == call_id for e in other.events(run_id)):
                return
        await asyncio.sleep(0.02)
    raise AssertionError("the request was never committed")


async def test_a_colleagues_denial_recorded_while_the_terminal_asks_wins(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[str] = []

    def remove(path: str) -> str:
        """Remove a file."""
        ran.append(path)
        return f"REMOVED {path}"

    async def terminal(request: ApprovalRequest) -> ApprovalDecision:
        # Meanwhile a colleague denies the same request from another shell.
        await visible(db, request.run_id, request.call_id)
        with RunLedger(db, create=False) as other:
            decide(other, request.run_id, request.call_id,
                   ApprovalDecision(approved=False, by="bob", reason="keep it"))  # fmt: skip
        return ApprovalDecision(approved=True, by="alice")

    with RunLedger(db) as ledger:
        orch = Orchestrator(
            TEAM, model=FunctionModel(reply), ledger=ledger, tools={"remove": remove},
            options=RunOptions(approval_tools=["remove"], workspace_root=tmp_path / "ws"),
            services=RunServices(approver=terminal),
        )  # fmt: skip
        result = await orch.run_tasks([TASK])
        assert result.status == "completed", result.error
        assert ran == [], "the call was denied first: it must not run"
        decided = ledger.events(result.run_id, "approval_decided")
        assert [(e.data["decision"], e.data["by"]) for e in decided] == [("denied", "bob")]
        (call,) = ledger.tool_calls(result.run_id)
        assert call.is_error and "(bob) denied this call of remove: keep it" in call.result
        report = verify_run(ledger, result.run_id)
        assert report.ok, report.findings


@pytest.mark.parametrize(
    "answer",
    [
        ApprovalDecision(approved="no", by="alice"),  # type: ignore[arg-type]  # truthy text
        ApprovalDecision(approved=True, by="alice\nFAKE LINE"),
        ApprovalDecision(approved=False, by=""),
        ApprovalDecision(approved=False, by="alice", reason=None),  # type: ignore[arg-type]
        ApprovalDecision(approved=False, by="alice", reason="x" * 2001),
        None,
        "y",
    ],
)
async def test_an_approvers_malformed_answer_decides_nothing(tmp_path, answer):
    """An approver is the library user's code: what it returns is checked, never read as a
    decision it is not (``approved="no"`` is not an approval)."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[str] = []

    def remove(path: str) -> str:
        """Remove a file."""
        ran.append(path)
        return f"REMOVED {path}"

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        return answer  # type: ignore[no-any-return]

    with RunLedger(db) as ledger:
        result = await Orchestrator(
            TEAM, model=FunctionModel(reply), ledger=ledger, tools={"remove": remove},
            options=RunOptions(approval_tools=["remove"], workspace_root=tmp_path / "ws"),
            services=RunServices(approver=approver),
        ).run_tasks([TASK])  # fmt: skip
        assert ran == []
        assert result.tasks["tidy"].status == "failed"
        assert "approver" in (result.tasks["tidy"].error or "")
        assert len((result.tasks["tidy"].error or "").splitlines()) == 1
        assert not ledger.events(result.run_id, "approval_decided")
