"""``verify`` holds a structured result to its task's schema, ``x-enum-from`` narrowed.

A forger who rewrites a task's response and result together (the chain rebuilt) to a value
the schema refuses, or outside the values its prerequisites allowed, was not flagged: the
result was only compared with the response.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.testing import FunctionModel

SCHEMA = {
    "type": "object",
    "properties": {"pick": {"type": "string", "x-enum-from": "options"}},
    "required": ["pick"],
    "additionalProperties": False,
}


def canonical(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


async def run(tmp_path):
    def answer(request):
        subject = request.prompt.manifest.subject
        if subject == "task:offer":
            return json.dumps({"options": ["red", "blue"]})
        if subject == "task:choose":
            return json.dumps({"pick": "red"})
        return "SYNTHESIS"

    team = Team(agents=(Agent(name="w", instructions="You work."),))
    tasks = [
        Task(id="offer", title="Offer", description="Offer options.", assignee="w",
             output_schema={"type": "object"}),
        Task(id="choose", title="Choose", description="Choose one.", assignee="w",
             depends_on=("offer",), output_schema=SCHEMA),
    ]  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(answer), ledger=ledger,
            options=RunOptions(synthesis_from=()),
        ).run_tasks(tasks)  # fmt: skip
        assert result.status == "completed", result.error
        assert verify_run(ledger, result.run_id).ok
    return result.run_id


@pytest.mark.parametrize(
    ("forged", "problem"),
    [
        ({"pick": "green"}, "does not match its output schema at $.pick"),
        ({"pick": "red", "extra": 1}, "does not match its output schema"),
    ],
)
async def test_a_forged_structured_result_outside_its_schema_is_a_finding(
    tmp_path, rechain, forged, problem
) -> None:
    run_id = await run(tmp_path)
    db = tmp_path / "runs.db"
    text = canonical(forged)
    conn = sqlite3.connect(db)
    try:
        conn.execute("UPDATE tasks SET result = ? WHERE task_id = 'choose'", (text,))
        conn.execute("UPDATE calls SET response = ? WHERE subject = 'task:choose'", (text,))
        conn.commit()
    finally:
        conn.close()
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        reasons = [str(f) for f in verify_run(ledger, run_id).findings]
    assert any(problem in r for r in reasons), reasons
