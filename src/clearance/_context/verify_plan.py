"""Verifying a run's ``plan`` events against the graphs they describe.

A ``plan`` event says which tasks a plan held, by digest (`tasks_sha256`): a plan-only run's
(subject ``plan``: its tasks' hash and count), or the link a run of a planned team file
records (subject ``run``: the plan's run, the planned and the run's tasks' hashes, and
whether the tasks were ``edited``). Each is re-derived from the recorded graphs:

- the hash (and count) of a run's own tasks is that of its recorded graph;
- ``edited`` is whether the run's tasks' hash differs from the planned one;
- the planned hash is that of the plan's run's recorded graph, when that run (exactly that
  id) is in the same ledger.

An event edited to say otherwise (a run of edited tasks recorded ``edited: false``, say) is a
finding. A run the coordinator planned (``clearance run --goal``, ``clearance plan``) has
recorded tasks that are exactly its last ``plan`` call's answer, read as the run read it
(`parse_plan`, assignees among the recorded team's agents): a graph rewritten after the
run, with its ``plan`` event to match, is a finding too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from clearance._context.plan_answer import parse_plan
from clearance._core.errors import StoreError
from clearance._core.event_schema import PlanEvent, PlanLinkEvent, parse_event
from clearance._core.vocabulary import EventKind
from clearance._state.graph import tasks_sha256
from clearance._state.ledger import CallRecord, EventRecord, RunLedger, RunRecord

__all__ = ["check_plan_events", "check_planned_graph"]

Finding = tuple[str, str | None, str]
"""``(subject, call id or None, reason)``."""


def check_plan_events(
    ledger: RunLedger, run: RunRecord, events: Iterable[EventRecord]
) -> Iterator[Finding]:
    """Findings on the run's ``plan`` events (events of their kind's schema only)."""
    digest = tasks_sha256(run.graph) if run.graph is not None else None
    count = len(run.graph) if run.graph is not None else 0
    for event in events:
        if event.kind != EventKind.PLAN:
            continue
        data = parse_event(event.kind, event.data)
        if not isinstance(data, PlanEvent | PlanLinkEvent):  # pragma: no cover
            continue
        where = f"event {event.event_id}"
        if digest is None:
            yield where, None, "a plan event, but the run recorded no task graph"
            continue
        if data.tasks_sha256 != digest:
            yield where, None, "its tasks_sha256 is not the hash of the run's recorded tasks"
        if isinstance(data, PlanLinkEvent):
            yield from _check_link(ledger, where, data, digest)
        elif data.tasks != count:
            yield where, None, f"it counts {data.tasks} tasks; the run's recorded graph has {count}"


def check_planned_graph(run: RunRecord, calls: Sequence[CallRecord]) -> Iterator[Finding]:
    """A finding if the run's recorded tasks are not its last answered ``plan`` call's plan.

    A run without a plan call (its tasks came from a team file or code), or without a
    recorded graph (its planning failed), has nothing to check here.
    """
    answered = [c for c in calls if c.subject == "plan" and c.response is not None]
    if not answered or run.graph is None:
        return
    last = answered[-1]
    agents = [str(a.get("name")) for a in (run.config or {}).get("agents", [])]
    try:
        planned = tasks_sha256(parse_plan(last.response or "", agents=agents))
    except ValueError:
        planned = None
    if planned != tasks_sha256(run.graph):
        yield "run", last.call_id, "the run's recorded tasks are not the coordinator's last plan"


def _check_link(
    ledger: RunLedger, where: str, data: PlanLinkEvent, digest: str
) -> Iterator[Finding]:
    edited = digest != data.planned_tasks_sha256
    if data.edited != edited:
        state = "differ from" if edited else "are"
        yield where, None, f"it says edited: {data.edited}, but the run's tasks {state} the plan's"
    planned = _recorded_graph(ledger, data.plan_run_id)
    if planned is not None and tasks_sha256(planned) != data.planned_tasks_sha256:
        run = data.plan_run_id
        yield where, None, f"planned_tasks_sha256 is not the hash of the tasks run {run} planned"


def _recorded_graph(ledger: RunLedger, run_id: str) -> Sequence[dict[str, Any]] | None:
    """The graph run ``run_id`` (exactly that id) recorded, or ``None`` when there is none."""
    try:
        record = ledger.get_run(run_id)
    except StoreError:
        return None
    return record.graph if record.run_id == run_id else None
