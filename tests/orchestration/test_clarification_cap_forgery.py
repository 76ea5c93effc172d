"""``isolation.max_rounds`` in `clearance verify`: no isolated prompt shows more answers.

An isolated task's subagent may ask for context at most ``max_rounds`` times in a session,
so no prompt of it holds more clarifications than that. A ledger rewritten (and rechained)
to claim a tighter cap than the run had, so its prompts show more answers than the cap, is
a finding; an honest run, and one recorded with the default cap, verifies.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="worker", instructions="You review."),),
            coordinator=Agent(name="editor", instructions="You edit."))  # fmt: skip


def _answer(request: ModelRequest) -> str:
    subject, text = request.prompt.manifest.subject, request.prompt.messages[-1].content
    if subject == "isolated:t":
        if "Clarification 2" in text:
            return "fine\nSTATUS: done"
        return "STATUS: needs_context\nQUESTION: What next?"
    return "An answer." if subject == "clarification:t" else "SYNTH"


async def _record(tmp_path: Path, **options: Any) -> tuple[Path, str]:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# Demo\n")
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            TEAM, model=FunctionModel(_answer), ledger=ledger,
            options=RunOptions(input_root=root, workspace_root=tmp_path / "ws", **options),
        ).run_tasks([Task(id="t", title="T", description="Review.", assignee="worker",
                          mode="isolated")])  # fmt: skip
        assert result.status == "completed", result.error
    return db, result.run_id


def _findings(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


def _config(db: Path, run_id: str, change: Any) -> None:
    conn = sqlite3.connect(db)
    try:
        (text,) = conn.execute("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        config = change(json.loads(text))
        conn.execute("UPDATE runs SET config = ? WHERE run_id = ?", (json.dumps(config), run_id))
        conn.commit()
    finally:
        conn.close()


async def test_a_run_within_the_default_cap_verifies(tmp_path):
    db, run_id = await _record(tmp_path)
    assert _findings(db, run_id) == []


async def test_a_cap_forged_below_the_answers_shown_is_a_finding(tmp_path, rechain):
    db, run_id = await _record(tmp_path, clarification_rounds=3)
    assert _findings(db, run_id) == []
    _config(db, run_id, lambda c: {**c, "isolation": {**c.get("isolation", {}), "max_rounds": 1}})
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("shows 2 clarifications, but isolation.max_rounds is 1" in f for f in found), found


async def test_a_run_recorded_before_its_spec_keeps_its_cap(tmp_path, rechain):
    """An older config named the cap ``clarification_rounds``: it is read from there."""
    db, run_id = await _record(tmp_path)
    _config(db, run_id, lambda c: {**c, "clarification_rounds": 1})
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("isolation.max_rounds is 1" in f for f in found), found
