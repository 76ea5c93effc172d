"""Typed results: ``Task(output_type=Model)`` and ``output_schema`` give `TaskOutcome.output`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pydantic import BaseModel, field_validator

from clearance import Agent, ConfigError, Orchestrator, Task, Team
from clearance._core.teamfile import load_team_file
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="alice", instructions="You are Alice."),), name="t")


class Verdict(BaseModel):
    module: str
    score: int

    @field_validator("score")
    @classmethod
    def _in_range(cls, value: int) -> int:
        if not 0 <= value <= 10:
            raise ValueError("a score is 0 to 10")
        return value


def model_answering(answers: dict[str, list[str]]) -> FunctionModel:
    calls: Counter[str] = Counter()

    def answer(request):
        subject = request.prompt.manifest.subject
        queue = answers.get(subject, [])
        calls[subject] += 1
        return queue[calls[subject] - 1] if calls[subject] <= len(queue) else f"text {subject}"

    return FunctionModel(answer)


def typed(task_id: str, *deps: str, **kwargs) -> Task:
    return Task(
        id=task_id, title=task_id, description=f"Do {task_id}.", assignee="alice",
        depends_on=deps, **kwargs,
    )  # fmt: skip


def requests(model: FunctionModel, subject: str):
    return [r for r in model.requests if r.prompt.manifest.subject == subject]


async def test_output_type_gives_a_parsed_instance_and_dependents_get_the_text(ledger):
    model = model_answering({"task:a": ['{"score": 7, "module": "json.decoder"}']})
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(
        [typed("a", output_type=Verdict), typed("b", "a")]
    )
    assert result.status == "completed"
    outcome = result.tasks["a"]
    assert outcome.output == Verdict(module="json.decoder", score=7)
    assert isinstance(outcome.output, Verdict)
    assert json.loads(outcome.result or "") == {"module": "json.decoder", "score": 7}
    (asked,) = requests(model, "task:a")
    assert asked.json_schema == Verdict.model_json_schema()  # the provider is asked for it
    (dependent,) = requests(model, "task:b")
    assert outcome.result in dependent.prompt.text  # the recorded JSON text, as before
    assert result.tasks["b"].output is None  # a free-text result has no value


async def test_the_models_own_validators_get_the_one_repair(ledger):
    bad = '{"module": "m", "score": 99}'  # valid by the JSON Schema, not by the validator
    model = model_answering({"task:a": [bad, '{"module": "m", "score": 9}']})
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(
        [typed("a", output_type=Verdict)]
    )
    assert result.tasks["a"].output == Verdict(module="m", score=9)
    first, repair = requests(model, "task:a")
    assert "a score is 0 to 10" in repair.prompt.text and "Verdict at score" in repair.prompt.text
    assert "a score is 0 to 10" not in first.prompt.text


async def test_an_output_schema_from_a_team_file_gives_the_json_value(tmp_path: Path, ledger):
    team = tmp_path / "team.yaml"
    team.write_text(
        "name: t\nagents: [{name: alice, instructions: You are Alice.}]\n"
        "tasks:\n  - id: a\n    title: A\n    description: Do a.\n    assignee: alice\n"
        "    output_schema: {type: object, required: [n], properties: {n: {type: integer}}}\n"
    )
    loaded = load_team_file(team)
    model = model_answering({"task:a": ['{"n": 3}']})
    result = await Orchestrator(loaded.team, model=model, ledger=ledger).run_tasks(
        list(loaded.tasks)
    )
    assert result.tasks["a"].output == {"n": 3}


def test_output_type_and_output_schema_together_are_refused():
    with pytest.raises(ConfigError, match="give output_type or output_schema, not both"):
        typed("a", output_type=Verdict, output_schema={"type": "object"})
    with pytest.raises(ConfigError, match="must be a pydantic model class") as caught:
        typed("a", output_type=dict)
    assert caught.value.field == "tasks.a.output_type"
