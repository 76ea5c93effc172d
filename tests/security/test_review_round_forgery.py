"""A ``review_round`` event must have a reviewer's call behind it.

The review loop records a round's verdict after the reviewer answered, so each event is the
answer of a recorded call of its subject (``review:<task>/<round>/<stage>``), by the
round's reviewer, on the round's candidate; a resumed run that replays a reviewer's call
records its round again (one more event per ``replayed`` record of the call). A forger who
adds an accepting round to pass a result off as reviewed, and rebuilds the hash chain, is
caught; honest runs, interrupted and resumed ones included, verify.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core.prompt import sha256_text
from clearance._core.review import Review
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="dev", instructions="You implement."),
                    Agent(name="rev", instructions="You review."),
                    Agent(name="sec", instructions="You review security.")))  # fmt: skip
ACCEPT = json.dumps({"verdict": "accept", "findings": "fine"})
REVISE = json.dumps({"verdict": "revise", "findings": "draft 1 is broken"})


def _answer(request: ModelRequest) -> str:
    """Round 1's candidate is sent back, round 2's accepted."""
    manifest = request.prompt.manifest
    if manifest.subject.startswith("review:"):
        return REVISE if "DRAFT 1" in request.prompt.messages[-1].content else ACCEPT
    if manifest.subject == "synthesis":
        return "SYNTH"
    second = any(i.origin.startswith("review:") for i in manifest.items)
    return "DRAFT 2" if second else "DRAFT 1"


def _task(by: tuple[str, ...] = ("rev",)) -> Task:
    return Task(id="build", title="Build", description="Build it.", assignee="dev",
                review=Review(by=by, rounds=2))  # fmt: skip


async def _record(db: Path) -> str:
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(TEAM, model=FunctionModel(_answer),
                                    ledger=ledger).run_tasks([_task()])  # fmt: skip
        assert result.tasks["build"].result == "DRAFT 2"
        assert verify_run(ledger, result.run_id).ok
        return result.run_id


def _reasons(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


def _add_round(db: Path, subject: str, data: dict[str, object]) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(
            "INSERT INTO events (event_id, run_id, kind, subject, data, created_at) "
            "SELECT 'evt_forged', run_id, kind, ?, ?, created_at FROM events "
            "WHERE kind = 'review_round' ORDER BY ordinal LIMIT 1",
            (subject, json.dumps(data)),
        )
        conn.commit()
    finally:
        conn.close()


def _round(round_no: int, accepted: bool, candidate: str) -> dict[str, object]:
    return {"task_id": "build", "round": round_no, "stage": 1, "reviewer": "rev",
            "accepted": accepted, "findings": "fine" if accepted else "draft 1 is broken",
            "candidate_sha256": sha256_text(candidate)}  # fmt: skip


async def test_an_accepting_round_with_no_reviewer_call_is_a_finding(tmp_path, rechain):
    """A task its reviewer sent back, forged completed with an accepting round added."""
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            TEAM, model=FunctionModel(lambda r: REVISE if r.prompt.manifest.subject.startswith(
                "review:") else "DRAFT 1"), ledger=ledger,
        ).run_tasks([Task(id="build", title="Build", description="Build it.", assignee="dev",
                          review=Review(by=("rev",), rounds=1))])  # fmt: skip
        assert result.tasks["build"].status == "failed"
        run_id = result.run_id
    conn = sqlite3.connect(db)
    conn.execute("UPDATE tasks SET status = 'completed', result = 'DRAFT 1', error = NULL "
                 "WHERE task_id = 'build'")  # fmt: skip
    conn.commit()
    conn.close()
    _add_round(db, "review:build/1/1", _round(1, True, "DRAFT 1"))
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert any("no recorded call of its reviewer gave this verdict" in r for r in reasons), reasons


async def test_a_round_naming_a_reviewer_who_never_answered_is_a_finding(tmp_path, rechain):
    """An accepting round 2 in the name of an agent who never reviewed the task."""
    db = tmp_path / "runs.db"
    run_id = await _record(db)
    _add_round(db, "review:build/2/1", {**_round(2, True, "DRAFT 2"), "reviewer": "sec"})
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert any("no recorded call of its reviewer gave this verdict" in r for r in reasons), reasons


async def test_a_round_recorded_under_another_subject_is_a_finding(tmp_path, rechain):
    db = tmp_path / "runs.db"
    run_id = await _record(db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET subject = 'task:build' WHERE kind = 'review_round'")
    conn.commit()
    conn.close()
    rechain(db, run_id)
    reasons = _reasons(db, run_id)
    assert any("recorded under 'task:build', not its reviewer's subject" in r
               for r in reasons), reasons  # fmt: skip


async def test_a_reviewer_call_replayed_on_resume_records_its_round_again_and_verifies(tmp_path):
    """Interrupted while the second stage reviews: on resume stage 1's call is replayed."""
    db = tmp_path / "runs.db"
    blocked = asyncio.Event()

    async def hanging(request: ModelRequest) -> str:
        if request.prompt.manifest.subject == "review:build/1/2":
            blocked.set()
            await asyncio.sleep(3600)
        return ACCEPT if request.prompt.manifest.subject.startswith("review:") else "DRAFT"

    with RunLedger(f"sqlite:///{db}") as ledger:
        run = asyncio.create_task(Orchestrator(TEAM, model=FunctionModel(hanging), ledger=ledger)
                                  .run_tasks([_task(("rev", "sec"))]))  # fmt: skip
        await blocked.wait()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        run_id = ledger.list_runs(limit=1)[0].run_id
        accepting = FunctionModel(
            lambda r: ACCEPT if r.prompt.manifest.subject.startswith("review:") else "DRAFT"
        )
        resumed = await Orchestrator(TEAM, model=accepting, ledger=ledger).resume(run_id)
        assert resumed.status == "completed", resumed.error
        rounds = [e for e in ledger.events(run_id) if e.kind == "review_round"]
        assert [e.subject for e in rounds] == ["review:build/1/1"] * 2 + ["review:build/1/2"]
        assert [e for e in ledger.events(run_id) if e.kind == "replayed"]
        report = verify_run(ledger, run_id)
        assert report.ok, report.findings
