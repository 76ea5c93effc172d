"""``limits.max_tool_calls_per_step`` on the call paths of a run, and a failed synthesis.

One model answer asking for thousands of tool calls used to run them all (``max_steps``
counts model calls only). The cap is checked in `ModelCaller`, so it holds for a task's tool
loop, a delegate's and every path without tools alike; a failed answer keeps finished results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, Task, TaskStatus, Team
from clearance._core.teamfile_models import AgentSpec, LimitsSpec
from clearance._core.vocabulary import EventKind
from clearance.models import ModelRequest, ModelResponse, ToolCall, Usage
from clearance.testing import FunctionModel

RUNS: list[int] = []


def ping(i: int) -> str:
    """Ping."""
    RUNS.append(i)
    return f"pong{i}"


def fan(n: int) -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", name="ping", arguments={"i": i}) for i in range(n)]


@pytest.fixture(autouse=True)
def _no_runs() -> None:
    RUNS.clear()


async def run(tmp_path: Path, team: Team, reply: Any) -> tuple[Any, RunLedger, FunctionModel]:
    model = FunctionModel(reply)
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    orchestrator = Orchestrator(team, model=model, ledger=ledger)
    result = await orchestrator.run_tasks(
        [Task(id="t", title="T", description="Ping.", assignee="a")]
    )
    return result, ledger, model


async def test_a_reply_over_the_cap_runs_no_tool_and_fails_the_task(tmp_path: Path) -> None:
    a = Agent(name="a", instructions="A", tools=(ping,),
              limits=AgentLimits(max_tool_calls_per_step=5))  # fmt: skip

    def reply(request: ModelRequest) -> Any:
        return fan(20_000) if request.prompt.manifest.subject == "task:t" else "synth"

    result, ledger, model = await run(tmp_path, Team(agents=(a,)), reply)
    with ledger:
        outcome = result.tasks["t"]
        assert outcome.status is TaskStatus.FAILED
        assert "max_tool_calls_per_step exceeded: 20000 > 5" in (outcome.error or "")
        assert RUNS == []
        assert ledger.tool_calls(result.run_id) == []
        assert ledger.events(result.run_id, EventKind.MODEL_TOOL_CALLS) == []
        assert [r.prompt.manifest.subject for r in model.requests].count("task:t") == 1


async def test_a_reply_at_the_cap_runs_every_call(tmp_path: Path) -> None:
    a = Agent(name="a", instructions="A", tools=(ping,),
              limits=AgentLimits(max_tool_calls_per_step=5))  # fmt: skip

    def reply(request: ModelRequest) -> Any:
        if request.prompt.manifest.subject != "task:t":
            return "synth"
        return "done" if "pong" in request.prompt.text else fan(5)

    result, ledger, _ = await run(tmp_path, Team(agents=(a,)), reply)
    with ledger:
        assert result.tasks["t"].status is TaskStatus.COMPLETED
        assert sorted(RUNS) == [0, 1, 2, 3, 4]
        assert len(ledger.tool_calls(result.run_id)) == 5


async def test_a_delegate_over_its_own_cap_is_a_tool_error_for_the_delegator(
    tmp_path: Path,
) -> None:
    a = Agent(name="a", instructions="A", can_delegate_to=("b",))
    b = Agent(name="b", instructions="B", tools=(ping,),
              limits=AgentLimits(max_tool_calls_per_step=2))  # fmt: skip

    def reply(request: ModelRequest) -> Any:
        subject = request.prompt.manifest.subject
        if subject.startswith("delegation:"):
            return fan(3)
        if subject == "task:t":
            if "max_tool_calls_per_step" in request.prompt.text:
                return "b could not"
            return ToolCall(id="d", name="delegate", arguments={"agent": "b", "task": "Ping."})
        return "synth"

    result, ledger, _ = await run(tmp_path, Team(agents=(a, b)), reply)
    with ledger:
        assert result.tasks["t"].result == "b could not"
        assert RUNS == []
        (delegated,) = ledger.tool_calls(result.run_id)
        assert delegated.is_error
        assert "max_tool_calls_per_step exceeded: 3 > 2" in delegated.result


async def test_a_synthesis_answer_of_the_wrong_type_fails_the_run_and_keeps_results(
    tmp_path: Path,
) -> None:
    a = Agent(name="a", instructions="A")

    class Model(FunctionModel):
        async def request(self, request: ModelRequest) -> ModelResponse:
            response = await super().request(request)
            if request.prompt.manifest.subject == "synthesis":
                return ModelResponse(text=42, usage=Usage(requests=1), model_id=self.model_id)  # type: ignore[arg-type]
            return response

    model = Model(lambda request: "TASK RESULT")
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(Team(agents=(a,), coordinator=Agent(name="ed",
            instructions="E")), model=model, ledger=ledger).run_tasks(
            [Task(id="t", title="T", description="Do.", assignee="a")])  # fmt: skip
        assert result.status == "failed"
        assert result.tasks["t"].result == "TASK RESULT"
        assert "the completion is an int, not text" in (result.error or "")
        assert ledger.get_run(result.run_id).status == "failed"


def test_the_team_file_sets_the_cap_strictly() -> None:
    assert LimitsSpec().max_tool_calls_per_step == AgentLimits().max_tool_calls_per_step == 32
    entry = {"name": "a", "instructions": "A", "limits": {"max_tool_calls_per_step": 4}}
    assert AgentSpec.model_validate(entry).to_agent().limits.max_tool_calls_per_step == 4
    for bad in (0, "4", 4.5):
        entry["limits"] = {"max_tool_calls_per_step": bad}
        with pytest.raises(ValidationError, match="max_tool_calls_per_step"):
            AgentSpec.model_validate(entry)
