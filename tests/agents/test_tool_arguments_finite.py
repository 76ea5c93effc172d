"""A model's NaN or infinite number never reaches a tool: a one-line tool error instead.

JSON has no NaN or infinity, but Python's parser (and so a provider's tool-call arguments)
reads ``NaN`` and ``Infinity``. A user or MCP tool declared with a ``float`` parameter
would get a value its schema (``"type": "number"``) cannot describe and that every
comparison answers false to (``amount > limit``), so a guard in the tool is skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, TaskStatus, Team
from clearance._agents.tools import Tool
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

COORD = Agent(name="lead", instructions="You lead.")
RAN: list[object] = []


def pay(amount: float, split: list[float] | None = None) -> str:
    """Pay an amount, at most 100."""
    RAN.append((amount, split))
    if amount > 100:
        raise ValueError("too much")
    return f"paid {amount}"


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"amount": float("nan")}, "amount"),
        ({"amount": float("inf")}, "amount"),
        ({"amount": float("-inf")}, "amount"),
        ({"amount": 1.0, "split": [0.5, float("nan")]}, "split[1]"),
    ],
)
async def test_a_non_finite_number_is_a_tool_error_and_the_tool_never_runs(
    tmp_path: Path, arguments: dict[str, object], where: str
) -> None:
    RAN.clear()
    seen: list[str] = []

    def answer(request: ModelRequest) -> object:
        manifest = request.prompt.manifest
        if manifest.subject == "synthesis":
            return "SYNTH"
        if not any(o.startswith("tool:") for o in manifest.origins):
            return ToolCall(id="c", name="pay", arguments=arguments)
        seen.append(request.prompt.messages[-1].content)
        return "done"

    alice = Agent(name="alice", instructions="A.", tools=(pay,))
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(Team(agents=(alice,), coordinator=COORD),
                                    model=FunctionModel(answer), ledger=ledger)  # fmt: skip
        result = await orchestrator.run_tasks(
            [Task(id="t1", title="Pay", description="Pay.", assignee="alice")]
        )
        assert result.tasks["t1"].status is TaskStatus.COMPLETED, result.tasks["t1"].error
        (record,) = ledger.tool_calls(result.run_id)
    assert RAN == []
    expected = (
        f"error: invalid arguments: {where} is not a finite number (NaN or infinity); call "
        "again with a number"
    )
    assert record.is_error and record.result == expected
    assert expected in seen[0]


async def test_a_finite_number_still_reaches_the_tool() -> None:
    RAN.clear()
    output = await Tool.from_function(pay).call({"amount": 2.5, "split": [1.0, 1.5]})
    assert (output.content, output.is_error, RAN) == ("paid 2.5", False, [(2.5, [1.0, 1.5])])
