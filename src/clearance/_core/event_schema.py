"""The schema of every recorded event: one pydantic model per `EventKind`.

The ledger validates an event's data against its kind's model before it writes it (a writer
that records a malformed event gets a `ConfigError`, nothing is stored), and readers (verify,
inspect, the run page, approvals) parse what they read through the same models, so a writer
and its readers cannot drift apart. ``clearance verify`` reports an event that does not match
its schema (a ledger edited by hand, or written by another version) instead of crashing on it.

The stored data is exactly what the writer gave, validated: a field the writer left out stays
out (``exclude_unset``), so ledgers recorded before these models existed read back unchanged.

A new kind of event is one member of `EventKind` and one model here, listed in `SCHEMAS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from clearance._core.errors import ConfigError
from clearance._core.vocabulary import ApprovalKind, ClarificationKind, EventKind, RecordKind

__all__ = [
    "AnalysisStepEvent",
    "AnswerMarkedEvent",
    "ApprovalDecidedEvent",
    "ApprovalRequestedEvent",
    "ArchitectureEvent",
    "BudgetEvent",
    "ChildEvent",
    "CompactedEvent",
    "EventData",
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
    "UserMessageEvent",
    "WorkerLostEvent",
    "dump_event",
    "event_problem",
    "parse_event",
]


class EventData(BaseModel):
    """The base of every event's model: frozen, and no field that the schema does not name."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SpawnEvent(EventData):
    """``spawn``: an agent asked for a child (subject ``task:<id>``).

    ``parent_agent`` is the agent that asked (the task's assignee, or a delegate of it) and
    ``parent_subject`` the subject it ran under (``task:<id>`` or ``delegation:<call id>``;
    ``None`` in runs recorded before it was, where it is the task's).
    """

    child_id: str
    agent: str
    goal: str
    parent_agent: str
    parent_subject: str | None = None


class ChildEvent(EventData):
    """``child``: a spawned child finished; ``shown`` is what its parent's prompt got."""

    child_id: str
    agent: str
    status: str
    result: str | None
    error: str | None
    shown: str
    shown_sha256: str


class SessionStepEvent(EventData):
    """``step`` of a child's session (subject ``child:<id>``)."""

    index: int
    kind: str
    ok: bool
    content_sha256: str
    data: dict[str, Any]


class AnalysisStepEvent(EventData):
    """``step`` of a built-in analysis step run in place of a model (subject ``task:<id>``)."""

    run: str
    files: dict[str, str]
    results: dict[str, str]
    failed: list[str]
    sha256: str


class LimitExceededEvent(EventData):
    """``limit_exceeded``: an agent's limit stopped it."""

    limit: str
    value: int | float | None
    maximum: int | float | None
    error: str


class FilesEvent(EventData):
    """``files``: the files an isolated task was given (path → SHA-256 of the text)."""

    files: dict[str, str]


class FileClarificationEvent(EventData):
    """``clarification`` in which an isolated subagent asked for a project file."""

    round: int
    kind: Literal[ClarificationKind.FILE]
    path: str
    served: bool
    sha256: str | None
    answer: str | None


class QuestionClarificationEvent(EventData):
    """``clarification`` in which an isolated subagent asked a question."""

    round: int
    kind: Literal[ClarificationKind.QUESTION]
    question: str
    answer: str
    answered_by: str


class IsolatedContextEvent(EventData):
    """``isolated_context``: what an isolated dispatch's prompt was made of."""

    agent: str
    prompt_sha256: str
    items: dict[str, str]


class ArchitectureEvent(EventData):
    """``architecture``: the project's architectural context, as given to isolated tasks."""

    project: str
    text: str
    sha256: str


class McpCallEvent(EventData):
    """``mcp_call``: where a tool call went (an MCP server) and how it ended."""

    tool_call_id: str
    server: str
    tool: str
    transport: str
    where: str
    duration_ms: int | None = None
    error: str | None = None
    bytes: int | None = None
    truncated: bool | None = None
    shared: bool | None = None
    """Whether the server is declared ``share: true`` (one process for every agent)."""


class OffloadedEvent(EventData):
    """``offloaded``: a long tool output kept in the workspace, a preview in the prompt."""

    tool_call_id: str
    reference: str
    sha256: str
    chars: int
    lines: int


class AnswerMarkedEvent(EventData):
    """``answer_marked``: a task's answer was kept with marks (cut off, or looping)."""

    truncated: bool
    repetitive: bool


class ApprovalRequestedEvent(EventData):
    """``awaiting_approval``: a tool call or a task waits for a person's decision.

    ``reruns`` (a ``rerun`` request) is the id of the ``tool_started`` event of the run that
    may have happened, which the request would run again: each rerun is a request of its
    own. ``None`` for other kinds, and for rerun requests recorded before it was recorded.
    """

    call_id: str
    kind: ApprovalKind
    task_id: str
    agent: str
    tool: str | None
    arguments: dict[str, Any] | None
    arguments_sha256: str | None
    reruns: str | None = None


class ApprovalDecidedEvent(EventData):
    """``approval_decided``: a person's decision on an approval request."""

    call_id: str
    kind: ApprovalKind
    task_id: str
    agent: str
    tool: str | None
    arguments_sha256: str | None
    decision: Literal["approved", "denied"]
    by: str
    reason: str | None
    reruns: str | None = None  # its request's (`ApprovalRequestedEvent`)


class WorkerLostEvent(EventData):
    """``worker_lost``: a Ray worker died during a call."""

    worker: int
    model_id: str
    error: str
    retry: bool


class GrantWithheldEvent(EventData):
    """``grant_withheld``: a store operation refused because the caller lacks the grant.

    A delegate or child acts with at most its caller's grants; ``chain`` is the delegation
    chain the operation came through.
    """

    tool_call_id: str
    agent: str
    namespace: str
    operation: str
    chain: list[str]


class ToolsWithheldEvent(EventData):
    """``tools_withheld``: ``tools:`` entries a delegate or child was not given.

    An agent acting for another is given only the tools its caller may call too (workspace
    tools aside); ``tools`` are those of its own it was not offered, sorted.
    """

    agent: str
    tools: list[str]


class CompactedEvent(EventData):
    """``compacted``: earlier tool steps of a loop folded into one-line summaries."""

    tool_call_ids: list[str]
    reason: str
    keep_recent: int


class RecordedToolCall(EventData):
    """One tool call a model answer asked for, as ``model_tool_calls`` records it."""

    id: str
    name: str
    arguments: dict[str, Any]


class ModelToolCallsEvent(EventData):
    """``model_tool_calls``: the tool calls a model answer asked for (recorded with it)."""

    call_id: str
    tool_calls: list[RecordedToolCall]


class ToolStartedEvent(EventData):
    """``tool_started``: a tool call is about to run (committed before its side effect)."""

    tool_call_id: str
    step: int
    name: str
    arguments_sha256: str
    idempotent: bool
    replay: bool


class ReplayedEvent(EventData):
    """``replayed``: a resumed run took a step from its record instead of redoing it.

    ``sha256`` is the digest of what the loop was given: a model call's answer
    (`answer_sha256`) or a tool call's result.
    """

    record: Literal[RecordKind.CALL, RecordKind.TOOL_CALL]
    original: str
    sha256: str


class ReplayDeclinedEvent(EventData):
    """``replay_declined``: a finished tool call run again, not replayed, and why.

    ``replacement`` is the id it runs again under (``None`` in runs recorded before it was):
    a later resume matches that run, not the original, to the call's place in the answer.
    """

    record: Literal[RecordKind.TOOL_CALL]
    original: str
    why: str
    replacement: str | None = None


class PlanEvent(EventData):
    """``plan`` (subject ``plan``): a plan-only run's tasks, by digest (`tasks_sha256`)."""

    tasks_sha256: str
    tasks: int


class PlanLinkEvent(EventData):
    """``plan`` (subject ``run``): the plan a run of a planned team file replays.

    ``edited`` is whether its tasks differ from the planned ones (``tasks_sha256`` against
    ``planned_tasks_sha256``).
    """

    plan_run_id: str
    planned_tasks_sha256: str
    tasks_sha256: str
    edited: bool


class ReviewRoundEvent(EventData):
    """``review_round``: one reviewer's verdict on one round's candidate (review loop)."""

    task_id: str
    round: int
    stage: int
    reviewer: str
    accepted: bool
    findings: str
    candidate_sha256: str


class PriceData(EventData):
    """One model's price in a ``budget`` event (US dollars per million tokens)."""

    input_per_mtok: float
    output_per_mtok: float


class BudgetEvent(EventData):
    """``budget``: the run's budget for this session (`RunBudget.to_dict`); ``None``: no cap."""

    tokens: int | None
    cost_usd: float | None
    prices: dict[str, PriceData]


class HookItem(EventData):
    """One item a hook offered a task's prompt (``hook:<ref>``), with its text's digest."""

    ref: str
    title: str
    sha256: str


class HookContextEvent(EventData):
    """``hook_context`` (subject ``task:<id>``): what the user's hooks offered the task."""

    items: list[HookItem]


class UserMessageEvent(EventData):
    """``user_message`` (subject ``conversation:<agent>``): a chat received the user's message.

    Recorded once, when the message joins the conversation (turn ``turn_id``), before any
    prompt shows it; ``sha256`` is the digest of its text.
    """

    turn_id: str
    sha256: str


SCHEMAS: Mapping[EventKind, tuple[type[EventData], ...]] = {
    EventKind.SPAWN: (SpawnEvent,),
    EventKind.CHILD: (ChildEvent,),
    EventKind.STEP: (SessionStepEvent, AnalysisStepEvent),
    EventKind.LIMIT_EXCEEDED: (LimitExceededEvent,),
    EventKind.FILES: (FilesEvent,),
    EventKind.CLARIFICATION: (FileClarificationEvent, QuestionClarificationEvent),
    EventKind.ISOLATED_CONTEXT: (IsolatedContextEvent,),
    EventKind.ARCHITECTURE: (ArchitectureEvent,),
    EventKind.MCP_CALL: (McpCallEvent,),
    EventKind.OFFLOADED: (OffloadedEvent,),
    EventKind.ANSWER_MARKED: (AnswerMarkedEvent,),
    EventKind.AWAITING_APPROVAL: (ApprovalRequestedEvent,),
    EventKind.APPROVAL_DECIDED: (ApprovalDecidedEvent,),
    EventKind.WORKER_LOST: (WorkerLostEvent,),
    EventKind.GRANT_WITHHELD: (GrantWithheldEvent,),
    EventKind.TOOLS_WITHHELD: (ToolsWithheldEvent,),
    EventKind.COMPACTED: (CompactedEvent,),
    EventKind.MODEL_TOOL_CALLS: (ModelToolCallsEvent,),
    EventKind.TOOL_STARTED: (ToolStartedEvent,),
    EventKind.REPLAYED: (ReplayedEvent,),
    EventKind.REPLAY_DECLINED: (ReplayDeclinedEvent,),
    EventKind.PLAN: (PlanEvent, PlanLinkEvent),
    EventKind.REVIEW_ROUND: (ReviewRoundEvent,),
    EventKind.BUDGET: (BudgetEvent,),
    EventKind.HOOK_CONTEXT: (HookContextEvent,),
    EventKind.USER_MESSAGE: (UserMessageEvent,),
}
"""Every event kind's model(s); a kind with two shapes is read as the first that fits."""


def _read(kind: str, data: Mapping[str, Any]) -> EventData | str:
    """The model instance, or why the data does not fit."""
    try:
        models = SCHEMAS[EventKind(kind)]
    except ValueError:
        return f"unknown event kind {kind!r}"
    first: ValidationError | None = None
    for model in models:
        try:
            return model.model_validate(dict(data))
        except ValidationError as exc:
            first = first or exc
    assert first is not None
    error = first.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "data"
    return f"a '{kind}' event's {where}: {error['msg']}"


def parse_event(kind: str, data: Mapping[str, Any]) -> EventData:
    """Read one event's data through its kind's model.

    Args:
        kind: The event's kind (an `EventKind` value).
        data: Its recorded data.

    Returns:
        The model instance (`SpawnEvent`, `ChildEvent` ...).

    Raises:
        ConfigError: The kind is unknown, or the data does not match its schema; the message
            names the kind and the first field at fault.
    """
    read = _read(kind, data)
    if isinstance(read, str):
        raise ConfigError(read, field="data")
    return read


def dump_event(kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The data to store for an event: validated, JSON-ready, without fields left unset.

    Raises:
        ConfigError: As `parse_event`.
    """
    return parse_event(kind, data).model_dump(mode="json", exclude_unset=True)


def event_problem(kind: str, data: Mapping[str, Any]) -> str | None:
    """Why a recorded event does not match its schema, or ``None`` when it does."""
    read = _read(kind, data)
    return read if isinstance(read, str) else None
