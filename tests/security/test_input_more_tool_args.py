"""Lone surrogates in a model's tool-call arguments: a tool error back to the model, no crash.

A model's JSON may hold ``"\\ud800"``, which decodes to a lone surrogate: text no UTF-8
encoder accepts (the database drivers, the token counter, the ledger's hashes). The run must
go on: the model is told its arguments were invalid, and the task completes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clearance import Agent, ContextStore, Orchestrator, RunLedger, Task, TaskStatus, Team
from clearance._agents.tools import Tool
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

COORD = Agent(name="lead", instructions="You lead.")
LONE = json.loads('"k\\ud800"')  # what a model's '{"key": "k\\ud800"}' decodes to


def echo(text: str) -> str:
    """Echo the text."""
    return f"echo {text}"


def scripted(calls: list[ToolCall | str]) -> FunctionModel:
    script = iter(calls)

    def answer(request: ModelRequest) -> ToolCall | str:
        if request.prompt.manifest.subject == "synthesis":
            return "SYNTH"
        return next(script)

    return FunctionModel(answer)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("store_set", {"namespace": "notes", "key": LONE, "value": "v"}),
        ("store_set", {"namespace": "notes", "key": "k", "value": LONE}),
        ("store_get", {"namespace": "notes", "key": LONE}),
        ("store_query", {"namespace": "notes", "prefix": LONE}),
        ("store_get", {"namespace": LONE, "key": "k"}),
        ("echo", {"text": LONE}),
    ],
)
async def test_lone_surrogate_in_tool_arguments_is_a_tool_error(
    tmp_path: Path, tool: str, arguments: dict[str, str]
) -> None:
    alice = Agent(
        name="alice",
        instructions="You are Alice.",
        tools=(tool,),
        store_grants={"notes": "read_write"},
    )
    model = scripted([ToolCall(id="x", name=tool, arguments=arguments), "FINAL"])
    with (
        RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger,
        ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as store,
    ):
        orch = Orchestrator(
            Team(agents=(alice,), coordinator=COORD),
            model=model,
            ledger=ledger,
            store=store,
            tools=[Tool.from_function(echo)],
        )
        work = Task(id="t1", title="W", description="Do.", assignee="alice")
        result = await orch.run_tasks([work])
        assert result.tasks["t1"].status == TaskStatus.COMPLETED, result.tasks["t1"]
        assert result.tasks["t1"].result == "FINAL"
        (record,) = ledger.tool_calls(result.run_id)
        assert record.is_error
        assert "not valid UTF-8" in record.result, record.result
        assert verify_run(ledger, result.run_id).ok
    # The model saw the error as the tool's answer on its next step.
    second = [r for r in model.requests if r.prompt.manifest.subject == "task:t1"][1]
    assert "not valid UTF-8" in second.prompt.text
