"""`clearance inspect`: choosing the calls of one subject, and showing a run's events."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from clearance.cli._common import safe_text
from clearance.runs import CallRecord, EventRecord, ToolCallRecord

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
        if e.kind == "spawn" and e.subject == f"task:{wanted}"
    }
    added = True
    while added:  # delegations made by those calls, and by their delegates in turn
        more = {f"delegation:{t.tool_call_id}" for t in tool_calls if t.subject in subjects}
        added = not more <= subjects
        subjects |= more
    return [c for c in calls if c.subject in subjects]


def print_events(console: Console, events: Sequence[EventRecord]) -> None:
    """Print a run's events (spawns, children, clarification rounds, limit breaches...)."""
    shown = [e for e in events if e.kind != "step" and e.kind != "isolated_context"]
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
    if event.kind == "spawn":
        return f"child {data.get('child_id')} ({data.get('agent')}): {data.get('goal')}"
    if event.kind == "child":
        error = f": {data.get('error')}" if data.get("error") else ""
        return f"child {data.get('child_id')} ended {data.get('status')}{error}"
    if event.kind == "clarification":
        if data.get("kind") == "file":
            served = "served" if data.get("served") else f"refused: {data.get('answer')}"
            return f"round {data.get('round')}: file {data.get('path')} {served}"
        return (
            f"round {data.get('round')}: asked {data.get('question')!r}; "
            f"{data.get('answered_by')} answered {data.get('answer')!r}"
        )
    if event.kind == "awaiting_approval":
        what = f"task {data.get('task_id')} ({data.get('agent')})"
        if data.get("kind") == "tool":
            what = f"{data.get('agent')} calls {data.get('tool')} {data.get('arguments')}"
        elif data.get("kind") == "rerun":
            what = (f"tool {data.get('tool')} may have run ({data.get('agent')}, "
                    f"{data.get('arguments')}); approve to run it again or deny")  # fmt: skip
        return f"{data.get('call_id')}: {what}"
    if event.kind == "replayed":
        return (f"REPLAYED {str(data.get('record')).replace('_', ' ')} {data.get('original')} "
                f"from its record (sha256 {str(data.get('sha256'))[:12]})")  # fmt: skip
    if event.kind == "replay_declined":
        return f"tool call {data.get('original')} run again, not replayed: {data.get('why')}"
    if event.kind == "tool_started":
        idempotent = ", idempotent" if data.get("idempotent") else ""
        return f"{data.get('name')} call {data.get('tool_call_id')} started{idempotent}"
    if event.kind == "model_tool_calls":
        names = ", ".join(str(c.get("name")) for c in data.get("tool_calls") or [])
        return f"call {data.get('call_id')} asked for {names}"
    if event.kind == "approval_decided":
        why = f": {data.get('reason')}" if data.get("reason") else ""
        return f"{data.get('call_id')} {data.get('decision')} by {data.get('by')}{why}"
    if event.kind == "limit_exceeded":
        return str(data.get("error"))
    if event.kind == "architecture":
        return f"project {data.get('project')} (sha256 {str(data.get('sha256'))[:12]})"
    if event.kind == "mcp_call":
        outcome = (
            f"failed ({data.get('error')})"
            if data.get("error")
            else f"{data.get('bytes')} bytes" + (", cut" if data.get("truncated") else "")
        )
        return (
            f"MCP {data.get('server')}/{data.get('tool')} over {data.get('transport')} "
            f"({data.get('where')}), call {data.get('tool_call_id')}: {outcome}"
        )
    if event.kind == "review_round":
        verdict = "accepts" if data.get("accepted") else "sends it back"
        return (
            f"task {data.get('task_id')} round {data.get('round')}: {data.get('reviewer')} "
            f"{verdict}: {data.get('findings')}"
        )
    if event.kind == "budget":
        return f"budget for this session: tokens {data.get('tokens')}, cost {data.get('cost_usd')}"
    if event.kind == "files":
        return ", ".join(sorted(dict(data.get("files") or {}))) or "(none)"
    return str(data)
