"""`TaskGraph`: a validated directed acyclic graph of tasks."""

from __future__ import annotations

import graphlib
import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from clearance._core.errors import (
    CycleError,
    DuplicateTaskError,
    GraphError,
    SelfDependencyError,
    UnknownDependencyError,
)
from clearance._core.prompt import canonical_json_sha256
from clearance._core.review import Review
from clearance._core.routing import EdgeCondition
from clearance._core.spec import FanOut, Task

__all__ = ["TaskGraph", "tasks_sha256"]


class TaskGraph:
    """A validated DAG of tasks, in the order they were given.

    Validation runs once, in the constructor, and checks in this order: duplicate ids,
    self-dependencies, unknown dependencies, cycles. Each error names the offending ids.

    Args:
        tasks: The tasks; ``depends_on`` ids must name tasks in the same collection.

    Raises:
        DuplicateTaskError: Two tasks share an id (all duplicated ids are named).
        SelfDependencyError: A task depends on itself.
        UnknownDependencyError: A task depends on an id not in the graph.
        GraphError: A condition (`EdgeCondition`) is on a task without a structured result.
        CycleError: The dependencies form a cycle; ``cycle`` lists it (``a -> b -> a``).
    """

    __slots__ = ("_dependents", "_order", "_position", "_tasks")

    def __init__(self, tasks: Iterable[Task]):
        task_list = list(tasks)
        counts = Counter(t.id for t in task_list)
        duplicates = [task_id for task_id, n in counts.items() if n > 1]
        if duplicates:
            raise DuplicateTaskError(duplicates)
        self._tasks: dict[str, Task] = {t.id: t for t in task_list}
        self._position = {task_id: i for i, task_id in enumerate(self._tasks)}
        for task in task_list:
            for dep in task.depends_on:
                if dep == task.id:
                    raise SelfDependencyError(task.id)
                if dep not in self._tasks:
                    raise UnknownDependencyError(task.id, dep)
            for condition in task.when:  # a condition reads a structured result
                upstream = self._tasks[condition.task]
                if upstream.output_schema is None and upstream.run is None:
                    raise GraphError(
                        f"task {task.id!r} has a condition on {upstream.id!r}, whose result "
                        f"is free text: give {upstream.id!r} an output_schema"
                    )
        self._dependents: dict[str, list[str]] = {t.id: [] for t in task_list}
        for task in task_list:
            for dep in task.depends_on:
                self._dependents[dep].append(task.id)
        self._order = self._topological_order()

    def _topological_order(self) -> tuple[str, ...]:
        """Order tasks so each comes after its dependencies; raise `CycleError` on a cycle.

        Kahn's algorithm: of the tasks ready at each step, the one given first goes first, so
        tasks given in dependency order keep that order. A cycle leaves tasks unordered;
        `graphlib` then names it.
        """
        position, dependents = self._position, self._dependents
        waiting = {t.id: len(t.depends_on) for t in self._tasks.values()}
        # In the order given: ascending positions are already a heap.
        ready = [(position[task_id], task_id) for task_id, n in waiting.items() if not n]
        order: list[str] = []
        while ready:
            _, task_id = heapq.heappop(ready)
            order.append(task_id)
            for dependent in dependents[task_id]:
                waiting[dependent] -= 1
                if not waiting[dependent]:
                    heapq.heappush(ready, (position[dependent], dependent))
        if len(order) < len(waiting):
            self._raise_cycle()
        return tuple(order)

    def _raise_cycle(self) -> None:
        """Raise `CycleError` naming a cycle of the graph (found by `graphlib`)."""
        sorter = graphlib.TopologicalSorter({t.id: t.depends_on for t in self._tasks.values()})
        try:
            sorter.prepare()
        except graphlib.CycleError as exc:
            # graphlib lists each node before the ones that depend on it: runs-before order.
            raise CycleError(list(exc.args[1])) from None
        raise AssertionError("unreachable: the graph has a cycle")  # pragma: no cover

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks.values())

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def __repr__(self) -> str:
        return f"TaskGraph({len(self)} tasks)"

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The tasks in the order they were given."""
        return tuple(self._tasks.values())

    def get(self, task_id: str) -> Task:
        """Return the task with this id.

        Raises:
            KeyError: If the graph has no such task.
        """
        return self._tasks[task_id]

    def position(self, task_id: str) -> int:
        """Index of the task in the order the tasks were given (graph order).

        Raises:
            KeyError: If the graph has no such task.
        """
        return self._position[task_id]

    def topological_order(self) -> tuple[str, ...]:
        """Task ids ordered so that every task comes after all of its dependencies."""
        return self._order

    def dependents(self, task_id: str) -> tuple[str, ...]:
        """Ids of the tasks that depend directly on ``task_id``."""
        return tuple(self._dependents[task_id])

    def ancestors(self, task_id: str) -> tuple[str, ...]:
        """Ids of every task ``task_id`` depends on, directly or not, in topological order."""
        seen: set[str] = set()
        stack = list(self._tasks[task_id].depends_on)
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(self._tasks[current].depends_on)
        return tuple(t for t in self._order if t in seen)

    def descendants(self, task_id: str) -> tuple[str, ...]:
        """Ids of every task that depends on ``task_id``, directly or not, in topological order."""
        seen: set[str] = set()
        stack = list(self._dependents[task_id])
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(self._dependents[current])
        return tuple(t for t in self._order if t in seen)

    def to_dict(self) -> list[dict[str, Any]]:
        """The graph as JSON-ready data: one mapping per task, in the given order."""
        return [_task_dict(t) for t in self._tasks.values()]

    @classmethod
    def from_dict(cls, data: Iterable[dict[str, Any]]) -> TaskGraph:
        """Rebuild a graph from `to_dict` output (validated again)."""
        return cls(
            Task(
                id=d["id"],
                title=d["title"],
                description=d["description"],
                assignee=d["assignee"],
                depends_on=tuple(d.get("depends_on", ())),
                memory_scope=d.get("memory_scope", "dependencies"),
                files=tuple(d.get("files", ())),
                output_schema=d.get("output_schema"),
                mode=d.get("mode", "standard"),
                constraints=tuple(d.get("constraints", ())),
                fan_out=FanOut(agent=d["fan_out"]["agent"], goals=tuple(d["fan_out"]["goals"]))
                if d.get("fan_out")
                else None,
                run=d.get("run"),
                after_failure=d.get("after_failure", "skip"),
                approval=d.get("approval", "none"),
                when=tuple(EdgeCondition.of(c["task"], c["when"]) for c in d.get("when", ())),
                review=Review.from_dict(d["review"]) if d.get("review") else None,
            )
            for d in data
        )


def _task_dict(task: Task) -> dict[str, Any]:
    """One task of `TaskGraph.to_dict`; the isolated-task fields only when set."""
    data: dict[str, Any] = {
        "id": task.id,
        "title": task.title,
        "description": task.description,
        "assignee": task.assignee,
        "depends_on": list(task.depends_on),
        "memory_scope": task.memory_scope,
        "files": list(task.files),
        "output_schema": task.output_schema,
    }
    if task.mode != "standard":
        data["mode"] = task.mode
    if task.constraints:
        data["constraints"] = list(task.constraints)
    if task.fan_out is not None:
        data["fan_out"] = task.fan_out.to_dict()
    if task.run is not None:
        data["run"] = task.run
    if task.after_failure != "skip":
        data["after_failure"] = task.after_failure
    if task.approval != "none":
        data["approval"] = task.approval
    if task.review is not None:
        data["review"] = task.review.to_dict()
    if task.when:
        data["when"] = [{"task": c.task, "when": c.when()} for c in task.when]
    return data


def tasks_sha256(tasks: TaskGraph | Sequence[Mapping[str, Any]]) -> str:
    """The hash of a graph's tasks in their recorded form (`TaskGraph.to_dict`).

    ``tasks`` is a graph, or its recorded form as read back from a ledger (a run's ``graph``):
    both give the same hash, so ``clearance verify`` checks a ``plan`` event against the
    recorded graph.
    """
    data = tasks.to_dict() if isinstance(tasks, TaskGraph) else list(tasks)
    return canonical_json_sha256(data)
