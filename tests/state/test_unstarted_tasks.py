"""A task gets its first ledger row when it first changes state; `tasks` reads the rest.

Every reader sees what it saw when the ledger wrote a row per task at the start of a run:
all the graph's tasks, in graph order, an unstarted one ``ready`` (no dependencies) or
``pending`` with no result, error or times.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clearance import Agent, Orchestrator, Task, Team
from clearance._context.verify_chain import ChainedRecord, chained_records
from clearance._state.graph import TaskGraph
from clearance._state.ledger import RunLedger, TaskRecord
from clearance._state.ledger.task_view import merge_tasks, reads_as
from clearance._state.queue import TaskQueue, TaskStatus
from clearance.testing import FunctionModel

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
GRAPH = TaskGraph(
    [
        Task(id="a", title="Research", description="Find.", assignee="researcher"),
        Task(id="x", title="Aside", description="Note.", assignee="writer", memory_scope="all"),
        Task(id="b", title="Write", description="Write.", assignee="writer", depends_on=("a",)),
        Task(id="c", title="Edit", description="Edit.", assignee="writer", depends_on=("b", "x")),
    ]
)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[RunLedger]:
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as opened:
        yield opened


def chained(run_id: str, ledger: RunLedger) -> list[ChainedRecord]:
    """Every record the run's chain holds (a group entry's each)."""
    records, problems = chained_records(ledger.chain_entries(run_id))
    assert problems == []
    return records


def fields(records: list[TaskRecord]) -> list[tuple[object, ...]]:
    return [
        (t.task_id, t.title, t.assignee, t.depends_on, t.memory_scope, t.status, t.result,
         t.error, t.started_at, t.finished_at)
        for t in records
    ]  # fmt: skip


def test_unstarted_tasks_read_as_the_rows_written_at_the_start_of_a_run(ledger):
    """The same history recorded eagerly (every task at start) and lazily reads the same."""
    for run_id, eager in (("run_eager", True), ("run_lazy", False)):
        queue = TaskQueue(GRAPH, clock=lambda: T0)
        ledger.start_run(run_id=run_id, team="t", goal=None, graph=GRAPH.to_dict())
        if eager:
            ledger.record_tasks(run_id, queue.states())
        queue.start("x")  # graph order is not start order
        ledger.record_task(run_id, queue.get("x"))
        queue.complete("x", "noted")
        ledger.record_task(run_id, queue.get("x"))
        queue.start("a")
        ledger.record_task(run_id, queue.get("a"))
    eager, lazy = ledger.tasks("run_eager"), ledger.tasks("run_lazy")
    assert fields(lazy) == fields(eager)
    assert [(t.task_id, t.status) for t in lazy] == [
        ("a", "running"), ("x", "completed"), ("b", "pending"), ("c", "pending"),
    ]  # fmt: skip
    assert lazy[2] == TaskRecord(
        run_id="run_lazy", task_id="b", title="Write", assignee="writer", depends_on=("a",),
        memory_scope="dependencies", status="pending", result=None, error=None,
        started_at=None, finished_at=None,
    )  # fmt: skip
    # Only the tasks that changed have rows and chain entries.
    assert [r["task_id"] for r in ledger.record_rows("run_lazy")["task"]] == ["x", "a"]
    assert {r.subject for r in chained("run_lazy", ledger) if r.kind == "task"} == {"x", "a"}


def test_a_task_without_dependencies_reads_ready_as_its_first_row_did(ledger):
    ledger.start_run(run_id="run_1", team="t", goal=None, graph=GRAPH.to_dict())
    queue = TaskQueue(GRAPH)
    queue.start("x")
    ledger.record_task("run_1", queue.get("x"))
    assert [(t.task_id, t.status) for t in ledger.tasks("run_1")] == [
        ("a", "ready"), ("x", "running"), ("b", "pending"), ("c", "pending"),
    ]  # fmt: skip


def test_a_run_none_of_whose_tasks_changed_has_no_tasks_as_before(ledger):
    """A plan-only run (graph, no task run) read no tasks, and still does."""
    ledger.start_run(run_id="run_1", team="t", goal="g", graph=None)
    ledger.set_graph("run_1", GRAPH.to_dict())
    assert ledger.tasks("run_1") == []


def test_rows_of_a_run_without_a_graph_read_in_the_order_recorded(ledger):
    ledger.start_run(run_id="run_1", team="t", goal=None, graph=None)
    queue = TaskQueue(GRAPH)
    ledger.record_task("run_1", queue.get("c"))
    ledger.record_task("run_1", queue.get("a"))
    assert [t.task_id for t in ledger.tasks("run_1")] == ["c", "a"]


def test_a_row_of_a_task_not_in_the_graph_follows_the_graph_tasks():
    rows = [
        TaskRecord(run_id="r", task_id=i, title=i, assignee="w", depends_on=(), memory_scope="all",
                   status="running", result=None, error=None, started_at=None, finished_at=None)
        for i in ("z", "b")
    ]  # fmt: skip
    merged = merge_tasks("r", GRAPH.to_dict(), rows)
    assert [t.task_id for t in merged] == ["a", "x", "b", "c", "z"]
    assert merged[2] is rows[1]


def test_a_graph_set_after_tasks_were_recorded_orders_them(ledger):
    ledger.start_run(run_id="run_1", team="t", goal="g", graph=None)
    queue = TaskQueue(GRAPH)
    queue.start("x")
    ledger.record_task("run_1", queue.get("x"))
    assert [t.task_id for t in ledger.tasks("run_1")] == ["x"]
    ledger.set_graph("run_1", GRAPH.to_dict())
    assert [t.task_id for t in ledger.tasks("run_1")] == ["a", "x", "b", "c"]


def test_reads_as_compares_a_state_with_what_the_ledger_reads():
    queue = TaskQueue(GRAPH)
    assert all(reads_as(s, None) for s in queue.states())  # a new run: nothing to write
    queue.start("a")
    assert not reads_as(queue.get("a"), None)
    record = TaskRecord(
        run_id="r", task_id="a", title="Research", assignee="researcher", depends_on=(),
        memory_scope="dependencies", status="failed", result=None, error="boom",
        started_at=None, finished_at=None,
    )  # fmt: skip
    fresh = TaskQueue(GRAPH).get("a")
    assert not reads_as(fresh, record)  # a resumed run resets a failed task: written
    assert reads_as(fresh, replace(record, status=TaskStatus.READY.value, error=None))


TEAM = Team(
    agents=(Agent(name="researcher", instructions="R."), Agent(name="writer", instructions="W."))
)


def test_a_run_writes_two_task_rows_per_task_not_three(tmp_path):
    """Started, then completed: no row (and no chain entry) for the unstarted state."""
    db = tmp_path / "runs.db"

    async def run():
        with RunLedger(f"sqlite:///{db}") as ledger:
            orch = Orchestrator(TEAM, model=FunctionModel(lambda r: "ok"), ledger=ledger)
            return await orch.run_tasks(GRAPH)

    run_id = asyncio.run(run()).run_id
    with RunLedger(f"sqlite:///{db}", read_only=True) as ledger:
        tasks = [r.subject for r in chained(run_id, ledger) if r.kind == "task"]
        assert sorted(tasks) == sorted(["a", "x", "b", "c"] * 2)
        assert [(t.task_id, t.status) for t in ledger.tasks(run_id)] == [
            (i, "completed") for i in ("a", "x", "b", "c")
        ]
