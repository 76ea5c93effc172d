"""`clearance inspect`: choosing the calls of one subject, and showing a run's events."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from clearance import ApprovalKind, ClarificationKind, EventKind
from clearance._state.ledger import CallRecord, EventRecord, ToolCallRecord
from clearance.cli._common import safe_text

__all__ = ["print_events", "select_calls"]

_TASK_KINDS = ("task", "isolated", "clarification")


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
    if ":" in wanted or wanted in ("synthesis", "plan"):
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


def print_events(console: Console, events: Sequence[EventRecord]) -> None:
    """Print a run's events (spawns, children, clarification rounds, limit breaches...)."""
    shown = [e for e in events if e.kind != EventKind.STEP and e.kind != EventKind.ISOLATED_CONTEXT]
    if not shown:
        return
    table = Table(title="Events", title_justify="left")
    for column in ("kind", "subject", "what"):
        table.add_column(column)
    for event in shown:
        table.add_row(safe_text(event.kind), safe_text(event.subject), safe_text(_what(event)))
    console.print(table)


def _what(event: EventRecord) -> str:
    data = event.data
    if event.kind == EventKind.SPAWN:
        return f"child {data.get('child_id')} ({data.get('agent')}): {data.get('goal')}"
    if event.kind == EventKind.CHILD:
        error = f": {data.get('error')}" if data.get("error") else ""
        return f"child {data.get('child_id')} ended {data.get('status')}{error}"
    if event.kind == EventKind.CLARIFICATION:
        if data.get("kind") == ClarificationKind.FILE:
            served = "served" if data.get("served") else f"refused: {data.get('answer')}"
            return f"round {data.get('round')}: file {data.get('path')} {served}"
        return (
            f"round {data.get('round')}: asked {data.get('question')!r}; "
            f"{data.get('answered_by')} answered {data.get('answer')!r}"
        )
    if event.kind == EventKind.AWAITING_APPROVAL:
        what = f"task {data.get('task_id')} ({data.get('agent')})"
        if data.get("kind") == ApprovalKind.TOOL:
            what = f"{data.get('agent')} calls {data.get('tool')} {data.get('arguments')}"
        return f"{data.get('call_id')}: {what}"
    if event.kind == EventKind.APPROVAL_DECIDED:
        why = f": {data.get('reason')}" if data.get("reason") else ""
        return f"{data.get('call_id')} {data.get('decision')} by {data.get('by')}{why}"
    if event.kind == EventKind.LIMIT_EXCEEDED:
        return str(data.get("error"))
    if event.kind == EventKind.ARCHITECTURE:
        return f"project {data.get('project')} (sha256 {str(data.get('sha256'))[:12]})"
    if event.kind == EventKind.MCP_CALL:
        outcome = (
            f"failed ({data.get('error')})"
            if data.get("error")
            else f"{data.get('bytes')} bytes" + (", cut" if data.get("truncated") else "")
        )
        return (
            f"MCP {data.get('server')}/{data.get('tool')} over {data.get('transport')} "
            f"({data.get('where')}), call {data.get('tool_call_id')}: {outcome}"
        )
    if event.kind == EventKind.FILES:
        return ", ".join(sorted(dict(data.get("files") or {}))) or "(none)"
    return str(data)
