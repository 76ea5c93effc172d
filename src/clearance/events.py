"""The recorded events of a run: their kinds and one schema (a pydantic model) per kind.

A run's ledger records events (spawns, children, clarifications, approvals, MCP calls,
limits...) next to its model calls; `RunLedger.events` returns them as records whose ``data``
is the stored JSON. `parse_event` reads that data through its kind's model, the same model the
ledger validated it against when it was written::

    for record in ledger.events(run_id):
        event = parse_event(record.kind, record.data)
        if isinstance(event, SpawnEvent):
            print(event.child_id, event.goal)

``clearance verify`` reports a recorded event that does not match its schema.
"""

import typing

from clearance._core import lazy as _lazy

if typing.TYPE_CHECKING:
    from clearance._core.event_schema import (
        SCHEMAS,
        AnalysisStepEvent,
        AnswerMarkedEvent,
        ApprovalDecidedEvent,
        ApprovalRequestedEvent,
        ArchitectureEvent,
        BudgetEvent,
        ChildEvent,
        CompactedEvent,
        EventData,
        FileClarificationEvent,
        FilesEvent,
        GrantWithheldEvent,
        HookContextEvent,
        HookItem,
        IsolatedContextEvent,
        LimitExceededEvent,
        McpCallEvent,
        ModelToolCallsEvent,
        OffloadedEvent,
        PlanEvent,
        PlanLinkEvent,
        PriceData,
        QuestionClarificationEvent,
        RecordedToolCall,
        ReplayDeclinedEvent,
        ReplayedEvent,
        ReviewRoundEvent,
        SessionStepEvent,
        SpawnEvent,
        ToolStartedEvent,
        WorkerLostEvent,
        parse_event,
    )
    from clearance._core.vocabulary import ClarificationKind, EventKind

__all__ = [
    "AnalysisStepEvent",
    "AnswerMarkedEvent",
    "ApprovalDecidedEvent",
    "ApprovalRequestedEvent",
    "ArchitectureEvent",
    "BudgetEvent",
    "ChildEvent",
    "ClarificationKind",
    "CompactedEvent",
    "EventData",
    "EventKind",
    "FileClarificationEvent",
    "FilesEvent",
    "GrantWithheldEvent",
    "HookContextEvent",
    "HookItem",
    "IsolatedContextEvent",
    "LimitExceededEvent",
    "McpCallEvent",
    "ModelToolCallsEvent",
    "OffloadedEvent",
    "PlanEvent",
    "PlanLinkEvent",
    "PriceData",
    "QuestionClarificationEvent",
    "RecordedToolCall",
    "ReplayDeclinedEvent",
    "ReplayedEvent",
    "ReviewRoundEvent",
    "SCHEMAS",
    "SessionStepEvent",
    "SpawnEvent",
    "ToolStartedEvent",
    "WorkerLostEvent",
    "parse_event",
]

_EXPORTS = {
    "AnalysisStepEvent": "clearance._core.event_schema",
    "AnswerMarkedEvent": "clearance._core.event_schema",
    "ApprovalDecidedEvent": "clearance._core.event_schema",
    "ApprovalRequestedEvent": "clearance._core.event_schema",
    "ArchitectureEvent": "clearance._core.event_schema",
    "BudgetEvent": "clearance._core.event_schema",
    "ChildEvent": "clearance._core.event_schema",
    "ClarificationKind": "clearance._core.vocabulary",
    "CompactedEvent": "clearance._core.event_schema",
    "EventData": "clearance._core.event_schema",
    "EventKind": "clearance._core.vocabulary",
    "FileClarificationEvent": "clearance._core.event_schema",
    "FilesEvent": "clearance._core.event_schema",
    "GrantWithheldEvent": "clearance._core.event_schema",
    "HookContextEvent": "clearance._core.event_schema",
    "HookItem": "clearance._core.event_schema",
    "IsolatedContextEvent": "clearance._core.event_schema",
    "LimitExceededEvent": "clearance._core.event_schema",
    "McpCallEvent": "clearance._core.event_schema",
    "ModelToolCallsEvent": "clearance._core.event_schema",
    "OffloadedEvent": "clearance._core.event_schema",
    "PlanEvent": "clearance._core.event_schema",
    "PlanLinkEvent": "clearance._core.event_schema",
    "PriceData": "clearance._core.event_schema",
    "QuestionClarificationEvent": "clearance._core.event_schema",
    "RecordedToolCall": "clearance._core.event_schema",
    "ReplayDeclinedEvent": "clearance._core.event_schema",
    "ReplayedEvent": "clearance._core.event_schema",
    "ReviewRoundEvent": "clearance._core.event_schema",
    "SCHEMAS": "clearance._core.event_schema",
    "SessionStepEvent": "clearance._core.event_schema",
    "SpawnEvent": "clearance._core.event_schema",
    "ToolStartedEvent": "clearance._core.event_schema",
    "WorkerLostEvent": "clearance._core.event_schema",
    "parse_event": "clearance._core.event_schema",
}
"""Each public name and the module that defines it, imported on first use."""

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)
