"""Structured answers built to mislead: a key given twice, a reason that quotes a huge answer."""

from __future__ import annotations

import json

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core.review import Review
from clearance._orchestration.structured import validated_json
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.mark.parametrize(
    "answer",
    [
        '{"n": 1, "n": 2}',
        '{"n": 1, "inner": {"k": "a", "k": "b"}}',
        '```json\n{"n": 1, "n": 2}\n```',
    ],
)
def test_a_key_given_twice_is_refused(answer):
    with pytest.raises(ValueError, match="given twice in one object"):
        validated_json(answer, SCHEMA)


def test_the_same_key_in_two_objects_is_fine():
    assert json.loads(validated_json('{"n": 1, "a": {"k": 1}, "b": {"k": 2}}', SCHEMA))["n"] == 1


@pytest.mark.parametrize("value", ["x" * 200_000, ["y" * 50] * 5_000, {"k" * 100_000: 1}])
def test_a_schema_error_quoting_a_huge_value_is_cut(value):
    with pytest.raises(ValueError) as caught:
        validated_json(json.dumps({"n": value}), SCHEMA)
    assert len(str(caught.value)) <= 600
    assert "\n" not in str(caught.value)


async def test_a_reviewer_answer_with_two_verdicts_never_accepts(tmp_path):
    """'revise' first, 'accept' last: Python's json would read 'accept'; the answer is refused."""
    team = Team(agents=(Agent(name="dev", instructions="You implement."),
                        Agent(name="rev", instructions="You review.")))  # fmt: skip

    def answer(request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        if subject.startswith("review:"):
            return '{"verdict": "revise", "findings": "it is broken", "verdict": "accept"}'
        return "SYNTH" if subject == "synthesis" else "CANDIDATE"

    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    task = Task(id="build", title="Build", description="Build it.", assignee="dev",
                review=Review(by=("rev",), rounds=2))  # fmt: skip
    result = await Orchestrator(team, model=FunctionModel(answer), ledger=ledger).run_tasks([task])
    outcome = result.tasks["build"]
    assert outcome.status == "failed" and outcome.result is None
    assert "given twice" in (outcome.error or "")
    assert not [e for e in ledger.events(result.run_id) if e.kind == "review_round"]
    assert verify_run(ledger, result.run_id).ok


async def test_the_repair_prompt_quotes_a_huge_wrong_answer_once(tmp_path):
    team = Team(agents=(Agent(name="dev", instructions="You implement."),))
    huge = json.dumps({"n": "x" * 50_000})
    prompts: list[str] = []

    def answer(request: ModelRequest) -> str:
        if request.prompt.manifest.subject == "synthesis":
            return "SYNTH"
        prompts.append(request.prompt.text)
        return huge if len(prompts) == 1 else '{"n": 3}'

    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    task = Task(id="t", title="T", description="Count.", assignee="dev", output_schema=SCHEMA)
    result = await Orchestrator(team, model=FunctionModel(answer), ledger=ledger).run_tasks([task])
    assert result.tasks["t"].status == "completed"
    repair = prompts[1]
    assert "Problem: the JSON does not match the output schema at $.n" in repair
    assert repair.count("x") < 50_000 + 1_000  # the answer once, the reason cut
