"""The chain check reads a run's chain and records as of one moment, even while it is written.

`check_chain` (used by ``clearance verify`` and by ``clearance resume`` before anything is
rebuilt) reads the chain's entries, then the records. A writer committing between the two
reads (a run still going, a resume that won the race for the run) made honest records look
altered: two resumes at once could refuse the loser with "the record differs from its entry
in the hash chain" instead of naming the owner.
"""

from __future__ import annotations

from pathlib import Path

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify_chain import check_chain
from clearance.testing import FunctionModel


async def _run(db: Path) -> str:
    team = Team(agents=(Agent(name="a", instructions="x"),))
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(lambda r: "ok"), ledger=ledger,
            options=RunOptions(workspace_root=db.parent / "ws"),
        ).run_tasks([Task(id="t", title="T", description="d", assignee="a")])  # fmt: skip
    assert result.status == "completed", result.error
    return result.run_id


async def test_a_commit_between_the_reads_is_not_a_finding(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = await _run(db)
    with RunLedger(f"sqlite:///{db}") as ledger, RunLedger(f"sqlite:///{db}") as writer:
        read = ledger.chain_entries
        commits = []

        def entries_then_a_commit(run: str):  # another resume takes the run right after
            entries = read(run)
            if not commits:
                writer.reopen_run(run)
                commits.append(run)
            return entries

        ledger.chain_entries = entries_then_a_commit  # type: ignore[method-assign]
        report = check_chain(ledger, run_id, None)
    assert commits, "the concurrent commit was not made"
    assert report.problems == (), report.problems
