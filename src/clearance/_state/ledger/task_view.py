"""The tasks of a run as the ledger reads them: its recorded rows and its graph's unstarted tasks.

A task gets its first row when it first changes state (it starts, is skipped, fails, is
routed out, is reset by a resumed run); until then the run's recorded graph (``runs.graph``,
chained with the run's own record) holds everything its row would say. This module is the one
place that turns the two into the list every reader gets (`LedgerReads.tasks`), and that tells
the writer whether a state would read the same without a row (`reads_as`).

An unstarted task reads as it was when its run started: ``ready`` if it has no dependencies,
else ``pending``, with no result, error or times (what the ledger wrote for it at the start of
the run before rows were written lazily). Ledgers written that way read the same: their rows
cover every task of the graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from clearance._state.ledger.records import TaskRecord
from clearance._state.queue import TaskState, TaskStatus

__all__ = ["merge_tasks", "reads_as", "unstarted_status"]


def unstarted_status(depends_on: Sequence[Any]) -> TaskStatus:
    """How a graph task with no row reads: ``ready`` without dependencies, else ``pending``."""
    return TaskStatus.PENDING if depends_on else TaskStatus.READY


def merge_tasks(
    run_id: str, graph: Sequence[Any] | None, records: Iterable[TaskRecord]
) -> list[TaskRecord]:
    """Every task of a run: recorded ones as recorded, the graph's others unstarted.

    A run with no task row yet (a plan-only run, a run not started) reads as having no tasks,
    as before rows were written lazily. Otherwise the tasks come in graph order, each its row
    or, without one, its unstarted record; rows of tasks that are not in the graph (a record
    ``verify`` reports) follow, in the order recorded.

    Args:
        run_id: The run's id.
        graph: The run's recorded graph (`TaskGraph.to_dict` form), or ``None``.
        records: The run's task rows, in the order first recorded.

    Returns:
        One record per task, as described.
    """
    rows = {r.task_id: r for r in records}
    if not rows or not graph:
        return list(rows.values())
    merged: dict[str, TaskRecord] = {}
    for entry in graph:
        task_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(task_id, str) or task_id in merged:
            continue  # a damaged graph: its run record fails its chain check in ``verify``
        merged[task_id] = rows.get(task_id) or _unstarted(run_id, task_id, entry)
    merged.update((task_id, r) for task_id, r in rows.items() if task_id not in merged)
    return list(merged.values())


def _unstarted(run_id: str, task_id: str, entry: Mapping[str, Any]) -> TaskRecord:
    """The record of a graph task that has no row (see the module docstring)."""
    depends_on = tuple(str(d) for d in entry.get("depends_on") or ())
    return TaskRecord(
        run_id=run_id,
        task_id=task_id,
        title=str(entry.get("title", "")),
        assignee=str(entry.get("assignee", "")),
        depends_on=depends_on,
        memory_scope=str(entry.get("memory_scope", "dependencies")),
        status=str(unstarted_status(depends_on)),
        result=None,
        error=None,
        started_at=None,
        finished_at=None,
    )


def reads_as(state: TaskState, record: TaskRecord | None) -> bool:
    """Whether the ledger already reads ``state``, so recording it would change nothing.

    Args:
        state: A task's state (its task is in the run's recorded graph).
        record: What the ledger reads for the task (`LedgerReads.tasks`), or ``None`` when
            it has no record of it: then the state must read as unstarted.
    """
    if record is None:
        return (
            state.status is unstarted_status(state.task.depends_on)
            and state.result is None
            and state.error is None
            and state.started_at is None
            and state.finished_at is None
        )
    return (
        record.status == state.status
        and record.result == state.result
        and record.error == state.error
        and record.started_at == state.started_at
        and record.finished_at == state.finished_at
    )
