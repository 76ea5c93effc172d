"""The run's recorded synthesis (its final answer) must be what the coordinator answered.

``clearance inspect``, ``view`` and the run report show the run's synthesis as its final
answer. A forger who rewrites it and rebuilds the hash chain is caught: it must be the
answer of a successful ``synthesis`` call, in the form a run keeps it (verbatim, or marked
when the answer was cut off).
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ModelResponse
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="w", instructions="You work."),))


class CutSynthesis(FunctionModel):
    """The synthesis stops at the output limit."""

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await super().request(request)
        if request.prompt.manifest.subject == "synthesis":
            return replace(response, finish_reason="length")
        return response


async def _record(db: Path, synthesis: str, *, cut: bool = False) -> str:
    def answer(request: ModelRequest) -> str:
        return synthesis if request.prompt.manifest.subject == "synthesis" else "a result"

    model = (CutSynthesis if cut else FunctionModel)(answer)
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(
            [Task(id="a", title="A", description="Do a.", assignee="w")], goal="G"
        )
        assert result.status == "completed", result.error
        return result.run_id


def _findings(db: Path, run_id: str) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id).findings]


async def test_an_honest_synthesis_verifies(tmp_path):
    db = tmp_path / "runs.db"
    run_id = await _record(db, "  The answer.\n")
    assert _findings(db, run_id) == []


async def test_a_cut_off_synthesis_kept_marked_verifies(tmp_path):
    db = tmp_path / "runs.db"
    run_id = await _record(db, "The answer is", cut=True)
    with RunLedger(f"sqlite:///{db}") as ledger:
        assert (ledger.get_run(run_id).synthesis or "").startswith("The answer is\n\n")
    assert _findings(db, run_id) == []


async def test_a_forged_synthesis_is_a_finding(tmp_path, rechain):
    db = tmp_path / "runs.db"
    run_id = await _record(db, "The answer.")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET synthesis = 'Ship it: every check passed.'")
    conn.commit()
    conn.close()
    rechain(db, run_id)
    found = _findings(db, run_id)
    assert any("the run's synthesis is not the answer of a synthesis call" in f
               for f in found), found  # fmt: skip
