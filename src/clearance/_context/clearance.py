"""`Clearance`: what one task may see, computed from the graph alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clearance._state.graph import TaskGraph
from clearance._state.messages import Message

__all__ = ["Clearance"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Clearance:
    """The set of origins one task's prompt may hold. Default deny: nothing else.

    A clearance is computed from the task graph, never from a model's output:

    - always: the assignee's instructions (``instructions``) and the task's own text
      (``task:<id>``);
    - ``repair:<id>``: the task's own rejected answer and why it was rejected, shown on the
      repair attempt of a structured hand-off (``Task.output_schema``);
    - ``task_result:<id>`` for each id in ``result_task_ids``, which ``memory_scope``
      decides: the direct dependencies (``"dependencies"``), every ancestor
      (``"transitive"``), or every other task of the graph (``"all"``);
    - ``file:<path>`` for each path listed in the task's ``files``;
    - ``message:<id>`` for each message addressed to the assignee, directly or by broadcast.

    Attributes:
        task_id: The task.
        agent: Its assignee.
        result_task_ids: Tasks whose results the task may see.
        files: Paths whose contents the task may see.
    """

    task_id: str
    agent: str
    result_task_ids: frozenset[str]
    files: frozenset[str]

    @classmethod
    def for_task(cls, graph: TaskGraph, task_id: str) -> Clearance:
        """Compute the clearance of ``task_id`` from ``graph``.

        Raises:
            KeyError: If the graph has no such task.
        """
        task = graph.get(task_id)
        if task.memory_scope == "all":
            results = frozenset(t.id for t in graph if t.id != task_id)
        elif task.memory_scope == "transitive":
            results = frozenset(graph.ancestors(task_id))
        else:
            results = frozenset(task.depends_on)
        return cls(
            task_id=task_id,
            agent=task.assignee,
            result_task_ids=results,
            files=frozenset(task.files),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, recorded in the manifest (ids and paths sorted)."""
        return {
            "task_id": self.task_id,
            "agent": self.agent,
            "result_task_ids": sorted(self.result_task_ids),
            "files": sorted(self.files),
        }

    def admits(self, origin: str, *, message: Message | None = None) -> bool:
        """Whether an item with this origin may enter the task's prompt.

        Args:
            origin: ``kind:ref`` provenance of the item.
            message: For ``message:<id>`` origins, the message itself (its addressee decides).
        """
        kind, _, ref = origin.partition(":")
        if kind == "instructions":
            return not ref
        if kind in ("task", "repair"):
            return ref == self.task_id
        if kind == "task_result":
            return ref in self.result_task_ids
        if kind == "file":
            return ref in self.files
        if kind == "message":
            return message is not None and message.id == ref and message.is_for(self.agent)
        return False
