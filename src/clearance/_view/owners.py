"""Which task of a run a recorded call, tool call or event belongs to, by its subject.

A task's own calls (``task:<id>``, ``isolated:<id>``, ``clarification:<id>``) and its
reviewers' (``review:<id>/<round>/<stage>``) are its; a delegate's (``delegation:<tool call
id>``) belongs to the task whose tool call delegated, a child's (``child:<id>``) to the
task that spawned it (``spawn`` events), through chains of both. Every other subject (plan,
synthesis, conversation...) belongs to no task: the page shows it under the coordinator.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from clearance._core.event_schema import SpawnEvent, event_problem, parse_event
from clearance._core.vocabulary import EventKind, PromptKind
from clearance._state.ledger import EventRecord, ToolCallRecord

__all__ = ["Owners"]

_REVIEW_REF = re.compile(r"(.+)/\d+/\d+")  # <task>/<round>/<stage>
_MAX_HOPS = 32  # delegation and spawn chains are short; a cap all the same (a forged cycle)


class Owners:
    """Which task a call, tool call or event subject belongs to.

    Args:
        tool_calls: The run's tool calls (a delegation's subject names one).
        events: The run's events (each well-formed ``spawn`` names a child's parent).
    """

    def __init__(self, tool_calls: Sequence[ToolCallRecord], events: Sequence[EventRecord]):
        self._tool_subject = {t.tool_call_id: t.subject for t in tool_calls}
        self._child_parent: dict[str, str] = {}
        for event in events:
            if event.kind == EventKind.SPAWN and event_problem(event.kind, event.data) is None:
                spawn = parse_event(event.kind, event.data)
                assert isinstance(spawn, SpawnEvent)
                self._child_parent[spawn.child_id] = event.subject

    def task_of(self, subject: str) -> str | None:
        """The task id a subject belongs to, or ``None`` (coordinator, run-wide)."""
        for _ in range(_MAX_HOPS):
            kind, _, ref = subject.partition(":")
            if kind in (PromptKind.TASK, PromptKind.ISOLATED, PromptKind.CLARIFICATION):
                return ref
            review = _REVIEW_REF.fullmatch(ref) if kind == PromptKind.REVIEW else None
            if review is not None:
                return review[1]
            if kind == PromptKind.DELEGATION and ref in self._tool_subject:
                subject = self._tool_subject[ref]
            elif kind == PromptKind.CHILD and ref in self._child_parent:
                subject = self._child_parent[ref]
            else:
                return None
        return None
