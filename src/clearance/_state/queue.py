"""`TaskQueue`: the run-time state of a task graph."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import GraphError
from clearance._core.reasons import bounded_reason
from clearance._core.routing import ROUTED_PREFIX
from clearance._core.spec import Task
from clearance._state.graph import TaskGraph

__all__ = ["TaskQueue", "TaskState", "TaskStatus"]


class TaskStatus(StrEnum):
    """Where a task is in its life.

    ``pending`` → ``ready`` (all dependencies completed) → ``running`` → ``completed`` or
    ``failed``; a task whose dependency failed or was skipped becomes ``skipped``. A running
    task whose run was stopped (Ctrl-C, cancellation) becomes ``interrupted``; resuming the
    run runs it again.
    """

    PENDING = "pending"
    READY = "ready"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"

    @property
    def is_final(self) -> bool:
        """Whether the status can no longer change."""
        return self in _FINAL


_FINAL = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.SKIPPED})
"""The statuses that can no longer change (`TaskStatus.is_final`)."""


class TaskState(NamedTuple):
    """A snapshot of one task's run-time state (immutable).

    A named tuple rather than a frozen dataclass: the queue makes one at each change of
    state (three or more per task), and a frozen dataclass pays for an
    ``object.__setattr__`` per field.

    Attributes:
        task: The task spec.
        status: Its current status.
        result: The result text once ``completed``, else ``None``.
        error: Why it failed or was skipped, else ``None``.
        started_at: When it started running (UTC), else ``None``.
        finished_at: When it reached a final status (UTC), else ``None``.
    """

    task: Task
    status: TaskStatus
    result: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class TaskQueue:
    """Run-time state of a `TaskGraph`: one `TaskState` per task.

    A task is ``ready`` once every dependency is ``completed``. Failing a task marks every
    transitive dependent ``skipped``; independent branches are untouched. Results of
    completed tasks are never overwritten or erased.

    Args:
        graph: The validated graph.
        clock: Source of timestamps (UTC).
        completed: Results of tasks that already completed (a resumed run), by task id; they
            start ``completed`` and are never run again. ``None`` means none.

    Raises:
        GraphError: ``completed`` names a task that is not in the graph.
    """

    def __init__(
        self,
        graph: TaskGraph,
        *,
        clock: Clock = utc_now,
        completed: Mapping[str, str] | None = None,
    ):
        self.graph = graph
        self._clock = clock
        self._states: dict[str, TaskState] = {}
        done = dict(completed or {})
        unknown = sorted(set(done) - {t.id for t in graph})
        if unknown:
            raise GraphError(f"completed results for unknown task(s): {', '.join(unknown)}")
        # Ids of the ``ready`` tasks, kept up to date by `_replace`, so `ready` does not scan
        # every task (the orchestrator asks after each completion); and a heap of
        # ``(graph position, id)`` over them, so the first few come out in graph order without
        # sorting them all. A task that left ``ready`` stays in the heap until `ready` meets it.
        self._ready: set[str] = set()
        self._ready_heap: list[tuple[int, str]] = []
        # How many dependencies of each task are not ``completed`` yet, so `complete` finds the
        # dependents it makes ready without looking at their other dependencies.
        self._unmet: dict[str, int] = {}
        self.routed_out: tuple[str, ...] = ()  # see `complete`
        self.routed: set[str] = set()  # every task skipped by a condition, and its dependents
        for task in graph:
            self._unmet[task.id] = sum(d not in done for d in task.depends_on)
            if task.id in done:
                status = TaskStatus.COMPLETED
            elif not self._unmet[task.id]:
                status = TaskStatus.READY
            else:
                status = TaskStatus.PENDING
            self._states[task.id] = TaskState(task, status, done.get(task.id))  # by position
            if status is TaskStatus.READY:
                self._ready.add(task.id)
                self._ready_heap.append((graph.position(task.id), task.id))
        heapq.heapify(self._ready_heap)
        self._route_kept(done)

    def _route_kept(self, done: Mapping[str, str]) -> None:
        """Skip what the conditions on kept results (a resumed run's) route out."""
        now: datetime | None = None  # read the clock only when a task is skipped
        for task in self.graph:
            for condition in task.when:
                state = self._states[task.id]
                if condition.task in done and not state.status.is_final:
                    why = condition.unmet(done[condition.task])
                    if why is not None:
                        now = now or self._clock()
                        self._skip(task.id, ROUTED_PREFIX + why, now)
                        self.routed.update(self._cascade([task.id], task.id, now, (task.id,)))

    def get(self, task_id: str) -> TaskState:
        """Return the current state of a task.

        Raises:
            KeyError: If the graph has no such task.
        """
        return self._states[task_id]

    def states(self) -> tuple[TaskState, ...]:
        """Every task's state, in graph order."""
        return tuple(self._states.values())

    def ready(self, limit: int | None = None) -> tuple[Task, ...]:
        """Tasks that may start now, in graph order.

        Args:
            limit: Return only the first ``limit`` of them; ``None`` for all. Costs
                ``O(limit log n)`` for ``n`` ready tasks, not a sort of them all.
        """
        if limit is None:
            ids = sorted(self._ready, key=self.graph.position)
        else:
            ids = []
            heap, ready = self._ready_heap, self._ready
            while heap and len(ids) < limit:
                entry = heapq.heappop(heap)
                if entry[1] in ready and (not ids or ids[-1] != entry[1]):
                    ids.append(entry[1])
            for task_id in ids:  # still ready: back into the heap
                heapq.heappush(heap, (self.graph.position(task_id), task_id))
        return tuple(self._states[task_id].task for task_id in ids)

    def with_status(self, status: TaskStatus) -> tuple[TaskState, ...]:
        """States of the tasks that currently have ``status``, in graph order."""
        return tuple(s for s in self._states.values() if s.status is status)

    def is_finished(self) -> bool:
        """Whether every task has a final status."""
        return all(s.status.is_final for s in self._states.values())

    def _replace(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        result: str | None = None,
        error: str | None = None,
        started_at: datetime | None = None,
        finished_at: datetime | None = None,
    ) -> None:
        """Give a task a new state with ``status``; a field left ``None`` keeps its value."""
        old = self._states[task_id]
        # By position, in the order of `TaskState`'s fields: a named tuple made from
        # keywords costs nearly twice as much, and a task changes state three times or more.
        state = TaskState(
            old.task,
            status,
            old.result if result is None else result,
            old.error if error is None else error,
            old.started_at if started_at is None else started_at,
            old.finished_at if finished_at is None else finished_at,
        )
        self._states[task_id] = state
        if state.status is TaskStatus.READY:
            if task_id not in self._ready:
                self._ready.add(task_id)
                heapq.heappush(self._ready_heap, (self.graph.position(task_id), task_id))
        else:
            self._ready.discard(task_id)

    def _expect(self, task_id: str, *allowed: TaskStatus) -> None:
        status = self._states[task_id].status
        if status not in allowed:
            wanted = " or ".join(allowed)
            raise GraphError(f"task {task_id!r} is {status}, expected {wanted}")

    def start(self, task_id: str) -> None:
        """Mark a ready task ``running``.

        Raises:
            GraphError: If the task is not ``ready``.
        """
        self._expect(task_id, TaskStatus.READY)
        self._replace(task_id, status=TaskStatus.RUNNING, started_at=self._clock())

    def complete(self, task_id: str, result: str) -> tuple[str, ...]:
        """Record a running task's result; return the ids of tasks that became ready.

        A dependent whose condition on this task (`Task.when`) does not hold is ``skipped``
        with the reason, and its own dependents as after a failure; the ids skipped so are
        in ``routed_out`` afterwards, in topological order.

        Raises:
            GraphError: If the task is not ``running``.
        """
        self._expect(task_id, TaskStatus.RUNNING)
        now = self._clock()
        self._replace(task_id, status=TaskStatus.COMPLETED, result=result, finished_at=now)
        newly_ready = []
        unmet = self._unmet
        self.routed_out = ()
        for dependent in self.graph.dependents(task_id):
            if (why := self._unmet_condition(dependent, task_id, result)) is not None:
                if not self._states[dependent].status.is_final:
                    self._skip(dependent, ROUTED_PREFIX + why, now)
                    # Every dependent routed out by this result, not only the last one's.
                    routed = self._cascade([dependent], dependent, now, (dependent,))
                    self.routed_out += routed
                    self.routed.update(routed)
                continue
            unmet[dependent] -= 1
            if not unmet[dependent] and self._states[dependent].status is TaskStatus.PENDING:
                self._replace(dependent, status=TaskStatus.READY)
                newly_ready.append(dependent)
        if len(self.routed_out) > 1:  # several dependents' cascades: one topological order
            order = {t: i for i, t in enumerate(self.graph.topological_order())}
            unique = dict.fromkeys(self.routed_out)  # a task reached by two cascades, once
            self.routed_out = tuple(sorted(unique, key=order.__getitem__))
        return tuple(newly_ready)

    def fail(self, task_id: str, error: str) -> tuple[str, ...]:
        """Mark a task ``failed`` and its transitive dependents ``skipped``.

        A dependent whose ``after_failure`` is ``"proceed"`` is not skipped: the failed (or
        skipped) dependency counts as finished for it, and it becomes ``ready`` once all its
        dependencies have finished; its own dependents are then unaffected.

        Args:
            task_id: A ``ready`` or ``running`` task.
            error: Why it failed, in one line (kept to `bounded_reason`).

        Returns:
            The ids of the tasks newly skipped, in topological order.

        Raises:
            GraphError: If the task is not ``ready`` or ``running``.
        """
        self._expect(task_id, TaskStatus.READY, TaskStatus.RUNNING)
        now = self._clock()
        self._replace(
            task_id, status=TaskStatus.FAILED, error=bounded_reason(error), finished_at=now
        )
        return self._cascade([task_id], task_id, now)

    def _skip(self, task_id: str, reason: str, now: datetime) -> None:
        self._replace(task_id, status=TaskStatus.SKIPPED, error=reason, finished_at=now)

    def _unmet_condition(self, dependent: str, task_id: str, result: str) -> str | None:
        """Why ``dependent``'s condition on ``task_id`` does not hold (``None``: it holds)."""
        for condition in self._states[dependent].task.when:
            if condition.task == task_id:
                return condition.unmet(result)
        return None

    def _cascade(
        self, settled: list[str], cause: str, now: datetime, skipped_first: tuple[str, ...] = ()
    ) -> tuple[str, ...]:
        """Skip the transitive dependents of ``settled`` (finished without a result)."""
        skipped: list[str] = list(skipped_first)
        task_id = cause
        while settled:
            done = settled.pop()
            for dependent in self.graph.dependents(done):
                state = self._states[dependent]
                if state.status.is_final:
                    continue
                if state.task.after_failure == "proceed":
                    self._unmet[dependent] -= 1
                    if not self._unmet[dependent] and state.status is TaskStatus.PENDING:
                        self._replace(dependent, status=TaskStatus.READY)
                    continue
                what = (
                    "failed" if self._states[task_id].status is TaskStatus.FAILED else "was skipped"
                )
                self._skip(dependent, f"skipped: dependency {task_id!r} {what}", now)
                skipped.append(dependent)
                settled.append(dependent)
        order = {t: i for i, t in enumerate(self.graph.topological_order())}
        return tuple(sorted(skipped, key=order.__getitem__))

    def interrupt(self, task_id: str) -> None:
        """Mark a running task ``interrupted`` (its run stopped before it finished).

        Raises:
            GraphError: If the task is not ``running``.
        """
        self._expect(task_id, TaskStatus.RUNNING)
        self._replace(
            task_id,
            status=TaskStatus.INTERRUPTED,
            error="interrupted before it finished",
            finished_at=self._clock(),
        )
