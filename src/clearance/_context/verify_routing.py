"""Verify why tasks were skipped: each skip follows from the recorded graph and results.

- **Routing.** For every condition of the recorded graph (`Task.when`) whose dependency is
  recorded ``completed``, the condition is evaluated again on the recorded result: a task it
  routes out must be recorded ``skipped`` with exactly that reason and have no model call; a
  task it lets through must not be recorded skipped by a condition.
- **Failures upstream.** Every other skip must carry the scheduler's own reason,
  ``skipped: dependency '<id>' failed`` or ``... was skipped`` (`TaskQueue`), naming an
  ancestor of the task in the recorded graph that is recorded so; the task must not proceed
  after failures (``after_failure: proceed``) and must have no model call. The reason reaches
  prompts (a proceeding dependent's status block, the synthesis), so text of a forger's own
  there would otherwise be verified as the scheduler's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from clearance._core.origins import Subject
from clearance._core.routing import ROUTED_PREFIX
from clearance._state.graph import TaskGraph
from clearance._state.ledger import CallRecord, TaskRecord

__all__ = ["check_routing"]


def check_routing(
    graph: TaskGraph | None, tasks: Iterable[TaskRecord], calls: Iterable[CallRecord]
) -> Iterator[tuple[str, str | None, str]]:
    """Check every recorded skip, by a condition or after a failure upstream.

    Each condition that held is checked too: its task may not be skipped by it.

    Yields:
        ``(subject, call id or None, reason)`` for each problem.
    """
    if graph is None:
        return
    records = {t.task_id: t for t in tasks}
    called = {Subject.parse(c.subject).id for c in calls if c.subject.startswith("task:")}
    yield from _routed(graph, records, called)
    yield from _cascaded(graph, records, called)


def _routed(
    graph: TaskGraph, records: dict[str, TaskRecord], called: set[str]
) -> Iterator[tuple[str, str | None, str]]:
    """The problems of skips by a condition, and of conditions that held."""
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


_CASCADE = re.compile(r"skipped: dependency (?P<cause>'[^'\\]*') (?P<what>failed|was skipped)")
"""The reason `TaskQueue` gives a task skipped after a failure upstream (`repr` of the id)."""


def _cascaded(
    graph: TaskGraph, records: dict[str, TaskRecord], called: set[str]
) -> Iterator[tuple[str, str | None, str]]:
    """The problems of tasks recorded skipped for a reason other than a condition."""
    for record in records.values():
        reason = record.error or ""
        if record.status != "skipped" or reason.startswith(ROUTED_PREFIX):
            continue
        if record.task_id not in graph:
            continue  # reported as a task outside the recorded graph
        subject = str(Subject.task(record.task_id))
        if record.task_id in called:
            yield subject, None, "the task is recorded skipped, but a model call of it is"
        if graph.get(record.task_id).after_failure == "proceed":
            yield (
                subject,
                None,
                "recorded skipped after a failure upstream, but the task proceeds after "
                "failures (after_failure: proceed)",
            )
        match = _CASCADE.fullmatch(reason)
        if match is None:
            yield (
                subject,
                None,
                f"skipped with {reason[:200]!r}, which is not a reason the scheduler gives",
            )
            continue
        cause = match["cause"][1:-1]
        if cause not in graph.ancestors(record.task_id):
            yield subject, None, f"skipped for {cause!r}, but {cause!r} is not a dependency of it"
            continue
        upstream = records.get(cause)
        wanted = "failed" if match["what"] == "failed" else "skipped"
        if upstream is None or upstream.status != wanted:
            status = "not recorded" if upstream is None else f"recorded {upstream.status}"
            yield (
                subject,
                None,
                f"skipped because {cause!r} {match['what']}, but {cause!r} is {status}",
            )
