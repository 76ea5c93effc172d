"""`clearance inspect`: choosing the calls of one subject, and showing a run's events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from clearance import ApprovalKind, ConfigError, PromptKind
from clearance.cli._common import safe_line
from clearance.events import EventKind

if TYPE_CHECKING:
    from clearance.runs import CallRecord, EventRecord, ToolCallRecord


__all__ = ["event_rows", "print_events", "select_calls"]

_TASK_KINDS = (PromptKind.TASK, PromptKind.ISOLATED, PromptKind.CLARIFICATION)


def select_calls(
    calls: Sequence[CallRecord],
    wanted: str,
    *,
    events: Sequence[EventRecord],
    tool_calls: Sequence[ToolCallRecord],
) -> list[CallRecord]:
    """The calls ``inspect --task`` shows for ``wanted``.

    ``wanted`` is a call subject (``isolated:review``, ``child:review.2``,
    ``delegation:tool_...``, ``clarification:review``, ``conversation:alice``, ``synthesis``,
    ``plan``), or a task id: then every call made for that task (its own, its isolated
    dispatches and clarifications), for its children and for its delegations.
    """
    if ":" in wanted or wanted in (PromptKind.SYNTHESIS, PromptKind.PLAN):
        return [c for c in calls if c.subject == wanted]
    subjects = {f"{kind}:{wanted}" for kind in _TASK_KINDS}
    subjects |= {
        f"child:{e.data.get('child_id')}"
        for e in events
        if e.kind == EventKind.SPAWN and e.subject == f"task:{wanted}"
    }
    added = True
    while added:  # delegations made by those calls, and by their delegates in turn
        more = {f"delegation:{t.tool_call_id}" for t in tool_calls if t.subject in subjects}
        added = not more <= subjects
        subjects |= more
    return [c for c in calls if c.subject in subjects]


def event_rows(events: Sequence[EventRecord]) -> list[tuple[str, str, str]]:
    """The rows of the events table: ``(kind, subject, what)``, not yet made safe to print.

    Steps and isolated-context records are left out (the calls show them).
    """
    return [
        (str(e.kind), e.subject, _what(e))
        for e in events
        if e.kind != EventKind.STEP and e.kind != EventKind.ISOLATED_CONTEXT
    ]


def print_events(console: Console, events: Sequence[EventRecord]) -> None:
    """Print a run's events (spawns, children, clarification rounds, limit breaches...)."""
    rows = event_rows(events)
    if not rows:
        return
    table = Table(title="Events", title_justify="left")
    for column in ("kind", "subject", "what"):
        table.add_column(column)
    for row in rows:
        table.add_row(*map(safe_line, row))  # a cell is one line: no forged row
    console.print(table)


def _what(event: EventRecord) -> str:
    from clearance.events import (
        ApprovalDecidedEvent,
        ApprovalRequestedEvent,
        ArchitectureEvent,
        BudgetEvent,
        ChildEvent,
        FileClarificationEvent,
        FilesEvent,
        HookContextEvent,
        LimitExceededEvent,
        McpCallEvent,
        ModelToolCallsEvent,
        PlanEvent,
        PlanLinkEvent,
        QuestionClarificationEvent,
        ReplayDeclinedEvent,
        ReplayedEvent,
        ReviewRoundEvent,
        SpawnEvent,
        ToolStartedEvent,
        parse_event,
    )

    try:
        data = parse_event(event.kind, event.data)
    except ConfigError as exc:
        return f"malformed event ({exc}): {event.data}"
    match data:
        case SpawnEvent():
            return f"child {data.child_id} ({data.agent}): {data.goal}"
        case ChildEvent():
            error = f": {data.error}" if data.error else ""
            return f"child {data.child_id} ended {data.status}{error}"
        case FileClarificationEvent():
            served = "served" if data.served else f"refused: {data.answer}"
            return f"round {data.round}: file {data.path} {served}"
        case QuestionClarificationEvent():
            return (
                f"round {data.round}: asked {data.question!r}; "
                f"{data.answered_by} answered {data.answer!r}"
            )
        case ApprovalRequestedEvent():
            what = f"task {data.task_id} ({data.agent})"
            if data.kind == ApprovalKind.TOOL:
                what = f"{data.agent} calls {data.tool} {data.arguments}"
            elif data.kind == ApprovalKind.RERUN:
                what = (
                    f"tool {data.tool} may have run ({data.agent}, {data.arguments}); "
                    "approve to run it again or deny"
                )
            return f"{data.call_id}: {what}"
        case ReplayedEvent():
            return (
                f"REPLAYED {data.record.replace('_', ' ')} {data.original} "
                f"from its record (sha256 {data.sha256[:12]})"
            )
        case ReplayDeclinedEvent():
            again = f" as {data.replacement}" if data.replacement is not None else ""
            return f"tool call {data.original} run again{again}, not replayed: {data.why}"
        case ToolStartedEvent():
            idempotent = ", idempotent" if data.idempotent else ""
            return f"{data.name} call {data.tool_call_id} started{idempotent}"
        case ModelToolCallsEvent():
            names = ", ".join(call.name for call in data.tool_calls)
            return f"call {data.call_id} asked for {names}"
        case ApprovalDecidedEvent():
            why = f": {data.reason}" if data.reason else ""
            return f"{data.call_id} {data.decision} by {data.by}{why}"
        case LimitExceededEvent():
            return data.error
        case ArchitectureEvent():
            return f"project {data.project} (sha256 {data.sha256[:12]})"
        case McpCallEvent():
            outcome = (
                f"failed ({data.error})"
                if data.error
                else f"{data.bytes} bytes" + (", cut" if data.truncated else "")
            )
            return (
                f"MCP {data.server}/{data.tool} over {data.transport} "
                f"({data.where}{', shared' if data.shared else ''}), "
                f"call {data.tool_call_id}: {outcome}"
            )
        case ReviewRoundEvent():
            verdict = "accepts" if data.accepted else "sends it back"
            return (
                f"task {data.task_id} round {data.round}: {data.reviewer} "
                f"{verdict}: {data.findings}"
            )
        case BudgetEvent():
            return f"budget for this session: tokens {data.tokens}, cost {data.cost_usd}"
        case PlanEvent():
            return f"planned {data.tasks} tasks (sha256 {data.tasks_sha256[:12]})"
        case PlanLinkEvent():
            edited = "edited" if data.edited else "as planned"
            return f"tasks of plan run {data.plan_run_id}, {edited}"
        case HookContextEvent():
            return ", ".join(f"hook:{item.ref} {item.title}" for item in data.items) or "(none)"
        case FilesEvent():
            return ", ".join(sorted(data.files)) or "(none)"
    return str(event.data)
