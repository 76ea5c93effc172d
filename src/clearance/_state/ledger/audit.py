"""One read of every record of a run, for ``clearance verify`` (`LedgerReads.audit_rows`).

Verify needs each record twice: as its record (the checks) and as its row (the hash chain's
digest). Reading the tables once for each made a big run's calls, with every prompt, sit in
memory twice. Here each table is read once, in one snapshot, each row checked as its record
is (`row_checks`). The calls are read last, in two statements over the same snapshot: every
column but the prompts (``messages``), then the prompts alone, one call at a time, each call
handed whole to the caller and only what the caller keeps of its row staying (verify keeps
the row without its prompt), so memory grows with the largest prompt, not with the run's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Table, select

from clearance._core.errors import MalformedRecord
from clearance._state.db.types import Unreadable, tolerant_columns
from clearance._state.ledger.records import (
    CallRecord,
    EventRecord,
    RunRecord,
    TaskRecord,
    ToolCallRecord,
    call_record,
    event_record,
    run_record,
    task_record,
    tool_call_record,
)
from clearance._state.ledger.row_checks import record_name, row_problem
from clearance._state.ledger.schema import (
    CALLS,
    EVENTS,
    MESSAGES,
    RUNS,
    TASK_REASONS,
    TASKS,
    TOOL_CALLS,
)
from clearance._state.ledger.task_view import merge_tasks

__all__ = ["AuditRows", "CallSink", "KeepCall", "message_record", "read_audit_rows"]

_R = TypeVar("_R")


@dataclass(slots=True)
class AuditRows:
    """A run's records, as one read took them.

    Attributes:
        rows: Every row by kind of chain entry, in the order recorded, as `record_rows`
            returns them; a call's row as the `CallSink` returned it.
        run: The run's record (``None`` for an unknown run).
        tasks: The latest record of each task, in graph order (as `LedgerReads.tasks`).
        task_reasons: Task id to every reason it was recorded with, oldest first.
        messages: The messages, as `LedgerReads.messages` returns them.
        tool_calls: The tool calls, in the order recorded.
        events: The events, in the order recorded.
        calls: The model calls, in the order recorded, without their prompts (``messages``
            is empty: each call's prompt went to the `CallSink` as it was read).
    """

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    run: RunRecord | None = None
    tasks: list[TaskRecord] = field(default_factory=list)
    task_reasons: dict[str, list[str]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)


KeepCall = Callable[[CallRecord, dict[str, Any]], dict[str, Any]]
"""What to keep of one call's row: given its record and row, prompt included, the row kept."""

CallSink = Callable[[AuditRows], KeepCall]
"""Given the run's records (its calls without their prompts), what to keep of each call's
row as its prompt is read."""


def read_audit_rows(conn: Connection, run_id: str, sink: CallSink) -> AuditRows:
    """Every record of run ``run_id`` through ``conn``, each table read once (see the module).

    Raises:
        MalformedRecord: A row is not what its record holds, or holds what no write puts
            there (the message names the record and the field; as the ledger's other reads
            and `record_rows` name it).
    """
    found = AuditRows()
    rows = found.rows
    runs = [_checked("run", row, run_record) for row in _rows(conn, RUNS, run_id)]
    rows["run"] = [values for values, _ in runs]
    found.run = runs[0][1] if runs else None
    tasks = [_checked("task", row, task_record) for row in _rows(conn, TASKS, run_id)]
    rows["task"] = [values for values, _ in tasks]
    graph = found.run.graph if found.run is not None else None
    found.tasks = merge_tasks(run_id, graph, [t for _, t in tasks]) if tasks else []
    rows["task_reason"] = []
    for row in _rows(conn, TASK_REASONS, run_id):
        _check_reason(row, run_id)
        rows["task_reason"].append(_values("task_reason", row))
        found.task_reasons.setdefault(row.task_id, []).append(row.error)
    messages = [_checked("message", row, message_record) for row in _rows(conn, MESSAGES, run_id)]
    rows["message"] = [values for values, _ in messages]
    found.messages = [m for _, m in messages]
    tools = [
        _checked("tool_call", row, tool_call_record) for row in _rows(conn, TOOL_CALLS, run_id)
    ]
    rows["tool_call"] = [values for values, _ in tools]
    found.tool_calls = [t for _, t in tools]
    events = [_checked("event", row, event_record) for row in _rows(conn, EVENTS, run_id)]
    rows["event"] = [values for values, _ in events]
    found.events = [e for _, e in events]
    # The calls: first everything but their prompts (what the checks of every call read),
    # then the prompts, one call at a time, each handed to the sink and let go.
    columns = [c for c in tolerant_columns(CALLS) if c.name != "messages"]
    query = select(*columns).where(CALLS.c.run_id == run_id).order_by(CALLS.c.ordinal)
    heads = [dict(row._mapping) for row in conn.execute(query)]
    found.calls = [call_record(_row({**head, "messages": []})) for head in heads]
    keep = sink(found)
    prompts = (
        select(CALLS.c.call_id, *[c for c in tolerant_columns(CALLS) if c.name == "messages"])
        .where(CALLS.c.run_id == run_id)
        .order_by(CALLS.c.ordinal)
    )
    rows["call"] = []
    for head, prompt in zip(heads, conn.execute(prompts), strict=False):
        if prompt.call_id != head["call_id"]:  # one snapshot: never, unless the table moved
            raise MalformedRecord(f"the calls of run {record_name(run_id)} moved while read")
        row = _row({**head, "messages": prompt.messages})
        rows["call"].append(keep(call_record(row), _values("call", row)))
    if len(rows["call"]) != len(heads):
        raise MalformedRecord(f"the calls of run {record_name(run_id)} moved while read")
    return found


def _rows(conn: Connection, table: Table, run_id: str) -> Any:
    query = select(*tolerant_columns(table)).where(table.c.run_id == run_id)
    if "ordinal" in table.c:
        query = query.order_by(table.c.ordinal)
    return conn.execute(query)


def _checked(kind: str, row: Any, record: Callable[[Any], _R]) -> tuple[dict[str, Any], _R]:
    """A row's values and its record, checked as `record_rows` checks them."""
    made = record(row)
    return _values(kind, row), made


def _values(kind: str, row: Any) -> dict[str, Any]:
    values = dict(row._mapping)
    problem = row_problem(kind, values)
    if problem is not None:
        raise MalformedRecord(problem)
    return values


class _Row:
    """A row's values read as a `Row` is: by attribute and through ``_mapping``."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: dict[str, Any]):
        self._mapping = mapping

    def __getattr__(self, name: str) -> Any:
        try:
            return self._mapping[name]
        except KeyError:
            raise AttributeError(name) from None


def _row(mapping: dict[str, Any]) -> Any:
    """``mapping`` as a row the record readers take (`_Row`)."""
    return _Row(mapping)


def _check_reason(row: Any, run_id: str) -> None:
    """A task reason's task id and text are text (as `LedgerReads.task_reasons` checks)."""
    for name in ("task_id", "error"):
        if type(row._mapping[name]) is not str:
            raise MalformedRecord(
                f"a task reason of task {record_name(row.task_id)} of run "
                f"{record_name(run_id)} is malformed: its {name} is not text"
            )


def message_record(row: Any) -> dict[str, Any]:
    """A ``messages`` row as `LedgerReads.messages` returns it, checked first."""
    for name in ("message_id", "sender", "recipient", "content"):
        value = row._mapping[name]
        if type(value) is not str:
            problem = value.problem if isinstance(value, Unreadable) else "is not text"
            raise MalformedRecord(_message_problem(row, name, problem))
    created = row.created_at
    if not isinstance(created, datetime):
        problem = created.problem if isinstance(created, Unreadable) else "is not a time"
        raise MalformedRecord(_message_problem(row, "created_at", problem))
    return {
        "id": row.message_id,
        "sender": row.sender,
        "recipient": row.recipient,
        "content": row.content,
        "created_at": created,
    }


def _message_problem(row: Any, name: str, problem: str) -> str:
    return (
        f"message {record_name(row.message_id)} of run {record_name(row.run_id)} is "
        f"malformed: its {name} {problem}"
    )
