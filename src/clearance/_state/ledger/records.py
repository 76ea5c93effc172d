"""The records a run ledger returns: runs, tasks, model calls, tool calls, events, chain entries.

Each is a frozen dataclass; the ``*_record`` functions build one from a row of its table
(read with `tolerant_columns`). Every field is checked against its declared type first (text,
a time, whole numbers >= 0, a finite latency: `clearance._state.ledger.row_checks`), and a
row's JSON for the shape every reader relies on (a call's messages and manifest items, an
event's data, a tool call's arguments): a row edited into anything else is a
`MalformedRecord` naming the record and the field, never a ``TypeError`` deep in ``verify``,
``inspect`` or ``resume``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Row

from clearance._core.errors import LedgerError, MalformedRecord
from clearance._core.reasons import bounded_reason
from clearance._state.ledger.row_checks import chain_problem as _chain_problem
from clearance._state.ledger.row_checks import field_problems as _problem
from clearance._state.ledger.row_checks import flag_problem as _flag_problem
from clearance._state.ledger.row_checks import graph_problem as _graph_problem
from clearance._state.ledger.row_checks import record_name
from clearance._state.ledger.row_checks import shape_problem as _shape_problem
from clearance._state.ledger.row_checks import usage_problem as _usage_problem
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
        lease_expires_at: When the lease of the process running it ends unless renewed
            (aware UTC), or ``None`` when no process holds it (`clearance._state.lease`).
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
    lease_expires_at: datetime | None = None


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
        store_reads: Store entries the call read: ``{"namespace", "key", "sha256"}`` each, with
            ``"updated_at"`` (ISO 8601) and ``"writer"`` (the agent that last wrote the entry)
            in runs recorded since they were, and ``"version"`` (the entry's write count,
            `StoreEntry.version`) in runs recorded since it was.
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
    store_reads: list[dict[str, Any]]
    chain: dict[str, Any] | None
    created_at: datetime


def usage_of(row: Row[Any]) -> Usage:
    """The usage columns of a ``runs`` or ``calls`` row, as stored (checked by its record)."""
    return Usage(
        requests=row.requests,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        # Calls only (runs have no such column); NULL where the server reported none.
        cached_prompt_tokens=getattr(row, "cached_prompt_tokens", None),
        counted=bool(getattr(row, "usage_counted", None)),  # calls only: 1 when counted
    )


def _raise(what: str, problem: str | None) -> None:
    if problem is not None:
        raise MalformedRecord(f"{what} is malformed: {problem}")


def _from_row(cls: type[_R], row: Row[Any], **derived: Any) -> _R:
    """A record of ``cls`` from ``row``: each field from the column of its name.

    A field with no column of its name is given in ``derived`` (``usage``, a boolean held
    as an integer...). So a new column read as it is stored is one field of the record.
    """
    columns = row._mapping
    values = {f.name: columns[f.name] for f in fields(cls) if f.name not in derived}
    return cls(**values, **derived)


def run_record(row: Row[Any], *, totals: bool = True) -> RunRecord:
    """The `RunRecord` of a ``runs`` row.

    Args:
        row: The row.
        totals: Whether to check the run's token totals too. A listing of runs, which
            shows none, leaves them as stored (a consumer checks them before it sums them),
            so one run whose totals were edited does not take the list down.

    Raises:
        MalformedRecord: A field is not of its type (text, a time, whole numbers >= 0), its
            config is not an object, or its graph not a list of tasks (`graph_problem`); the
            message names the run and the field.
    """
    problem = _problem(row, RunRecord)
    if problem is None and not isinstance(row.config, dict):
        problem = "its config is not an object"
    elif problem is None:
        problem = _graph_problem(row.graph)
    if problem is None and totals:
        problem = _usage_problem(row)
    _raise(f"run {record_name(row.run_id)}", problem)
    return _from_row(RunRecord, row, usage=usage_of(row))


def task_record(row: Row[Any]) -> TaskRecord:
    """The `TaskRecord` of a ``tasks`` row.

    Raises:
        MalformedRecord: A field is not of its type (text, a time), or its ``depends_on``
            is not a list of task ids; the message names the task, its run and the field.
    """
    depends_on = row.depends_on
    problem = _problem(row, TaskRecord)
    if problem is None and not (
        isinstance(depends_on, list) and all(isinstance(d, str) for d in depends_on)
    ):
        problem = "its depends_on is not a list of task ids"
    _raise(f"task {record_name(row.task_id)} of run {record_name(row.run_id)}", problem)
    return _from_row(TaskRecord, row, depends_on=tuple(depends_on))


def call_record(row: Row[Any]) -> CallRecord:
    """The `CallRecord` of a ``calls`` row.

    Raises:
        MalformedRecord: Its messages or manifest are not of the shape the ledger writes, a
            field is not of its type (text, a time, a latency that is a finite number of
            seconds >= 0, token counts that are whole numbers >= 0), or its parameters are
            not an object; the message names the call and the field.
    """
    parameters = getattr(row, "parameters", None)
    problem = (
        _problem(row, CallRecord)
        or _shape_problem(row.messages, row.manifest)
        or _usage_problem(row)
        or _flag_problem(row, "pending")
    )
    if problem is None and parameters is not None and not isinstance(parameters, dict):
        problem = "its parameters are not an object"
    _raise(f"call {record_name(row.call_id)}", problem)
    return _from_row(
        CallRecord, row, usage=usage_of(row), pending=bool(row.pending), parameters=parameters
    )


def event_record(row: Row[Any]) -> EventRecord:
    """The `EventRecord` of an ``events`` row.

    Raises:
        MalformedRecord: A field is not of its type (text, a time), or its data is not an
            object; the message names the event and the field.
    """
    problem = _problem(row, EventRecord)
    if problem is None and not isinstance(row.data, dict):
        problem = "its data is not an object"
    _raise(f"event {record_name(row.event_id)}", problem)
    return _from_row(EventRecord, row)


def tool_call_record(row: Row[Any]) -> ToolCallRecord:
    """The `ToolCallRecord` of a ``tool_calls`` row.

    Raises:
        MalformedRecord: A field is not of its type (text, a time, a whole number of
            steps), its arguments are not an object, its store reads not a list of objects
            or its chain neither a delegation chain nor ``None`` (`chain_problem`); the
            message names the tool call, its run and the field.
    """
    problem = _problem(row, ToolCallRecord) or _flag_problem(row, "is_error")
    if problem is None and not isinstance(row.arguments, dict):
        problem = "its arguments are not an object"
    elif problem is None and not (
        isinstance(row.store_reads, list) and all(isinstance(r, dict) for r in row.store_reads)
    ):
        problem = "its store reads are not a list of objects"
    elif problem is None:
        problem = _chain_problem(row.chain)
    what = f"tool call {record_name(row.tool_call_id)} of run {record_name(row.run_id)}"
    _raise(what, problem)
    return _from_row(ToolCallRecord, row, is_error=bool(row.is_error))


def chain_entry(row: Row[Any]) -> ChainEntry:
    """The `ChainEntry` of a ``ledger_entries`` row.

    Raises:
        MalformedRecord: A field is not of its type (text, a whole number); the message
            names the entry's position and its run.
    """
    what = f"hash-chain entry {record_name(row.seq)} of run {record_name(row.run_id)}"
    _raise(what, _problem(row, ChainEntry))
    return _from_row(ChainEntry, row)


def unknown_run(run_id: str, url: str) -> LedgerError:
    """The error for a run id the ledger at ``url`` does not hold.

    The id is shown as given, cut after 100 characters: it comes from a command line or a
    caller, and a megabyte of it would be echoed back whole.
    """
    shown = bounded_reason(repr(run_id), 100)
    return LedgerError(f"unknown run {shown} in the run ledger at {url}")
