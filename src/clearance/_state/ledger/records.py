"""The records a run ledger returns: runs, tasks, model calls, tool calls, events, chain entries.

Each is a frozen dataclass; the ``*_record`` functions build one from a row of its table. A
row's JSON is checked for the shape every reader relies on (a call's messages and manifest
items, an event's data, a tool call's arguments): a row edited into another shape is a
`MalformedRecord` naming it, never a ``TypeError`` deep in ``verify`` or ``inspect``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Row

from clearance._core.errors import LedgerError, MalformedRecord
from clearance._core.reasons import bounded_reason
from clearance.models._base import Usage

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "unknown_run",
    "CallRecord",
    "chain_entry",
    "ChainEntry",
    "EventRecord",
    "RunRecord",
    "TaskRecord",
    "ToolCallRecord",
    "call_record",
    "event_record",
    "run_record",
    "task_record",
    "tool_call_record",
    "usage_of",
]

_R = TypeVar("_R", bound="DataclassInstance")


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    """One run as the ledger holds it.

    Attributes:
        run_id: The run's id.
        team: The team's name.
        goal: The goal given to `run_team`, or ``None`` for a run of explicit tasks.
        status: ``"running"``, ``"completed"`` or ``"failed"``.
        graph: The task graph (`TaskGraph.to_dict` form), or ``None`` before the
            coordinator has planned.
        config: Run settings recorded at the start (JSON-ready mapping).
        synthesis: The coordinator's final answer, if any.
        error: Why the run failed, if it did.
        usage: Total token usage of the run, as given to `RunLedger.finish_run`.
        created_at: When the run started (aware UTC).
        finished_at: When it finished (aware UTC), or ``None`` while running.
    """

    run_id: str
    team: str
    goal: str | None
    status: str
    graph: list[dict[str, Any]] | None
    config: dict[str, Any]
    synthesis: str | None
    error: str | None
    usage: Usage
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskRecord:
    """The latest recorded state of one task of a run.

    Attributes:
        run_id: The run.
        task_id: The task's id.
        title: Its title.
        assignee: The agent assigned to it.
        depends_on: Ids of its dependencies.
        memory_scope: ``"dependencies"``, ``"transitive"`` or ``"all"``.
        status: A `TaskStatus` value (``"pending"``, ``"running"``, ``"completed"``...).
        result: The result text once completed.
        error: Why it failed or was skipped.
        started_at: When it started running (aware UTC), if it did.
        finished_at: When it reached a final status (aware UTC), if it did.
    """

    run_id: str
    task_id: str
    title: str
    assignee: str
    depends_on: tuple[str, ...]
    memory_scope: str
    status: str
    result: str | None
    error: str | None
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, kw_only=True, slots=True)
class CallRecord:
    """One model call: exactly what the model received, and what came back.

    Attributes:
        call_id: The call's id (``call_...``).
        run_id: The run.
        subject: ``"task:<id>"``, ``"synthesis"`` or ``"plan"``.
        agent: The agent the prompt was built for.
        model_id: The ``"provider:name"`` id called.
        messages: The prompt's messages, ``[{"role": ..., "content": ...}, ...]``.
        manifest: The prompt's manifest (`ContextManifest.to_dict` form).
        prompt_sha256: Hash of the messages (`messages_sha256`), for ``verify``.
        record_sha256: Digest of messages and manifest (`call_record_sha256`), for ``verify``.
        response: The completion text, or ``None`` if the call failed.
        finish_reason: Why generation stopped, if known.
        usage: Tokens of the call; all zero when the call failed.
        error: Why the call failed, or ``None``.
        started_at: When the call started (aware UTC).
        latency_s: Wall-clock seconds the call took.
        pending: Whether the request was recorded as sent and no outcome was recorded after
            (the process stopped while the call was in flight).
        parameters: What the model was asked besides the prompt (`ModelRequest.parameters`:
            sampling, max tokens, tools offered, JSON schema), or ``None`` for a call
            recorded without them.
    """

    call_id: str
    run_id: str
    subject: str
    agent: str
    model_id: str
    messages: list[dict[str, Any]]
    manifest: dict[str, Any]
    prompt_sha256: str
    record_sha256: str | None
    response: str | None
    finish_reason: str | None
    usage: Usage
    error: str | None
    started_at: datetime
    latency_s: float
    pending: bool = False
    parameters: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class EventRecord:
    """One event of a run (`RunLedger.record_event`).

    Attributes:
        event_id: The event's id (``evt_...``).
        run_id: The run.
        kind: What happened (``"spawn"``, ``"clarification"``, ``"limit_exceeded"``...).
        subject: What it happened to (a task, an agent, a call).
        data: The event's JSON-ready details.
        created_at: When it was recorded (aware UTC).
    """

    event_id: str
    run_id: str
    kind: str
    subject: str
    data: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class ChainEntry:
    """One entry of a run's hash chain (see `clearance._state.chain`).

    Attributes:
        run_id: The run.
        seq: Position in the run's chain, from 1.
        kind: The kind of record (``"run"``, ``"task"``, ``"call"``, ``"event"``...), or
            ``"group"`` for an entry chaining several records.
        subject: The record's id (a task id, a call id...); a group's number of records.
        payload_sha256: Digest of the record's fields when the entry was written; a group's
            digest of its ``records``.
        chain_sha256: The chain value after this entry.
        records: A group's records, ``[[kind, subject, payload_sha256], ...]`` as canonical
            JSON text in write order; ``None`` for an entry of one record.
    """

    run_id: str
    seq: int
    kind: str
    subject: str
    payload_sha256: str
    chain_sha256: str
    records: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRecord:
    """One recorded tool call of an agent loop.

    Attributes:
        tool_call_id: The call's id, unique within the run (the origin ``tool:<id>``).
        run_id: The run.
        subject: The model call subject it belongs to (``task:<id>`` or
            ``delegation:<tool call id>``).
        agent: The agent that called the tool.
        step: The loop step (1-based) whose model answer asked for the call.
        name: The tool's name.
        arguments: The arguments as the model gave them.
        result: The text returned to the model (an error message when ``is_error``).
        is_error: Whether the call failed or was refused.
        store_reads: Store entries the call read: ``{"namespace", "key", "sha256"}`` each.
        chain: For ``delegate`` calls, the delegation chain passed to the delegate
            (`DelegationChain.to_dict`); ``None`` otherwise.
        created_at: When it was recorded (aware UTC).
    """

    tool_call_id: str
    run_id: str
    subject: str
    agent: str
    step: int
    name: str
    arguments: dict[str, Any]
    result: str
    is_error: bool
    store_reads: list[dict[str, str]]
    chain: dict[str, Any] | None
    created_at: datetime


def usage_of(row: Row[Any]) -> Usage:
    """The usage columns of a ``runs`` or ``calls`` row."""
    return Usage(
        requests=row.requests,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        # Calls only (runs have no such column); NULL where the server reported none.
        cached_prompt_tokens=getattr(row, "cached_prompt_tokens", None),
        counted=bool(getattr(row, "usage_counted", None)),  # calls only: 1 when counted
    )


def _from_row(cls: type[_R], row: Row[Any], **derived: Any) -> _R:
    """A record of ``cls`` from ``row``: each field from the column of its name.

    A field with no column of its name is given in ``derived`` (``usage``, a boolean held
    as an integer...). So a new column read as it is stored is one field of the record.
    """
    columns = row._mapping
    values = {f.name: columns[f.name] for f in fields(cls) if f.name not in derived}
    return cls(**values, **derived)


def run_record(row: Row[Any]) -> RunRecord:
    """The `RunRecord` of a ``runs`` row.

    Raises:
        MalformedRecord: Its config is not an object, or its graph not a list of objects.
    """
    problem = None
    if not isinstance(row.config, dict):
        problem = "its config is not an object"
    elif row.graph is not None and not (
        isinstance(row.graph, list) and all(isinstance(t, dict) for t in row.graph)
    ):
        problem = "its graph is not a list of tasks"
    if problem is not None:
        raise MalformedRecord(f"run {row.run_id} is malformed: {problem}")
    return _from_row(RunRecord, row, usage=usage_of(row))


def task_record(row: Row[Any]) -> TaskRecord:
    """The `TaskRecord` of a ``tasks`` row.

    Raises:
        MalformedRecord: Its ``depends_on`` is not a list of task ids.
    """
    depends_on = row.depends_on
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        raise MalformedRecord(
            f"task {row.task_id} of run {row.run_id} is malformed: its depends_on is not a "
            "list of task ids"
        )
    return _from_row(TaskRecord, row, depends_on=tuple(depends_on))


def _shape_problem(messages: Any, manifest: Any) -> str | None:
    """What in a call's messages or manifest is not of the shape the ledger writes, if any."""
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        return "its messages are not a list of {role, content} texts"
    if not isinstance(manifest, dict):
        return "its manifest is not an object"
    items = manifest.get("items", [])
    if not isinstance(items, list) or not all(
        isinstance(i, dict)
        and isinstance(i.get("origin"), str)
        and isinstance(i.get("title"), str)
        and type(i.get("tokens")) is int
        for i in items
    ):
        return "its manifest's items are not a list of {origin, title, tokens}"
    for key, kinds in (("subject", str), ("agent", str), ("prompt_sha256", str),
                       ("total_tokens", int), ("clearance", (dict, type(None)))):  # fmt: skip
        if key in manifest and (
            not isinstance(manifest[key], kinds) or isinstance(manifest[key], bool)
        ):
            return f"its manifest's {key} is not of its type"
    return None


def _checked(record: _R, problem: str | None, what: str) -> _R:
    if problem is not None:
        raise MalformedRecord(f"{what} is malformed: {problem}")
    return record


def call_record(row: Row[Any]) -> CallRecord:
    """The `CallRecord` of a ``calls`` row.

    Raises:
        MalformedRecord: Its messages or manifest are not of the shape the ledger writes.
    """
    problem = _shape_problem(row.messages, row.manifest)
    record = _from_row(
        CallRecord,
        row,
        usage=usage_of(row),
        pending=bool(row.pending),
        parameters=getattr(row, "parameters", None),
    )
    return _checked(record, problem, f"call {row.call_id}")


def event_record(row: Row[Any]) -> EventRecord:
    """The `EventRecord` of an ``events`` row.

    Raises:
        MalformedRecord: Its data is not an object.
    """
    problem = None if isinstance(row.data, dict) else "its data is not an object"
    return _checked(_from_row(EventRecord, row), problem, f"event {row.event_id}")


def tool_call_record(row: Row[Any]) -> ToolCallRecord:
    """The `ToolCallRecord` of a ``tool_calls`` row.

    Raises:
        MalformedRecord: Its arguments are not an object or its store reads not a list.
    """
    problem = None
    if not isinstance(row.arguments, dict):
        problem = "its arguments are not an object"
    elif not isinstance(row.store_reads, list):
        problem = "its store reads are not a list"
    record = _from_row(ToolCallRecord, row, is_error=bool(row.is_error))
    return _checked(record, problem, f"tool call {row.tool_call_id}")


def chain_entry(row: Row[Any]) -> ChainEntry:
    """The `ChainEntry` of a ``ledger_entries`` row."""
    return _from_row(ChainEntry, row)


def unknown_run(run_id: str, url: str) -> LedgerError:
    """The error for a run id the ledger at ``url`` does not hold.

    The id is shown as given, cut after 100 characters: it comes from a command line or a
    caller, and a megabyte of it would be echoed back whole.
    """
    shown = bounded_reason(repr(run_id), 100)
    return LedgerError(f"unknown run {shown} in the run ledger at {url}")
