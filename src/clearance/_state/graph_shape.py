"""The shape of a task graph that bounds its makespan: levels, width and critical path.

A task's level is the length of its longest chain of dependencies (a task with none is at
level 0). The critical path is the number of levels; the width is the most tasks on one
level. With ``max_concurrency`` below the width, tasks that could run together wait for a
free slot, and the makespan grows past the critical path: with equal task times, a level of
``w`` tasks takes ``ceil(w / max_concurrency)`` rounds (a list-scheduling bound; Graham,
"Bounds on multiprocessing timing anomalies", 1969).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["GraphShape", "concurrency_notice", "graph_shape"]


class _Node(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def depends_on(self) -> Sequence[str]: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphShape:
    """Levels of a task graph.

    Attributes:
        level_widths: Tasks per level, level 0 first.
    """

    level_widths: tuple[int, ...]

    @property
    def critical_path(self) -> int:
        """Tasks on the longest dependency chain (the number of levels; 0 for no tasks)."""
        return len(self.level_widths)

    @property
    def width(self) -> int:
        """Most tasks on one level (0 for no tasks)."""
        return max(self.level_widths, default=0)

    def rounds(self, max_concurrency: int) -> int:
        """Rounds of equal-length tasks, level by level, ``max_concurrency`` at a time."""
        return sum(math.ceil(w / max_concurrency) for w in self.level_widths)


def graph_shape(tasks: Iterable[_Node]) -> GraphShape:
    """The `GraphShape` of validated tasks (dependencies known, no cycle).

    Args:
        tasks: Tasks with ``id`` and ``depends_on``, as a `TaskGraph` holds them.

    Returns:
        Tasks per level. Dependencies on ids not among ``tasks`` are ignored, and so is a
        dependency that closes a cycle (validation refuses those first).
    """
    by_id = {t.id: t for t in tasks}
    level: dict[str, int] = {}
    for start in by_id:  # iterative depth-first: a 10,000-long chain must not recurse
        stack, open_ids = [start], {start}
        while stack:
            task_id = stack[-1]
            if task_id in level:
                stack.pop()
                continue
            # (A dependency already open would be a cycle: ignored, so this always ends.)
            deps = [d for d in by_id[task_id].depends_on if d in by_id and d != task_id]
            waiting = [d for d in deps if d not in level and d not in open_ids]
            if waiting:
                stack.extend(waiting)
                open_ids.update(waiting)
                continue
            level[task_id] = 1 + max((level[d] for d in deps if d in level), default=-1)
            stack.pop()
    widths = [0] * (1 + max(level.values(), default=-1))
    for value in level.values():
        widths[value] += 1
    return GraphShape(level_widths=tuple(widths))


def concurrency_notice(tasks: Iterable[_Node], max_concurrency: int) -> str | None:
    """One line when the graph is wider than ``max_concurrency``; ``None`` otherwise.

    Args:
        tasks: The run's tasks (validated).
        max_concurrency: Most tasks running at once.

    Returns:
        The width, ``max_concurrency``, the critical path and the makespan it implies with
        equal task times, as a multiple of the critical path; or ``None`` when every level
        fits in ``max_concurrency``.
    """
    shape = graph_shape(tasks)
    if shape.width <= max_concurrency:
        return None
    ratio = shape.rounds(max_concurrency) / shape.critical_path
    return (
        f"note: the task graph is {shape.width} tasks wide but max_concurrency is "
        f"{max_concurrency}: with equal task times the run takes about {ratio:.1f}x its "
        f"critical path ({shape.critical_path} tasks long); raise max_concurrency (team "
        f"file or --max-concurrency) if the model server can serve more requests at once"
    )
