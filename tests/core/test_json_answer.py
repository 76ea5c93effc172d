"""`read_json_answer`: model JSON is read strictly, and never deeper than `MAX_ANSWER_DEPTH`."""

from __future__ import annotations

import json

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core.json_answer import MAX_ANSWER_DEPTH, loads_strict, read_json_answer
from clearance._orchestration.structured import validated_json
from clearance.testing import FunctionModel


def nested(levels: int) -> str:
    """A JSON text of ``levels`` levels: an object holding lists."""
    return '{"v": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


def test_an_answer_nested_past_the_cap_is_refused_with_a_reason():
    assert read_json_answer(nested(MAX_ANSWER_DEPTH)) == json.loads(nested(MAX_ANSWER_DEPTH))
    with pytest.raises(ValueError, match=f"over {MAX_ANSWER_DEPTH} levels deep"):
        read_json_answer(nested(MAX_ANSWER_DEPTH + 1))
    with pytest.raises(ValueError, match="levels deep"):
        loads_strict(nested(500))  # the planner's reader too
    with pytest.raises(ValueError, match="levels deep"):
        validated_json(nested(500), {"type": "object"})
    # Wide is not deep: many siblings at one level are fine.
    assert len(read_json_answer(json.dumps([[0]] * 10_000))) == 10_000


async def test_a_deep_structured_answer_is_repaired_then_refused_not_kept(tmp_path):
    # Kept, an answer near the interpreter's limit would be read again deeper in the stack
    # (a dependent's condition, the run's outputs, verify) and could crash there.
    team = Team(agents=(Agent(name="alpha", instructions="You are Alpha."),))
    task = Task(id="a", title="A", description="Answer.", assignee="alpha",
                output_schema={"type": "object"})  # fmt: skip
    model = FunctionModel(lambda request: nested(400))
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    result = await Orchestrator(team, model=model, ledger=ledger).run_tasks([task])
    assert result.tasks["a"].status == "failed"
    task_calls = [r for r in model.requests if r.prompt.manifest.subject == "task:a"]
    assert len(task_calls) == 2  # the answer, and one repair naming the problem
    assert "levels deep" in task_calls[1].prompt.text
    assert verify_run(ledger, result.run_id).ok
