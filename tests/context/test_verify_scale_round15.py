"""`verify_run` walks each record a bounded number of times: work grows with the run.

Each prompt's items were checked by scanning every tool call (and every event, for hook
items) of the run: 8,000 tool calls took 56 s to verify. These tests count the records
verify walks over (not wall time, so they hold on a loaded machine) at two sizes.
"""

from __future__ import annotations

from typing import Any

from clearance import Agent, Orchestrator, RunLedger, Task, Team, verify_run
from clearance._context import verify_facts
from clearance.models._base import ModelRequest, ToolCall
from clearance.testing import FunctionModel

STEPS = 3


def probe(n: int) -> str:
    """Probe one thing."""
    return f"probe {n}"


def reply(request: ModelRequest) -> Any:
    done = sum(1 for m in request.prompt.messages if m.role == "tool")
    if done < STEPS:
        return ToolCall(id=f"c{done}", name="probe", arguments={"n": done})
    return f"done after {done}"


class _Counted(list):  # type: ignore[type-arg]
    walked = 0

    def __iter__(self) -> Any:
        for item in super().__iter__():
            _Counted.walked += 1
            yield item


class _CountedDict(dict):  # type: ignore[type-arg]
    def values(self) -> Any:
        return _Counted(super().values())


async def walked(tmp_path, monkeypatch, tasks: int) -> tuple[int, int]:
    """How many records verify walked over for a run of ``tasks`` tool-calling tasks."""
    team = Team(agents=(Agent(name="w", instructions="Work.", tools=("probe",)),))
    db = f"sqlite:///{tmp_path / f'runs{tasks}.db'}"
    with RunLedger(db) as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(reply), ledger=ledger, tools={"probe": probe}
        ).run_tasks(
            [Task(id=f"t{i}", title=f"T{i}", description="d", assignee="w") for i in range(tasks)]
        )
    original = verify_facts.RunFacts.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.events = _Counted(self.events)
        self.tool_calls = _CountedDict(self.tool_calls)

    monkeypatch.setattr(verify_facts.RunFacts, "__init__", counting)
    _Counted.walked = 0
    with RunLedger(db) as ledger:
        calls = ledger.calls
        monkeypatch.setattr(ledger, "calls", lambda *a, **k: _Counted(calls(*a, **k)))
        report = verify_run(ledger, result.run_id)
        recorded = len(ledger.tool_calls(result.run_id)) + len(ledger.events(result.run_id))
    assert report.ok, report.findings
    assert recorded >= tasks * STEPS
    return _Counted.walked, recorded


async def test_verify_walks_the_records_a_bounded_number_of_times(tmp_path, monkeypatch):
    small, small_recorded = await walked(tmp_path, monkeypatch, 20)
    large, large_recorded = await walked(tmp_path, monkeypatch, 80)
    assert large_recorded >= 3.5 * small_recorded
    # Linear: four times the records, about four times the walk (a scan per prompt: 16x).
    assert large < 5 * small, (small, large)
    assert large < 40 * large_recorded, (large, large_recorded)
