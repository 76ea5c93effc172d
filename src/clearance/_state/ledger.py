"""`RunLedger`: the durable record of every run.

The ledger keeps, per run: the goal, the task graph, each task's latest state, every model
call (the prompt's messages, its manifest and hash, the response, usage and timing), the
messages agents exchanged, the synthesis and the total usage. ``clearance inspect``,
``verify`` and ``resume`` read it back.

Storage is SQLAlchemy Core on SQLite by default (``sqlite:///.clearance/runs.db``, relative to
the working directory); a PostgreSQL URL works the same way. On SQLite every connection uses
write-ahead logging (readers never block the writer), ``synchronous=NORMAL`` (a commit
survives a crash of the process; the last commits may be lost on power failure), enforced
foreign keys and a busy timeout, and writes take the write lock up front (``BEGIN
IMMEDIATE``) so two ledgers on one file queue behind each other instead of failing.

The schema is versioned the way simonw's ``llm`` does it: `_MIGRATIONS` is an ordered list
of functions, and the ``schema_version`` table records which of them a database has had.
Opening a ledger applies the missing ones, in order, in one transaction.

All timestamps are timezone-aware UTC datetimes. Every failure of the database surfaces as
`StoreError`, naming the operation and the URL (password masked).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Row,
    String,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    func,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, make_url

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import ConfigError, LedgerError, StoreError
from clearance._core.ids import new_id
from clearance._core.prompt import Prompt, canonical_json, sha256_text
from clearance._state.chain import (
    LEDGER_KEY_ENV,
    SUBJECT_FIELDS,
    chain_sha256,
    key_id,
    load_ledger_key,
    payload_sha256,
)
from clearance._state.database import (
    DatabaseBase,
    JSONText,
    Migration,
    _UTCDateTime,
    version_table,
)
from clearance._state.lease import LEASE_S, describe_owner, new_owner, owner_is_dead
from clearance._state.messages import Message
from clearance._state.queue import TaskState
from clearance._state.write_behind import PendingWrite, Rows, WriteBehind
from clearance.models._base import ModelResponse, Usage

__all__ = [
    "DEFAULT_LEDGER_URL",
    "CallRecord",
    "ChainEntry",
    "EventRecord",
    "RunLedger",
    "RunRecord",
    "TaskRecord",
    "ToolCallRecord",
    "call_record_sha256",
]

DEFAULT_LEDGER_URL = "sqlite:///.clearance/runs.db"
"""Where runs are recorded unless told otherwise (relative to the working directory)."""

RUN_STATUSES = ("running", "completed", "failed", "interrupted")
"""Statuses a run can have: ``running`` from `RunLedger.start_run` (or `reopen_run`) until
`finish_run`; ``interrupted`` when it was stopped and can be resumed."""


# -- schema -----------------------------------------------------------------------------


def _define_v1(metadata: MetaData) -> None:
    """Add the tables of schema version 1 to ``metadata``.

    Frozen: migration 1 creates exactly these tables. A later change to the schema is a new
    migration appended to `_MIGRATIONS` (``ALTER TABLE ...``) plus ``append_column`` on the
    module-level table it changes; never an edit here.
    """
    Table(
        "runs",
        metadata,
        Column("run_id", String(64), primary_key=True),
        Column("team", String(128), nullable=False),
        Column("goal", Text),
        Column("status", String(16), nullable=False),
        Column("graph", JSON(none_as_null=True)),
        Column("config", JSON, nullable=False),
        Column("synthesis", Text),
        Column("error", Text),
        Column("requests", Integer, nullable=False, default=0),
        Column("prompt_tokens", Integer, nullable=False, default=0),
        Column("completion_tokens", Integer, nullable=False, default=0),
        Column("created_at", _UTCDateTime, nullable=False),
        Column("finished_at", _UTCDateTime),
        Index("ix_runs_created_at", "created_at"),
    )
    Table(
        "tasks",
        metadata,
        # Insertion order of a task's first record: the order `tasks()` returns.
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
        Column("task_id", String(128), nullable=False),
        Column("title", Text, nullable=False),
        Column("assignee", String(128), nullable=False),
        Column("depends_on", JSON, nullable=False),
        Column("memory_scope", String(16), nullable=False),
        Column("status", String(16), nullable=False),
        Column("result", Text),
        Column("error", Text),
        Column("started_at", _UTCDateTime),
        Column("finished_at", _UTCDateTime),
        UniqueConstraint("run_id", "task_id", name="uq_tasks_run_task"),
        Index("ix_tasks_run_id", "run_id"),
    )
    Table(
        "calls",
        metadata,
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        Column("call_id", String(64), nullable=False, unique=True),
        Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
        Column("subject", String(160), nullable=False),
        Column("agent", String(128), nullable=False),
        Column("model_id", String(256), nullable=False),
        Column("messages", JSON, nullable=False),
        Column("manifest", JSON, nullable=False),
        Column("prompt_sha256", String(64), nullable=False),
        Column("response", Text),
        Column("finish_reason", String(64)),
        Column("requests", Integer, nullable=False),
        Column("prompt_tokens", Integer, nullable=False),
        Column("completion_tokens", Integer, nullable=False),
        Column("error", Text),
        Column("started_at", _UTCDateTime, nullable=False),
        Column("latency_s", Float, nullable=False),
        Index("ix_calls_run_subject", "run_id", "subject"),
    )
    Table(
        "messages",
        metadata,
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
        Column("message_id", String(128), nullable=False),
        Column("sender", String(128), nullable=False),
        Column("recipient", String(128), nullable=False),
        Column("content", Text, nullable=False),
        Column("created_at", _UTCDateTime, nullable=False),
        UniqueConstraint("run_id", "message_id", name="uq_messages_run_message"),
    )


_metadata = MetaData()
_define_v1(_metadata)
_runs = _metadata.tables["runs"]
_tasks = _metadata.tables["tasks"]
_calls = _metadata.tables["calls"]
_messages = _metadata.tables["messages"]

_schema_version = version_table("schema_version")


def _m001_create_tables(conn: Connection) -> None:
    """Version 1: runs, tasks, calls and messages."""
    metadata = MetaData()
    _define_v1(metadata)
    metadata.create_all(conn)


_calls.append_column(Column("record_sha256", String(64)))


def _m002_call_record_digest(conn: Connection) -> None:
    """Version 2: ``calls.record_sha256``, a digest of the call's messages and manifest."""
    conn.exec_driver_sql("ALTER TABLE calls ADD COLUMN record_sha256 VARCHAR(64)")


def call_record_sha256(messages: list[dict[str, Any]], manifest: dict[str, Any]) -> str:
    """Digest of a recorded call's messages and manifest, in canonical JSON.

    The SHA-256 of ``canonical_json({"messages": messages, "manifest": manifest})``.
    Recorded with the call; ``clearance verify`` recomputes it, so an edit of any field of a
    recorded prompt or manifest (a token count included) is detected.
    """
    return _record_sha256(canonical_json(messages), canonical_json(manifest))


def _record_sha256(messages_json: str, manifest_json: str) -> str:
    """`call_record_sha256` from the canonical JSON of the messages and of the manifest.

    Canonical JSON sorts keys at every level (``"manifest"`` before ``"messages"``), so the
    payload is the two texts spliced into the outer object: nothing is serialized twice.
    """
    return sha256_text(f'{{"manifest":{manifest_json},"messages":{messages_json}}}')


_task_reasons = Table(
    "task_reasons",
    _metadata,
    Column("ordinal", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("task_id", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("error", Text, nullable=False),
    Column("recorded_at", _UTCDateTime, nullable=False),
    Index("ix_task_reasons_run_task", "run_id", "task_id"),
)


def _m003_task_reasons(conn: Connection) -> None:
    """Version 3: ``task_reasons``, every failure, skip or interruption a task ever had.

    A resumed run overwrites a failed task's record when the task runs again; the reasons stay
    here, so ``clearance verify`` can still check a prompt that showed the old failure.
    """
    _task_reasons.create(conn)


_tool_calls = Table(
    "tool_calls",
    _metadata,
    Column("ordinal", Integer, primary_key=True, autoincrement=True),
    Column("tool_call_id", String(128), nullable=False),
    Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("subject", String(160), nullable=False),
    Column("agent", String(128), nullable=False),
    Column("step", Integer, nullable=False),
    Column("name", String(128), nullable=False),
    Column("arguments", JSON, nullable=False),
    Column("result", Text, nullable=False),
    Column("is_error", Integer, nullable=False),
    Column("store_reads", JSON, nullable=False),
    Column("chain", JSON),
    Column("created_at", _UTCDateTime, nullable=False),
    UniqueConstraint("run_id", "tool_call_id", name="uq_tool_calls_run_call"),
    Index("ix_tool_calls_run_subject", "run_id", "subject"),
)


def _m004_tool_calls(conn: Connection) -> None:
    """Version 4: ``tool_calls``, every tool call of an agent loop with its result."""
    _tool_calls.create(conn)


_entries = Table(
    "ledger_entries",
    _metadata,
    Column("ordinal", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("subject", String(160), nullable=False),
    Column("payload_sha256", String(64), nullable=False),
    Column("chain_sha256", String(64), nullable=False),
    UniqueConstraint("run_id", "seq", name="uq_ledger_entries_run_seq"),
)

_events = Table(
    "events",
    _metadata,
    Column("ordinal", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False, unique=True),
    Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("subject", String(160), nullable=False),
    Column("data", JSON, nullable=False),
    Column("created_at", _UTCDateTime, nullable=False),
    Index("ix_events_run_kind", "run_id", "kind"),
)

_runs.append_column(Column("chain_key_id", String(32)))
_calls.append_column(Column("pending", Integer, nullable=False, default=0))


def _m005_hash_chain(conn: Connection) -> None:
    """Version 5: the runs' hash chains, events, key ids and pending calls.

    Tables ``ledger_entries`` and ``events``; columns ``runs.chain_key_id`` (the id of the key
    a run is chained with) and ``calls.pending`` (sent, no outcome recorded yet).
    """
    _entries.create(conn)
    _events.create(conn)
    conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN chain_key_id VARCHAR(32)")
    conn.exec_driver_sql("ALTER TABLE calls ADD COLUMN pending INTEGER NOT NULL DEFAULT 0")


_runs.append_column(Column("owner", String(256)))
_runs.append_column(Column("lease_expires_at", _UTCDateTime))


def _m006_run_lease(conn: Connection) -> None:
    """Version 6: run leases, so that one run is run by one process at a time.

    Columns ``runs.owner`` (the process running it) and ``runs.lease_expires_at``.
    """
    conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN owner VARCHAR(256)")
    expires = "TIMESTAMP WITH TIME ZONE" if conn.dialect.name == "postgresql" else "DATETIME"
    conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN lease_expires_at {expires}")


_calls.append_column(Column("cached_prompt_tokens", Integer))


def _m007_cached_prompt_tokens(conn: Connection) -> None:
    """Version 7: ``calls.cached_prompt_tokens``, NULL where the server reported none."""
    conn.exec_driver_sql("ALTER TABLE calls ADD COLUMN cached_prompt_tokens INTEGER")


_MIGRATIONS: list[Migration] = [
    _m001_create_tables,
    _m002_call_record_digest,
    _m003_task_reasons,
    _m004_tool_calls,
    _m005_hash_chain,
    _m006_run_lease,
    _m007_cached_prompt_tokens,
]
"""Applied in order; migration ``i`` (0-based) brings a database to version ``i + 1``."""

SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this code reads and writes."""


def _build_task_rows(
    run_id: str, states: tuple[TaskState, ...], recorded_at: datetime | None
) -> Rows:
    """The task upserts of ``states``, and a reason row (at ``recorded_at``) per error."""
    rows: dict[str, list[dict[str, Any]]] = {"task": [_task_row(run_id, s) for s in states]}
    reasons = [
        {
            "run_id": run_id,
            "task_id": s.task.id,
            "status": str(s.status),
            "error": s.error,
            "recorded_at": recorded_at,
        }
        for s in states
        if s.error is not None
    ]
    if reasons:
        rows["task_reason"] = reasons
    return rows


def _task_row(run_id: str, state: TaskState) -> dict[str, Any]:
    task = state.task
    return {
        "run_id": run_id,
        "task_id": task.id,
        "title": task.title,
        "assignee": task.assignee,
        "depends_on": list(task.depends_on),
        "memory_scope": task.memory_scope,
        "status": str(state.status),  # a StrEnum: its value, without the slow `.value`
        "result": state.result,
        "error": state.error,
        "started_at": state.started_at,
        "finished_at": state.finished_at,
    }


def _last_upsert_per_task(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One upsert per task: its last row, at the position of its first.

    The task upsert overwrites every column but the key and the ordinal, so applying only a
    task's last row where its first row was leaves the same table (the same order included)
    as applying them all.
    """
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        merged[(row["run_id"], row["task_id"])] = row  # a dict keeps the first key's position
    return list(merged.values())


_WRITE_ORDER = (
    "run",
    "task",
    "task_reason",
    "message",
    "call",
    "call_finish",
    "tool_call",
    "event",
)
"""The order in which one transaction applies the kinds of queued rows (foreign keys first)."""

_CHUNK = 64
"""Writes turned into rows, or rows sent to the database, between two yields of the GIL."""


def _yield_gil() -> None:
    """Let another thread that waits for the interpreter lock run (``time.sleep(0)``)."""
    time.sleep(0)


# -- records ----------------------------------------------------------------------------


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
        kind: The kind of record (``"run"``, ``"task"``, ``"call"``, ``"event"``...).
        subject: The record's id (a task id, a call id...).
        payload_sha256: Digest of the record's fields when the entry was written.
        chain_sha256: The chain value after this entry.
    """

    run_id: str
    seq: int
    kind: str
    subject: str
    payload_sha256: str
    chain_sha256: str


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


# -- helpers ----------------------------------------------------------------------------


def _usage(row: Row[Any]) -> Usage:
    return Usage(
        requests=row.requests,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        cached_prompt_tokens=getattr(row, "cached_prompt_tokens", None),
    )


def _run_record(row: Row[Any]) -> RunRecord:
    return RunRecord(
        run_id=row.run_id,
        team=row.team,
        goal=row.goal,
        status=row.status,
        graph=row.graph,
        config=row.config,
        synthesis=row.synthesis,
        error=row.error,
        usage=_usage(row),
        created_at=row.created_at,
        finished_at=row.finished_at,
    )


# -- the ledger -------------------------------------------------------------------------


class RunLedger(DatabaseBase):
    """The durable record of every run (SQLAlchemy Core; SQLite by default).

    Each write is one short transaction; upserts use the dialect's
    ``INSERT ... ON CONFLICT DO UPDATE``, so recording a task or a message again updates it
    in place without a read first. Calls are synchronous and meant for one thread (the
    orchestrator's event-loop thread); several ledgers, in one process or several, may share
    a database file.

    Inside `write_behind` (the orchestrator uses it for every run), the frequent records
    (`start_run`, `record_task`, `record_tasks`, `record_call`, `record_messages`,
    `record_tool_call`) are queued instead and committed in groups by a writer thread, in
    order; every other method, reads included, first waits for the queued writes, so this
    ledger object always reads its own writes.

    Usable as a context manager; `close` releases the connections.

    Args:
        url: SQLAlchemy database URL: ``sqlite:///path`` (relative) or ``sqlite:////abs/path``,
            or ``postgresql://...``. The parent folder of an SQLite file is created.
        clock: Source of ``created_at`` and ``finished_at`` timestamps (aware UTC).
        read_only: Open an SQLite file read-only, for reading a ledger whose file or folder
            is not writable (`clearance verify`, `inspect`, `runs`): no schema migration,
            no write-ahead-log switch; every write fails with `StoreError`.

    Raises:
        StoreError: The URL is malformed, names an unsupported database or a missing driver,
            the database cannot be reached or created, or its schema is newer than this
            version of Clearance (opened ``read_only``: is not this version's). The message
            holds the URL (password masked) and the cause.
    """

    _LABEL = "run ledger"

    def _closed_error(self, operation: str) -> StoreError:
        return LedgerError(str(super()._closed_error(operation)))

    def _write_error(self, operation: str, exc: BaseException) -> StoreError:
        return LedgerError(str(super()._write_error(operation, exc)))

    def _read_error(self, operation: str, exc: BaseException) -> StoreError:
        return LedgerError(str(super()._read_error(operation, exc)))

    def __init__(
        self, url: str = DEFAULT_LEDGER_URL, *, clock: Clock = utc_now, read_only: bool = False
    ) -> None:
        key = load_ledger_key()  # a bad key fails before anything is opened
        super().__init__(url, clock=clock, read_only=read_only)
        self._key = key
        self._key_id = key_id(key) if key is not None else None
        self._owner = new_owner()
        self._owned: set[str] = set()  # runs whose lease this ledger renews
        self._lease_lock = threading.Lock()
        self._lease_stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lease_lost: StoreError | None = None
        self._statements: dict[str, Any] = {}
        database = make_url(url).database or ""
        # Each thread has its own in-memory SQLite database: a writer thread would write
        # to another one, so an in-memory ledger writes on the caller's thread always.
        self._in_memory = self._dialect == "sqlite" and (
            database in ("", ":memory:") or "mode=memory" in database
        )
        try:
            self._migrate(_schema_version, _MIGRATIONS)
        except BaseException:
            self._engine.dispose()
            raise

    def _insert(self, table: Table) -> sqlite.Insert | postgresql.Insert:
        if self._dialect == "sqlite":
            return sqlite.insert(table)
        return postgresql.insert(table)

    def _update_run(self, conn: Connection, run_id: str, **values: Any) -> None:
        """Update a run's row and append its new state to the run's chain."""
        result = conn.execute(update(_runs).where(_runs.c.run_id == run_id).values(**values))
        if result.rowcount == 0:
            raise LedgerError(f"unknown run {run_id!r} in the run ledger at {self._url}")
        self._append_run_entry(conn, run_id)

    def _append_run_entry(self, conn: Connection, run_id: str) -> None:
        row = dict(conn.execute(select(_runs).where(_runs.c.run_id == run_id)).mappings().one())
        self._append_entries(conn, [(run_id, "run", run_id, payload_sha256("run", row))])

    # -- the hash chain -----------------------------------------------------------------

    @property
    def chain_key(self) -> bytes | None:
        """The ledger key this ledger chains (and verifies) with, or ``None`` (unkeyed).

        Read from ``CLEARANCE_LEDGER_KEY`` or ``CLEARANCE_LEDGER_KEY_FILE`` when the ledger
        is opened (see `clearance._state.chain`).
        """
        return self._key

    def _chain_head(self, conn: Connection, run_id: str) -> list[Any]:
        """``[last seq, last chain value, key]`` of a run, read in the write transaction.

        Raises:
            StoreError: The run is unknown, or it is chained with another key than this
                ledger's (appending would break its chain).
        """
        query = select(_runs.c.chain_key_id).where(_runs.c.run_id == run_id)
        if self._dialect == "postgresql":
            query = query.with_for_update()  # one writer per run's chain at a time
        found = conn.execute(query).first()
        if found is None:
            raise LedgerError(f"unknown run {run_id!r} in the run ledger at {self._url}")
        recorded = found[0]
        if recorded != self._key_id:
            if recorded is None:
                raise LedgerError(
                    f"run {run_id!r} was recorded without a ledger key; unset {LEDGER_KEY_ENV} "
                    "to continue it"
                )
            raise LedgerError(
                f"run {run_id!r} is chained with ledger key {recorded}, not with this ledger's "
                f"key ({self._key_id or 'none'}); set {LEDGER_KEY_ENV} to that key"
            )
        last = conn.execute(
            select(_entries.c.seq, _entries.c.chain_sha256)
            .where(_entries.c.run_id == run_id)
            .order_by(_entries.c.seq.desc())
            .limit(1)
        ).first()
        return [last[0], last[1], self._key] if last is not None else [0, "", self._key]

    def _append_entries(
        self, conn: Connection, entries: Sequence[tuple[str, str, str, str]]
    ) -> None:
        """Append ``(run id, kind, subject, payload digest)`` entries to their runs' chains."""
        heads: dict[str, list[Any]] = {}
        rows = []
        for run_id, kind, subject, payload in entries:
            head = heads.get(run_id)
            if head is None:
                head = heads[run_id] = self._chain_head(conn, run_id)
            seq = head[0] + 1
            chain = chain_sha256(head[1], run_id, seq, kind, subject, payload, head[2])
            head[0], head[1] = seq, chain
            rows.append(
                {
                    "run_id": run_id,
                    "seq": seq,
                    "kind": kind,
                    "subject": subject,
                    "payload_sha256": payload,
                    "chain_sha256": chain,
                }
            )
        if rows:
            conn.execute(self._statement("entry"), rows)

    def _entries_of(
        self, conn: Connection, built: Sequence[Rows]
    ) -> list[tuple[str, str, str, str]]:
        """The chain entries of committed writes, in write order.

        A call's outcome (an update) is digested from its row as updated, read back.
        """
        finished = [row["b_call_id"] for rows in built for row in rows.get("call_finish", ())]
        outcome: dict[str, str] = {}
        if finished:
            columns = [c for c in _calls.c if c.name not in ("messages", "manifest")]
            for start in range(0, len(finished), 500):
                query = select(*columns).where(_calls.c.call_id.in_(finished[start : start + 500]))
                for found in conn.execute(query).mappings():
                    outcome[found["call_id"]] = payload_sha256("call", dict(found))
        entries: list[tuple[str, str, str, str]] = []
        for rows in built:
            for key in _WRITE_ORDER:
                for row in rows.get(key, ()):
                    if key == "call_finish":
                        call_id = row["b_call_id"]
                        if call_id in outcome:
                            entries.append((row["b_run_id"], "call", call_id, outcome[call_id]))
                        continue
                    subject = str(row[SUBJECT_FIELDS[key]])
                    entries.append((row["run_id"], key, subject, payload_sha256(key, row)))
        return entries

    def chain_entries(self, run_id: str) -> list[ChainEntry]:
        """Return a run's hash-chain entries, in order (``[]`` for none).

        Raises:
            StoreError: The database failed.
        """
        query = select(_entries).where(_entries.c.run_id == run_id).order_by(_entries.c.seq)
        with self._reading(f"read the hash chain of run {run_id!r}") as conn:
            return [
                ChainEntry(
                    run_id=row.run_id,
                    seq=row.seq,
                    kind=row.kind,
                    subject=row.subject,
                    payload_sha256=row.payload_sha256,
                    chain_sha256=row.chain_sha256,
                )
                for row in conn.execute(query)
            ]

    def record_rows(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        """Every recorded row of a run, by kind of chain entry, in the order recorded.

        For auditing (``verify``): the rows as stored, one mapping of column values each;
        ``"run"`` holds the run's own row.

        Raises:
            StoreError: The database failed.
        """
        tables = {
            "run": _runs,
            "task": _tasks,
            "task_reason": _task_reasons,
            "message": _messages,
            "call": _calls,
            "tool_call": _tool_calls,
            "event": _events,
        }
        found: dict[str, list[dict[str, Any]]] = {}
        with self._reading(f"read the records of run {run_id!r}") as conn:
            for kind, table in tables.items():
                query = select(table).where(table.c.run_id == run_id)
                if "ordinal" in table.c:
                    query = query.order_by(table.c.ordinal)
                found[kind] = [dict(row) for row in conn.execute(query).mappings()]
        return found

    # -- leases -------------------------------------------------------------------------

    def _lease_until(self) -> datetime:
        # Real time, not the injected clock: leases are between processes.
        return utc_now() + timedelta(seconds=LEASE_S)

    def _hold_lease(self, run_id: str) -> None:
        """Renew ``run_id``'s lease from now on (a thread renews every ``LEASE_S / 3``)."""
        with self._lease_lock:
            self._owned.add(run_id)
            if self._renewer is None and not self._in_memory:
                self._renewer = threading.Thread(
                    target=self._renew_leases, name="clearance-lease", daemon=True
                )
                self._renewer.start()

    def _drop_lease(self, run_id: str) -> None:
        with self._lease_lock:
            self._owned.discard(run_id)

    def _renew_leases(self) -> None:
        while not self._lease_stop.wait(LEASE_S / 3):
            with self._lease_lock:
                owned = sorted(self._owned)
            if not owned:
                continue
            try:
                # Not `self._writing`: that would wait for (and take the errors of) the
                # writer thread, which belong to the ledger's user.
                with DatabaseBase._writing(self, "renew run leases") as conn:
                    for run_id in owned:
                        renewed = conn.execute(
                            update(_runs)
                            .where(_runs.c.run_id == run_id, _runs.c.owner == self._owner)
                            .values(lease_expires_at=self._lease_until())
                        ).rowcount
                        if not renewed and self._lease_lost is None:
                            self._lease_lost = LedgerError(
                                f"run {run_id!r} was taken over by another process; this "
                                "process stopped recording it"
                            )
            except StoreError:
                continue  # the database is busy or down: try again; the lease may lapse

    def _check_lease(self, run_id: str, row: Any, now: datetime, *, force: bool) -> None:
        """Refuse to take over a run another live process holds (see `reopen_run`)."""
        owner, expires = row.owner, row.lease_expires_at
        if owner is None or owner == self._owner or force or row.status != "running":
            return
        if expires is None or expires <= now or owner_is_dead(owner):
            return
        raise ConfigError(
            f"run {run_id} is being run by {describe_owner(owner, expires)}; wait for it "
            "to stop, or resume with --force if you know it has",
            field="run",
        )

    # -- writes -------------------------------------------------------------------------

    def start_run(
        self,
        *,
        run_id: str,
        team: str,
        goal: str | None,
        graph: list[dict[str, Any]] | None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Record a new run with status ``"running"`` and ``created_at`` from the clock.

        Args:
            run_id: A new, unique id (``new_id("run")``).
            team: The team's name.
            goal: The goal of `run_team`, or ``None`` for a run of explicit tasks.
            graph: The task graph (`TaskGraph.to_dict`), or ``None`` until the coordinator
                has planned (then see `set_graph`).
            config: JSON-ready run settings; ``None`` records ``{}``.

        Raises:
            StoreError: The id is already recorded, or the database failed (inside
                `write_behind`: raised by a later call, see there).
        """
        row = {
            "run_id": run_id,
            "team": team,
            "goal": goal,
            "status": "running",
            "graph": graph,
            "config": config or {},
            "requests": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "created_at": self._clock(),
            "chain_key_id": self._key_id,
            "owner": self._owner,
            "lease_expires_at": self._lease_until(),
        }
        self._submit(PendingWrite(f"start run {run_id!r}", {"run": [row]}))
        self._hold_lease(run_id)

    def reopen_run(
        self, run_id: str, *, process: dict[str, Any] | None = None, force: bool = False
    ) -> None:
        """Take a recorded run over to resume it: ``running`` again, owned by this ledger.

        Clears the run's end, synthesis and error.

        One process runs a run at a time: the run's row names its owner and the time its
        lease expires, and this is an atomic compare-and-set on that row. A run ``running``
        under another owner is taken only once the owner's lease has expired (it is renewed
        while the owner runs) or the owner is a dead process on this host.

        Args:
            run_id: The run's full id.
            process: The process resuming it (``{"host", "pid"}``), recorded as the run
                config's ``process``; ``None`` leaves the config as it is.
            force: Take the run even from a live owner.

        Raises:
            ConfigError: Another live process holds the run's lease; the message names it.
            StoreError: The run is unknown, is chained with another ledger key, or the
                database failed.
        """
        now = utc_now()
        with self._writing(f"reopen run {run_id!r}") as conn:
            query = select(
                _runs.c.config, _runs.c.owner, _runs.c.lease_expires_at, _runs.c.status
            ).where(_runs.c.run_id == run_id)
            if self._dialect == "postgresql":
                query = query.with_for_update()
            row = conn.execute(query).first()
            if row is None:
                raise LedgerError(f"unknown run {run_id!r} in the run ledger at {self._url}")
            self._check_lease(run_id, row, now, force=force)
            values: dict[str, Any] = {}
            if process is not None:
                values["config"] = {**(row.config or {}), "process": process}
            owner = _runs.c.owner
            taken = conn.execute(
                update(_runs)
                .where(
                    _runs.c.run_id == run_id,
                    owner.is_(None) if row.owner is None else owner == row.owner,
                )
                .values(
                    status="running",
                    error=None,
                    synthesis=None,
                    finished_at=None,
                    owner=self._owner,
                    lease_expires_at=self._lease_until(),
                    **values,
                )
            ).rowcount
            if not taken:  # another process took it between our read and our write
                raise ConfigError(
                    f"run {run_id} was just taken over by another process; not resumed",
                    field="run",
                )
            self._append_run_entry(conn, run_id)
        self._hold_lease(run_id)

    def set_graph(self, run_id: str, graph: list[dict[str, Any]]) -> None:
        """Record the task graph of a run (after the coordinator planned it).

        Args:
            run_id: The run's full id.
            graph: The graph in `TaskGraph.to_dict` form; replaces any earlier one.

        Raises:
            StoreError: The run is unknown, or the database failed.
        """
        with self._writing(f"record the graph of run {run_id!r}") as conn:
            self._update_run(conn, run_id, graph=graph)

    def record_task(self, run_id: str, state: TaskState) -> None:
        """Record a task's current state, replacing the previous record of the same task.

        One upsert keyed by ``(run_id, task id)``: status, result, error, timestamps, title,
        assignee, dependencies and memory scope are overwritten; the task keeps the position
        of its first record in `tasks`. A failure, skip or interruption reason is also kept
        in `task_reasons`.

        Args:
            run_id: The run's full id.
            state: The task's state (`TaskQueue.get`).

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call, see there).
        """
        self._submit(
            PendingWrite(
                f"record task {state.task.id!r} of run {run_id!r}",
                self._task_rows(run_id, (state,)),
            )
        )

    def record_tasks(self, run_id: str, states: Sequence[TaskState]) -> None:
        """Record several tasks' states at once, in one transaction (as `record_task` each).

        Args:
            run_id: The run's full id.
            states: The states (`TaskQueue.states`); an empty sequence does nothing.

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        if states:
            self._submit(
                PendingWrite(
                    f"record {len(states)} tasks of run {run_id!r}",
                    self._task_rows(run_id, tuple(states)),
                )
            )

    _TASK_FIELDS = (
        "title", "assignee", "depends_on", "memory_scope", "status", "result", "error",
        "started_at", "finished_at",
    )  # fmt: skip

    def _task_rows(self, run_id: str, states: tuple[TaskState, ...]) -> Callable[[], Rows]:
        """The task upserts of ``states`` and the reasons to keep, built when committed.

        States are immutable, so the rows are built on the writer thread; only the time a
        reason is recorded is read now, on the caller's thread (the clock may not be
        thread-safe).
        """
        recorded_at = self._clock() if any(s.error is not None for s in states) else None
        return partial(_build_task_rows, run_id, states, recorded_at)

    def record_messages(self, run_id: str, messages: Sequence[Message]) -> None:
        """Record messages of a run; a message already recorded (same id) is updated in place.

        Args:
            run_id: The run's full id.
            messages: The messages (`MessageBus.all`); an empty sequence does nothing.

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        if not messages:
            return
        rows = {
            m.id: {
                "run_id": run_id,
                "message_id": m.id,
                "sender": m.sender,
                "recipient": m.recipient,
                "content": m.content,
                "created_at": m.created_at,
            }
            for m in messages
        }
        self._submit(
            PendingWrite(
                f"record {len(rows)} message(s) of run {run_id!r}",
                {"message": list(rows.values())},
            )
        )

    def record_call(
        self,
        *,
        run_id: str,
        subject: str,
        agent: str,
        model_id: str,
        prompt: Prompt,
        response: ModelResponse | None,
        error: str | None,
        started_at: datetime,
        latency_s: float,
    ) -> str:
        """Record one model call with the exact prompt it was given.

        Args:
            run_id: The run's full id.
            subject: ``"task:<id>"``, ``"synthesis"`` or ``"plan"``.
            agent: The agent the prompt was built for.
            model_id: The ``"provider:name"`` id called.
            prompt: The prompt sent; its messages, manifest and hash are stored.
            response: What the model returned, or ``None`` if the call failed (usage is then
                recorded as zero).
            error: Why the call failed, or ``None``.
            started_at: When the call started (aware UTC; a naive value is taken as UTC).
            latency_s: Wall-clock seconds the call took.

        Returns:
            The new call's id (``call_...``).

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        call_id = new_id("call")
        # Serialized when committed (on the writer thread): prompt and response are
        # immutable. A partial holds two objects where a closure would hold a dozen cells,
        # which matters while thousands of writes wait (the garbage collector walks them).
        rows = partial(
            self._call_rows, call_id=call_id, run_id=run_id, subject=subject, agent=agent,
            model_id=model_id, prompt=prompt, response=response, error=error,
            started_at=started_at, latency_s=latency_s,
        )  # fmt: skip
        self._submit(PendingWrite(f"record a {subject!r} call of run {run_id!r}", rows))
        return call_id

    def record_request(
        self,
        *,
        run_id: str,
        subject: str,
        agent: str,
        model_id: str,
        prompt: Prompt,
        started_at: datetime,
    ) -> str:
        """Record a model call about to be sent, before it is sent (its outcome comes later).

        The call is recorded ``pending`` (no response, zero usage) until `finish_call`; one
        left pending shows a request that left the process with no recorded outcome (the
        process stopped while the call was in flight). Inside `write_behind` the record is
        queued: await `wait_committed` before sending.

        Args:
            run_id: The run's full id.
            subject: ``"task:<id>"``, ``"synthesis"``, ``"plan"``...
            agent: The agent the prompt was built for.
            model_id: The ``"provider:name"`` id called.
            prompt: The prompt to send; its messages, manifest and hash are stored.
            started_at: When the call starts (aware UTC).

        Returns:
            The new call's id (``call_...``), for `finish_call`.

        Raises:
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        call_id = new_id("call")
        rows = partial(
            self._call_rows, call_id=call_id, run_id=run_id, subject=subject, agent=agent,
            model_id=model_id, prompt=prompt, response=None, error=None,
            started_at=started_at, latency_s=0.0, pending=True,
        )  # fmt: skip
        self._submit(PendingWrite(f"record a {subject!r} request of run {run_id!r}", rows))
        return call_id

    def finish_call(
        self,
        call_id: str,
        *,
        run_id: str,
        response: ModelResponse | None,
        error: str | None,
        latency_s: float,
    ) -> None:
        """Record the outcome of a call recorded with `record_request`.

        Args:
            call_id: What `record_request` returned.
            run_id: The run's full id.
            response: What the model returned, or ``None`` if the call failed (usage is then
                recorded as zero).
            error: Why the call failed, or ``None``.
            latency_s: Wall-clock seconds the call took.

        Raises:
            StoreError: The database failed (inside `write_behind`: raised by a later call).
        """
        usage = response.usage if response is not None else Usage()
        row = {
            "b_call_id": call_id,
            "b_run_id": run_id,
            "b_response": response.text if response is not None else None,
            "b_finish_reason": response.finish_reason if response is not None else None,
            "b_requests": usage.requests,
            "b_prompt_tokens": usage.prompt_tokens,
            "b_completion_tokens": usage.completion_tokens,
            "b_cached_prompt_tokens": usage.cached_prompt_tokens,
            "b_error": error,
            "b_latency_s": latency_s,
        }
        self._submit(
            PendingWrite(f"record the outcome of call {call_id!r} of run {run_id!r}",
                         {"call_finish": [row]})
        )  # fmt: skip

    async def wait_committed(self) -> None:
        """Wait, without blocking the event loop, until every queued write is committed.

        Nothing to wait for outside `write_behind` (writes are committed when made).

        Raises:
            StoreError: A queued write failed (raised once).
        """
        if self._behind is not None:
            await asyncio.to_thread(self.flush)

    # -- events -------------------------------------------------------------------------

    def record_event(self, run_id: str, kind: str, subject: str, data: dict[str, Any]) -> str:
        """Record one event of a run (append-only, chained like every record).

        Args:
            run_id: The run's full id.
            kind: What happened, at most 64 characters (``"spawn"``, ``"clarification"``,
                ``"architecture"``, ``"limit_exceeded"``, ``"step"``...).
            subject: What it happened to (a task, an agent, a call), at most 160 characters.
            data: JSON-ready details (string keys; strings, numbers, booleans, ``None``,
                lists and mappings).

        Returns:
            The new event's id (``evt_...``).

        Raises:
            ConfigError: ``kind`` or ``subject`` is empty or too long, or ``data`` is not
                JSON-ready.
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        if not kind or len(kind) > 64:
            raise ConfigError(
                f"an event kind must be 1 to 64 characters, got {kind!r}", field="kind"
            )
        if len(subject) > 160:
            raise ConfigError("an event subject must be at most 160 characters", field="subject")
        try:
            data = json.loads(canonical_json(data))  # a copy: later edits of `data` are not kept
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"event data is not JSON-ready: {exc}", field="data") from exc
        if not isinstance(data, dict):
            raise ConfigError("event data must be a mapping", field="data")
        event_id = new_id("evt")
        row = {
            "event_id": event_id,
            "run_id": run_id,
            "kind": kind,
            "subject": subject,
            "data": data,
            "created_at": self._clock(),
        }
        self._submit(PendingWrite(f"record a {kind!r} event of run {run_id!r}", {"event": [row]}))
        return event_id

    def events(self, run_id: str, kind: str | None = None) -> list[EventRecord]:
        """Return the events of a run, in the order recorded (``[]`` for none).

        Args:
            run_id: The run's full id.
            kind: Only events of this kind; ``None`` for all.

        Raises:
            StoreError: The database failed.
        """
        query = select(_events).where(_events.c.run_id == run_id)
        if kind is not None:
            query = query.where(_events.c.kind == kind)
        with self._reading(f"read the events of run {run_id!r}") as conn:
            return [
                EventRecord(
                    event_id=row.event_id,
                    run_id=row.run_id,
                    kind=row.kind,
                    subject=row.subject,
                    data=row.data,
                    created_at=row.created_at,
                )
                for row in conn.execute(query.order_by(_events.c.ordinal))
            ]

    @staticmethod
    def _call_rows(
        *,
        call_id: str,
        run_id: str,
        subject: str,
        agent: str,
        model_id: str,
        prompt: Prompt,
        response: ModelResponse | None,
        error: str | None,
        started_at: datetime,
        latency_s: float,
        pending: bool = False,
    ) -> Rows:
        usage = response.usage if response is not None else Usage()
        # Each is serialized once, canonically: for the digest and for its column.
        messages = canonical_json(prompt.to_dicts())
        manifest = canonical_json(prompt.manifest.to_dict())
        return {
            "call": [
                {
                    "call_id": call_id,
                    "run_id": run_id,
                    "subject": subject,
                    "agent": agent,
                    "model_id": model_id,
                    "messages": JSONText(messages),
                    "manifest": JSONText(manifest),
                    "prompt_sha256": prompt.manifest.prompt_sha256,
                    "record_sha256": _record_sha256(messages, manifest),
                    "response": response.text if response is not None else None,
                    "finish_reason": response.finish_reason if response is not None else None,
                    "requests": usage.requests,
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "cached_prompt_tokens": usage.cached_prompt_tokens,
                    "error": error,
                    "started_at": started_at,
                    "latency_s": latency_s,
                    "pending": int(pending),
                }
            ]
        }

    # -- write-behind -------------------------------------------------------------------

    _behind: WriteBehind | None = None

    @contextmanager
    def write_behind(self) -> Iterator[None]:
        """Queue the frequent records and commit them in groups on a writer thread.

        While the context is open, `start_run`, `record_task`, `record_tasks`, `record_call`,
        `record_messages` and `record_tool_call` return at once; a writer thread commits
        everything queued so far in one transaction (group commit), in the order written,
        so the database always holds a prefix of the writes: a crash leaves what a crash a
        moment earlier would have. The writer commits once the writes pause for 10 ms, and
        never later than 0.5 s after a write was queued. Any other method (reads,
        `finish_run`, `set_graph`, `reopen_run`) first waits until the queue is committed.
        Leaving the context commits the rest. On SQLite the writer also checkpoints the
        write-ahead log (a ``PASSIVE`` checkpoint) each time it has committed everything
        queued, so that neither a later commit nor `close` copies a whole run's log into the
        database file (SQLite's "Application-Initiated Checkpoints",
        https://www.sqlite.org/wal.html); not when a caller waits for that commit (a read,
        or `finish_run` at the end of a run), which goes on at once.

        Reentrant (an inner context does nothing). An in-memory SQLite ledger writes on the
        caller's thread (each thread would see its own in-memory database).

        Raises:
            StoreError: A queued write or a checkpoint failed: raised once, by the next call
                to this ledger or on leaving the context; the message names the write. The
                writes queued with it that did not fail are committed.
        """
        if self._behind is not None or self._in_memory or self._closed:
            yield
            return
        # The writer waits for a 10 ms pause in the orchestrator's writes (its busy bursts end
        # when its tasks wait for their models), so its work rarely competes for the GIL. A
        # burst has gaps of a few ms (answers arriving one after another), which a 2 ms wait
        # took for pauses: the D=50 ms makespan benchmark ran at 1.217x its critical path
        # with 2 ms and 1.193x with 10 ms (medians of 7 alternating 5-run medians).
        # Between groups, the writer checkpoints SQLite's log, so that neither the run's last
        # commit nor `close` has to copy a whole run's log into the database file.
        behind = WriteBehind(
            self._commit_writes,
            name="clearance-ledger-writer",
            quiet_s=0.010,
            max_delay_s=0.5,
            on_idle=self._checkpoint_wal,  # nothing to do on PostgreSQL
        )
        self._behind = behind
        ok = False
        try:
            yield
            ok = True
        finally:
            try:
                behind.close(raise_errors=ok)
            finally:
                self._behind = None

    def flush(self) -> None:
        """Wait until every queued write is committed (nothing to do outside `write_behind`).

        Raises:
            StoreError: A queued write failed (raised once).
        """
        behind = self._behind
        if behind is not None and threading.get_ident() != behind.thread_id:
            behind.flush()

    def close(self) -> None:
        """Commit any queued write, then release every connection. Closing twice is fine.

        Raises:
            StoreError: A queued write failed.
        """
        behind, self._behind = self._behind, None
        self._lease_stop.set()
        try:
            if behind is not None:
                behind.close()
        finally:
            renewer, self._renewer = self._renewer, None
            if renewer is not None:
                renewer.join()
            super().close()

    def _submit(self, write: PendingWrite) -> None:
        lost, self._lease_lost = self._lease_lost, None
        if lost is not None:
            raise lost
        behind = self._behind
        if behind is not None:
            behind.submit(write)
        else:
            self._commit_writes([write])

    def _commit_writes(self, writes: Sequence[PendingWrite]) -> None:
        """Commit ``writes`` in one transaction, one ``executemany`` per statement and chunk.

        On the writer thread, the work is cut into chunks of `_CHUNK` writes or rows, and the
        thread lets go of the interpreter lock between chunks (`_yield_gil`), which gives an
        event loop waiting for the lock a chance to run before the rest of a large group.
        """
        by_key: dict[str, list[dict[str, Any]]] = {}
        built: list[Rows] = []
        for start in range(0, len(writes), _CHUNK):
            if start:
                _yield_gil()
            for write in writes[start : start + _CHUNK]:
                rows_of = write.build()
                built.append(rows_of)
                for key, rows in rows_of.items():
                    by_key.setdefault(key, []).extend(rows)
        if len(by_key.get("task", ())) > 1:
            by_key["task"] = _last_upsert_per_task(by_key["task"])
        operation = writes[0].operation if len(writes) == 1 else f"record {len(writes)} writes"
        with self._writing(operation) as conn:
            # A run's row before the rows that refer to it; an unknown kind fails loudly.
            for key in sorted(by_key, key=_WRITE_ORDER.index):
                queued = by_key[key]
                for start in range(0, len(queued), _CHUNK):
                    _yield_gil()
                    # The statement is built once per ledger: each call binds parameters.
                    conn.execute(self._statement(key), queued[start : start + _CHUNK])
            # Then each record's chain entry, in the order written (see `_state.chain`).
            _yield_gil()
            self._append_entries(conn, self._entries_of(conn, built))

    def _statement(self, key: str) -> Any:
        """The statement of a write kind, built once per ledger (building one is costly)."""
        stmt = self._statements.get(key)
        if stmt is None:
            stmt = self._statements[key] = self._build_statement(key)
        return stmt

    def _build_statement(self, key: str) -> Any:
        if key == "task":
            insert = self._insert(_tasks)
            return insert.on_conflict_do_update(
                index_elements=[_tasks.c.run_id, _tasks.c.task_id],
                set_={name: insert.excluded[name] for name in self._TASK_FIELDS},
            )
        if key == "message":
            insert = self._insert(_messages)
            return insert.on_conflict_do_update(
                index_elements=[_messages.c.run_id, _messages.c.message_id],
                set_={
                    name: insert.excluded[name]
                    for name in ("sender", "recipient", "content", "created_at")
                },
            )
        if key == "call_finish":
            names = (
                "response", "finish_reason", "requests", "prompt_tokens", "completion_tokens",
                "cached_prompt_tokens", "error", "latency_s",
            )  # fmt: skip
            return (
                update(_calls)
                .where(_calls.c.call_id == bindparam("b_call_id"))
                .values({**{name: bindparam(f"b_{name}") for name in names}, "pending": 0})
            )
        tables = {
            "run": _runs,
            "task_reason": _task_reasons,
            "call": _calls,
            "tool_call": _tool_calls,
            "event": _events,
            "entry": _entries,
        }
        return tables[key].insert()

    @contextmanager
    def _writing(self, operation: str) -> Iterator[Connection]:
        self.flush()  # this ledger reads and orders after its own queued writes
        with super()._writing(operation) as conn:
            yield conn

    @contextmanager
    def _reading(self, operation: str) -> Iterator[Connection]:
        self.flush()
        with super()._reading(operation) as conn:
            yield conn

    def finish_run(
        self, run_id: str, *, status: str, synthesis: str | None, usage: Usage, error: str | None
    ) -> None:
        """Record the end of a run, with ``finished_at`` from the clock.

        Args:
            run_id: The run's full id.
            status: ``"completed"`` or ``"failed"`` (``"running"`` is accepted too).
            synthesis: The final answer, or ``None``.
            usage: Total usage of the run.
            error: Why the run failed, or ``None``.

        Raises:
            ConfigError: ``status`` is not one of `RUN_STATUSES`.
            StoreError: The run is unknown, or the database failed.
        """
        if status not in RUN_STATUSES:
            raise ConfigError(
                f"run status must be one of {', '.join(RUN_STATUSES)}, got {status!r}",
                field="status",
            )
        lease: dict[str, Any] = {}
        if status != "running":
            lease = {"owner": None, "lease_expires_at": None}
            self._drop_lease(run_id)
        with self._writing(f"finish run {run_id!r}") as conn:
            self._update_run(
                conn,
                run_id,
                status=status,
                synthesis=synthesis,
                error=error,
                requests=usage.requests,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                finished_at=self._clock(),
                **lease,
            )

    # -- reads --------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord:
        """Return a run by its id, or by a prefix of the id that only one run has.

        An exact id wins over longer ids it is a prefix of.

        Args:
            run_id: A full run id or a unique prefix of one (case-sensitive).

        Raises:
            StoreError: No run matches (the message names ``run_id``), several runs share the
                prefix (the message lists some of them), or the database failed.
        """
        if not run_id:
            raise LedgerError("no run id given")
        query = (
            select(_runs)
            .where(func.substr(_runs.c.run_id, 1, len(run_id)) == run_id)
            .order_by((_runs.c.run_id == run_id).desc(), _runs.c.run_id)
            .limit(6)
        )
        with self._reading(f"read run {run_id!r}") as conn:
            rows = conn.execute(query).all()
        if not rows:
            raise LedgerError(f"unknown run {run_id!r} in the run ledger at {self._url}")
        if rows[0].run_id != run_id and len(rows) > 1:
            shown = ", ".join(row.run_id for row in rows[:5])
            more = ", ..." if len(rows) > 5 else ""
            raise LedgerError(
                f"run id prefix {run_id!r} is ambiguous: it matches {shown}{more}; "
                "give more characters"
            )
        return _run_record(rows[0])

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        """Return the most recent runs, newest first.

        Args:
            limit: Most runs to return (at least 1).

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: The database failed.
        """
        if limit < 1:
            raise ConfigError(f"must be at least 1, got {limit}", field="limit")
        query = (
            select(_runs).order_by(_runs.c.created_at.desc(), _runs.c.run_id.desc()).limit(limit)
        )
        with self._reading("list runs") as conn:
            return [_run_record(row) for row in conn.execute(query)]

    def tasks(self, run_id: str) -> list[TaskRecord]:
        """Return the latest record of each task of a run, in the order first recorded.

        Args:
            run_id: The run's full id; an unknown run has no tasks (``[]``).

        Raises:
            StoreError: The database failed.
        """
        query = select(_tasks).where(_tasks.c.run_id == run_id).order_by(_tasks.c.ordinal)
        with self._reading(f"read the tasks of run {run_id!r}") as conn:
            return [
                TaskRecord(
                    run_id=row.run_id,
                    task_id=row.task_id,
                    title=row.title,
                    assignee=row.assignee,
                    depends_on=tuple(row.depends_on),
                    memory_scope=row.memory_scope,
                    status=row.status,
                    result=row.result,
                    error=row.error,
                    started_at=row.started_at,
                    finished_at=row.finished_at,
                )
                for row in conn.execute(query)
            ]

    def calls(self, run_id: str, *, subject: str | None = None) -> list[CallRecord]:
        """Return the model calls of a run, in the order they were recorded.

        Args:
            run_id: The run's full id; an unknown run has no calls (``[]``).
            subject: Only calls with this subject (``"task:<id>"``, ``"synthesis"``,
                ``"plan"``); ``None`` for all.

        Raises:
            StoreError: The database failed.
        """
        query = select(_calls).where(_calls.c.run_id == run_id)
        if subject is not None:
            query = query.where(_calls.c.subject == subject)
        query = query.order_by(_calls.c.ordinal)
        with self._reading(f"read the calls of run {run_id!r}") as conn:
            return [
                CallRecord(
                    call_id=row.call_id,
                    run_id=row.run_id,
                    subject=row.subject,
                    agent=row.agent,
                    model_id=row.model_id,
                    messages=row.messages,
                    manifest=row.manifest,
                    prompt_sha256=row.prompt_sha256,
                    record_sha256=row.record_sha256,
                    response=row.response,
                    finish_reason=row.finish_reason,
                    usage=_usage(row),
                    error=row.error,
                    started_at=row.started_at,
                    latency_s=row.latency_s,
                    pending=bool(row.pending),
                )
                for row in conn.execute(query)
            ]

    def task_reasons(self, run_id: str) -> dict[str, list[str]]:
        """Every reason each task of a run was ever recorded with (failed, skipped, interrupted).

        Args:
            run_id: The run's full id; an unknown run has none (``{}``).

        Returns:
            Task id to its reasons, oldest first (a task re-run by a resumed run keeps the
            reasons of its earlier failures).

        Raises:
            StoreError: The database failed.
        """
        query = (
            select(_task_reasons.c.task_id, _task_reasons.c.error)
            .where(_task_reasons.c.run_id == run_id)
            .order_by(_task_reasons.c.ordinal)
        )
        reasons: dict[str, list[str]] = {}
        with self._reading(f"read the task reasons of run {run_id!r}") as conn:
            for row in conn.execute(query):
                reasons.setdefault(row.task_id, []).append(row.error)
        return reasons

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        """Return the messages of a run, in the order first recorded.

        Args:
            run_id: The run's full id; an unknown run has no messages (``[]``).

        Returns:
            One mapping per message with the fields of `Message`: ``id``, ``sender``,
            ``recipient``, ``content`` and ``created_at`` (an aware UTC datetime).

        Raises:
            StoreError: The database failed.
        """
        query = select(_messages).where(_messages.c.run_id == run_id).order_by(_messages.c.ordinal)
        with self._reading(f"read the messages of run {run_id!r}") as conn:
            return [
                {
                    "id": row.message_id,
                    "sender": row.sender,
                    "recipient": row.recipient,
                    "content": row.content,
                    "created_at": row.created_at,
                }
                for row in conn.execute(query)
            ]

    # -- tool calls ---------------------------------------------------------------------

    def record_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str,
        subject: str,
        agent: str,
        step: int,
        name: str,
        arguments: dict[str, Any],
        result: str,
        is_error: bool,
        store_reads: Sequence[dict[str, str]] = (),
        chain: dict[str, Any] | None = None,
    ) -> None:
        """Record one tool call and its result (see `ToolCallRecord` for the fields).

        Raises:
            StoreError: The run is unknown, the id is already recorded in the run, or the
                database failed.
        """
        row = {
            "tool_call_id": tool_call_id,
            "run_id": run_id,
            "subject": subject,
            "agent": agent,
            "step": step,
            "name": name,
            "arguments": arguments,
            "result": result,
            "is_error": int(is_error),
            "store_reads": list(store_reads),
            "chain": chain,
            "created_at": self._clock(),
        }
        self._submit(
            PendingWrite(
                f"record tool call {tool_call_id!r} of run {run_id!r}", {"tool_call": [row]}
            )
        )

    def tool_calls(self, run_id: str) -> list[ToolCallRecord]:
        """Return the tool calls of a run, in the order recorded (``[]`` for none).

        Raises:
            StoreError: The database failed.
        """
        query = (
            select(_tool_calls)
            .where(_tool_calls.c.run_id == run_id)
            .order_by(_tool_calls.c.ordinal)
        )
        with self._reading(f"read the tool calls of run {run_id!r}") as conn:
            return [
                ToolCallRecord(
                    tool_call_id=row.tool_call_id,
                    run_id=row.run_id,
                    subject=row.subject,
                    agent=row.agent,
                    step=row.step,
                    name=row.name,
                    arguments=row.arguments,
                    result=row.result,
                    is_error=bool(row.is_error),
                    store_reads=row.store_reads,
                    chain=row.chain,
                    created_at=row.created_at,
                )
                for row in conn.execute(query)
            ]
