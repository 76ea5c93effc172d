"""Review loops and `clearance verify`: honest runs pass, a forged acceptance does not.

A reviewer's answer is read by verify as the review loop read it (a fenced block too), and
an answer that is no review (the loop stops the task there, recording no round) is not a
finding. A task rewritten as completed although no round's reviewers accepted its result
is, even with the hash chain rebuilt.
"""

from __future__ import annotations

import json
import sqlite3

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core.review import Review
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="dev", instructions="You implement."),
                    Agent(name="rev", instructions="You review.")))  # fmt: skip


async def _run(db: str, review_answer: str, rounds: int = 2):
    def answer(request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        if subject.startswith("review:"):
            return review_answer
        return "SYNTH" if subject == "synthesis" else "CANDIDATE"

    ledger = RunLedger(f"sqlite:///{db}")
    task = Task(id="build", title="Build", description="Build it.", assignee="dev",
                review=Review(by=("rev",), rounds=rounds))  # fmt: skip
    result = await Orchestrator(TEAM, model=FunctionModel(answer), ledger=ledger).run_tasks([task])
    return ledger, result


async def test_a_verdict_in_a_fenced_block_verifies(tmp_path):
    fenced = "```json\n" + json.dumps({"verdict": "accept", "findings": "fine"}) + "\n```"
    ledger, result = await _run(f"{tmp_path}/runs.db", fenced)
    assert result.tasks["build"].result == "CANDIDATE"
    report = verify_run(ledger, result.run_id)
    assert report.ok, report.findings


async def test_a_reviewer_answer_that_is_no_review_fails_the_task_and_verifies(tmp_path):
    ledger, result = await _run(f"{tmp_path}/runs.db", "I think it is fine.")
    assert result.tasks["build"].status == "failed"
    report = verify_run(ledger, result.run_id)
    assert report.ok, report.findings


async def test_a_task_forged_completed_without_an_accepting_round_is_a_finding(tmp_path, rechain):
    db = tmp_path / "runs.db"
    revise = json.dumps({"verdict": "revise", "findings": "it is broken"})
    ledger, result = await _run(str(db), revise, rounds=1)
    assert result.tasks["build"].status == "failed"
    assert verify_run(ledger, result.run_id).ok
    ledger.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE tasks SET status = 'completed', result = 'CANDIDATE', error = NULL "
                 "WHERE task_id = 'build'")  # fmt: skip
    conn.execute("DELETE FROM task_reasons WHERE task_id = 'build'")
    conn.commit()
    conn.close()
    rechain(db, result.run_id)
    with RunLedger(f"sqlite:///{db}") as forged:
        reasons = [f.reason for f in verify_run(forged, result.run_id).findings]
    assert "the task is recorded completed, but no round's reviewers all accepted its result" in (
        reasons
    )
