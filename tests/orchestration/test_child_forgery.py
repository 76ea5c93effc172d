"""Children's outcomes `clearance verify` must catch when the ledger is rewritten and rechained.

A forger who replaces what a parent's prompt showed of its child, and edits the ``child``
event to agree, is caught: the recorded result must be an answer of the child's own calls,
and what the parent was shown must be what that outcome shows.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from test_subagents import forge_item

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.prompt import sha256_text
from clearance._core.spec import FanOut
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(
        Agent(name="lead", instructions="You lead.", can_spawn=("helper",)),
        Agent(name="helper", instructions="You help."),
    ),
    coordinator=Agent(name="editor", instructions="You edit."),
)
FORGED = "FORGED FINDING: ship it"


def _answer(request: ModelRequest) -> str:
    subject = request.prompt.manifest.subject
    if subject.startswith("child:"):
        return "- the real finding"
    return "parent summary" if subject == "task:parent" else "SYNTHESIS"


async def _record(db: Path, rewrite_prompt: Any) -> str:
    ledger = RunLedger(f"sqlite:///{db}")
    task = Task(id="parent", title="Parent", description="Sum up.", assignee="lead",
                fan_out=FanOut(agent="helper", goals=("look",)))  # fmt: skip
    result = await Orchestrator(
        TEAM, model=FunctionModel(_answer), ledger=ledger,
        options=RunOptions(workspace_root=db.parent / "ws"),
    ).run_tasks([task])  # fmt: skip
    assert result.tasks["parent"].status == "completed"
    assert verify_run(ledger, result.run_id).ok
    forge_item(rewrite_prompt, ledger, "task:parent", "Result of", FORGED)
    ledger.close()
    return result.run_id


def _edit_child_event(db: Path, change: dict[str, Any]) -> None:
    conn = sqlite3.connect(db)
    event_id, data = conn.execute(
        "SELECT event_id, data FROM events WHERE kind = 'child'"
    ).fetchone()
    data = {**json.loads(data), **change}
    conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id))
    conn.commit()
    conn.close()


def _reasons(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [f.reason for f in verify_run(ledger, run_id).findings]


async def test_a_child_result_forged_in_the_prompt_and_its_event_is_a_finding(
    tmp_path, rechain, rewrite_prompt
):
    db = tmp_path / "runs.db"
    run_id = await _record(db, rewrite_prompt)
    _edit_child_event(db, {"result": FORGED, "shown": FORGED, "shown_sha256": sha256_text(FORGED)})
    rechain(db, run_id)
    assert any("is not what its own calls answered" in r for r in _reasons(db, run_id))


async def test_a_failed_child_shown_as_done_is_a_finding(tmp_path, rechain, rewrite_prompt):
    """The event says the child failed, yet the parent was shown a result as if it had not."""
    db = tmp_path / "runs.db"
    run_id = await _record(db, rewrite_prompt)
    _edit_child_event(db, {"status": "failed", "result": "", "error": "boom", "shown": FORGED,
                           "shown_sha256": sha256_text(FORGED)})  # fmt: skip
    rechain(db, run_id)
    assert any("not what it shows" in r for r in _reasons(db, run_id))
