"""``verify``'s check of cut-off clarification answers reads the run's events once.

For each clarification (or delegate) answer kept marked without an ``answer_marked`` event of
its subject, `check_marks` looked for the ``clarification`` (or ``offloaded``) event that
keeps it by scanning every event of the run: cut-off answers times events. A ledger whose
``answer_marked`` events were removed (a forger's, a defective writer's) made verify's work
grow with the square of the run. These tests count the events verify walks over (not wall
time, so they hold on a loaded machine) at two sizes: a real run of isolated tasks whose
coordinator's answers are cut off, a real SQLite ledger, the events removed by hand and the
hash chain rebuilt.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team, verify_run
from clearance._context import verify_facts
from clearance.models import ModelRequest, ModelResponse
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="worker", instructions="You review."),),
            coordinator=Agent(name="editor", instructions="You edit."))  # fmt: skip
CUT = "The first half of the answer, and then"


def reply(request: ModelRequest) -> str:
    subject, user = request.prompt.manifest.subject, request.prompt.messages[-1].content
    if subject.startswith("clarification:"):
        return CUT
    if subject.startswith("isolated:"):
        if "Clarification 1" in user:
            return "fine\nSTATUS: done"
        return "STATUS: needs_context\nQUESTION: Which version?"
    return "SYNTH"


class CutClarifications(FunctionModel):
    """`reply`, with each clarification's answer cut off at the output limit."""

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await super().request(request)
        if request.prompt.manifest.subject.startswith("clarification:"):
            return dataclasses.replace(response, finish_reason="length")
        return response


class _Counted(list):  # type: ignore[type-arg]
    walked = 0

    def __iter__(self) -> Any:
        for item in super().__iter__():
            _Counted.walked += 1
            yield item


async def walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rechain: Any, tasks: int
) -> tuple[int, int]:
    """Events verify walked over, and the run's events, for ``tasks`` cut-off clarifications."""
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    (root / "README.md").write_text("# Demo\n")
    path = tmp_path / f"runs{tasks}.db"
    with RunLedger(f"sqlite:///{path}") as ledger:
        result = await Orchestrator(
            TEAM, model=CutClarifications(reply), ledger=ledger,
            options=RunOptions(input_root=root, workspace_root=tmp_path / "ws"),
        ).run_tasks([
            Task(id=f"t{i}", title=f"T{i}", description="Review.", assignee="worker",
                 mode="isolated")
            for i in range(tasks)
        ])  # fmt: skip
        assert result.status == "completed", result.error
        marked = [e for e in ledger.events(result.run_id) if e.kind == "answer_marked"]
    assert len(marked) == tasks  # each clarification's cut-off answer, kept marked
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM events WHERE kind = 'answer_marked'")
    conn.close()
    rechain(path, result.run_id)

    original = verify_facts.RunFacts.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.events = _Counted(self.events)

    monkeypatch.setattr(verify_facts.RunFacts, "__init__", counting)
    _Counted.walked = 0
    with RunLedger(f"sqlite:///{path}") as ledger:
        report = verify_run(ledger, result.run_id)
        events = len(ledger.events(result.run_id))
    monkeypatch.undo()
    # Each cut-off answer is a finding: kept marked, its event gone.
    problems = [f for f in report.findings if "no answer_marked event is" in str(f)]
    assert len(problems) == tasks, [str(f) for f in report.findings]
    return _Counted.walked, events


async def test_verify_walks_the_events_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rechain: Any
) -> None:
    small, small_events = await walked(tmp_path, monkeypatch, rechain, 25)
    large, large_events = await walked(tmp_path, monkeypatch, rechain, 100)
    assert large_events >= 3.5 * small_events
    # Linear: four times the events, about four times the walk (a scan per answer: 16x).
    assert large < 5 * small, (small, large)
    assert large < 40 * large_events, (large, large_events)
