"""A tool call's arguments count toward the answer's size cap, from any model.

Providers count the arguments their servers send; `checked_response` counted only the text
and the tool names, so a user's own `ChatModel` could hand the ledger and the tool loop
megabytes of arguments whatever the agent's ``max_output_tokens``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, Task, TaskStatus, Team
from clearance.models import ModelRequest, ToolCall
from clearance.models._base import max_response_chars
from clearance.testing import FunctionModel

COORD = Agent(name="lead", instructions="You lead.")
RAN: list[object] = []


def note(text: str) -> str:
    """Note a text."""
    RAN.append(len(text))
    return "noted"


@pytest.mark.parametrize("over", [True, False])
async def test_arguments_over_the_cap_fail_the_call_and_never_run(tmp_path: Path, over: bool):
    RAN.clear()
    size = max_response_chars(64) + 1 if over else 1_000

    def answer(request: ModelRequest) -> object:
        manifest = request.prompt.manifest
        if manifest.subject == "synthesis":
            return "SYNTH"
        if not any(o.startswith("tool:") for o in manifest.origins):
            return ToolCall(id="c", name="note", arguments={"text": "x" * size})
        return "done"

    alice = Agent(name="alice", instructions="A.", tools=(note,),
                  limits=AgentLimits(max_output_tokens=64, retries=0))  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(Team(agents=(alice,), coordinator=COORD),
                                    model=FunctionModel(answer), ledger=ledger)  # fmt: skip
        result = await orchestrator.run_tasks(
            [Task(id="t1", title="Note", description="Note.", assignee="alice")]
        )
        task = result.tasks["t1"]
        if over:
            assert task.status is TaskStatus.FAILED
            assert "max_response_chars" in (task.error or "")
            assert RAN == [] and ledger.tool_calls(result.run_id) == []
        else:
            assert task.status is TaskStatus.COMPLETED, task.error
            assert RAN == [1_000]
