"""Resume looks up each interrupted tool call by its turn: work grows with the run.

A run stopped while its tasks' tool calls ran leaves ``tool_started`` events without a
result. On resume each such turn looked for its started call by scanning every started
call of the run: 400 tasks took 400,200 looks (the run squared). These tests count the
started records resume examines (not wall time, so they hold on a loaded machine).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._agents import replay
from clearance._core.vocabulary import EventKind
from clearance.models._base import ModelRequest, ToolCall
from clearance.testing import FunctionModel

RELEASED = asyncio.Event()


async def probe(n: int) -> str:
    """Probe one thing."""
    await RELEASED.wait()
    return f"probe {n}"


def ask(request: ModelRequest) -> Any:
    return ToolCall(id="c0", name="probe", arguments={"n": 0})


class _Looked(dict):  # type: ignore[type-arg]
    looked = 0

    def __getitem__(self, key: Any) -> Any:
        _Looked.looked += 1
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        _Looked.looked += 1
        return super().get(key, default)

    def items(self) -> Any:
        for pair in super().items():
            _Looked.looked += 1
            yield pair


async def looked(tmp_path, monkeypatch, tasks: int) -> int:
    """How many started records resume examined for ``tasks`` tasks stopped inside a tool."""
    RELEASED.clear()
    team = Team(agents=(Agent(name="w", instructions="Work.", tools=("probe",)),))
    db = f"sqlite:///{tmp_path / f'runs{tasks}.db'}"
    with RunLedger(db) as ledger:
        run = asyncio.create_task(
            Orchestrator(
                team, model=FunctionModel(ask), ledger=ledger, tools={"probe": probe},
                options=RunOptions(max_concurrency=tasks),
            ).run_tasks(
                [Task(id=f"t{i}", title=f"T{i}", description="d", assignee="w")
                 for i in range(tasks)]
            )
        )  # fmt: skip
        for _ in range(600):
            await asyncio.sleep(0.05)
            runs = ledger.list_runs(limit=1)
            started = runs and [
                e for e in ledger.events(runs[0].run_id) if e.kind == EventKind.TOOL_STARTED
            ]
            if started and len(started) == tasks:
                break
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        run_id = runs[0].run_id
    RELEASED.set()
    original = replay.ReplaySource.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._started = _Looked(self._started)

    monkeypatch.setattr(replay.ReplaySource, "__init__", counting)
    _Looked.looked = 0
    with RunLedger(db) as ledger:
        orchestrator = Orchestrator.from_run(
            run_id, ledger=ledger, model=FunctionModel(lambda r: "ok"), tools={"probe": probe}
        )
        await orchestrator.resume(run_id)
        reruns = [t for t in orchestrator._replay._turns.values() if t.rerun]
    # Every task's interrupted call was found under its recorded id (to run again or not).
    assert len(reruns) == tasks
    return _Looked.looked


async def test_resume_finds_each_interrupted_tool_call_without_a_scan_of_the_run(
    tmp_path, monkeypatch
):
    small = await looked(tmp_path, monkeypatch, 20)
    large = await looked(tmp_path, monkeypatch, 80)
    # Linear: four times the tasks, about four times the looks (a scan per turn: 16x).
    assert large < 6 * small, (small, large)
    assert large < 10 * 80, large
