"""Verify conditional routing: each skip by a condition follows from the recorded result.

For every condition of the recorded graph (`Task.when`) whose dependency is recorded
``completed``, the condition is evaluated again on the recorded result: a task it routes out
must be recorded ``skipped`` with exactly that reason and have no model call; a task it
lets through must not be recorded skipped by a condition.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from clearance._core.origins import Subject
from clearance._core.routing import ROUTED_PREFIX
from clearance._state.graph import TaskGraph
from clearance._state.ledger import CallRecord, TaskRecord

__all__ = ["check_routing"]


def check_routing(
    graph: TaskGraph | None, tasks: Iterable[TaskRecord], calls: Iterable[CallRecord]
) -> Iterator[tuple[str, str | None, str]]:
    """Check every recorded skip by a condition, and every condition that held.

    Yields:
        ``(subject, call id or None, reason)`` for each problem.
    """
    if graph is None:
        return
    records = {t.task_id: t for t in tasks}
    called = {Subject.parse(c.subject).id for c in calls if c.subject.startswith("task:")}
    for task in graph:
        mine = records.get(task.id)
        if mine is None:
            continue
        subject = str(Subject.task(task.id))
        unmet: dict[str, tuple[str, str]] = {}  # recorded reason: (upstream, why)
        for condition in task.when:
            upstream = records.get(condition.task)
            if upstream is None or upstream.status != "completed" or upstream.result is None:
                continue
            why = condition.unmet(upstream.result)
            if why is not None:
                unmet.setdefault(ROUTED_PREFIX + why, (condition.task, why))
        routed = (mine.error or "").startswith(ROUTED_PREFIX)
        if unmet:
            # Any unmet condition routes the task out; which one is recorded depends on which
            # upstream finished first, and a dependency skipped on the way may have come first.
            if mine.status != "skipped" or (routed and mine.error not in unmet):
                upstream_id, why = next(iter(unmet.values()))
                other = f" with another reason: {mine.error!r}" if mine.status == "skipped" else ""
                yield (
                    subject,
                    None,
                    f"the recorded result of {upstream_id!r} routes the task out ({why}), "
                    f"but it is recorded {mine.status}{other}",
                )
            if task.id in called:
                yield subject, None, "the task was routed out, but a model call of it is"
        elif mine.status == "skipped" and routed:
            yield (
                subject,
                None,
                "recorded skipped by a condition, but every condition of it holds for the "
                "recorded result it tests (or it has none)",
            )
