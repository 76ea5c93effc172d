"""Delegations a run stopped inside: started, not yet answered, judged all the same.

A ``delegate`` tool call is recorded when its delegate answers. A run that stops inside a
delegation (a call of it awaiting a person's approval, the run's budget reached, the process
killed) has recorded the call's ``tool_started`` event and the model answer that asked for it
(``model_tool_calls``), but no tool call yet; a resume finishes it under the same id.
`delegations_in_flight` rebuilds each such call from those two records (its arguments are
the answer's call whose digest the start names; its agent is the one that runs the start's
subject), so ``verify`` judges the delegate's prompts, tool calls and children against the
agents it acts for, as it will once the delegation is recorded, instead of finding the
honest record of a stopped run incomplete.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from clearance._context.tool_sections import DELEGATE_TOOL
from clearance._context.verify_approvals import arguments_sha256
from clearance._core.event_schema import ModelToolCallsEvent, ToolStartedEvent, parse_event
from clearance._core.vocabulary import EventKind
from clearance._state.ledger import EventRecord, ToolCallRecord

__all__ = ["delegations_in_flight"]

Runner = Callable[[str, Mapping[str, ToolCallRecord], EventRecord], "str | None"]
"""The agent that runs a subject (given the tool calls known so far and the start event)."""


def delegations_in_flight(
    tool_calls: Mapping[str, ToolCallRecord], events: list[EventRecord], runner: Runner
) -> dict[str, ToolCallRecord]:
    """Each ``delegate`` call started and never recorded, rebuilt from what was recorded.

    Args:
        tool_calls: The run's recorded tool calls, by id.
        events: The run's events (well-formed ones), in recorded order.
        runner: The agent that runs a subject: the start's subject's agent made the call.

    Returns:
        By tool call id: the call as its record will read, with no result yet (``is_error``,
        an empty result, no chain). A start whose arguments no recorded answer of its
        subject asked for, or whose subject's agent is unknown, is left out.
    """
    asked: dict[tuple[str, str], dict[str, Any]] = {}  # (subject, digest): arguments
    for event in events:
        if event.kind != EventKind.MODEL_TOOL_CALLS:
            continue
        answer = parse_event(event.kind, event.data)
        if isinstance(answer, ModelToolCallsEvent):
            for call in answer.tool_calls:
                if call.name == DELEGATE_TOOL:
                    asked[(event.subject, arguments_sha256(call.arguments))] = call.arguments
    found: dict[str, ToolCallRecord] = {}
    for event in events:
        if event.kind != EventKind.TOOL_STARTED:
            continue
        data = parse_event(event.kind, event.data)
        if not isinstance(data, ToolStartedEvent) or data.name != DELEGATE_TOOL:
            continue
        if data.tool_call_id in tool_calls or data.tool_call_id in found:
            continue
        arguments = asked.get((event.subject, data.arguments_sha256))
        agent = runner(event.subject, {**tool_calls, **found}, event)
        if arguments is None or agent is None:
            continue
        found[data.tool_call_id] = ToolCallRecord(
            tool_call_id=data.tool_call_id, run_id=event.run_id, subject=event.subject,
            agent=agent, step=data.step, name=DELEGATE_TOOL, arguments=dict(arguments),
            result="", is_error=True, store_reads=[], chain=None, created_at=event.created_at,
        )  # fmt: skip
    return found
