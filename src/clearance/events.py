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
