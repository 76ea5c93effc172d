"""The run ledger's schema: its migrations, each defining the tables and columns it adds.

The schema is versioned the way simonw's ``llm`` does it (see `clearance._state.db.migrations`):
`LEDGER_SCHEMA` holds ordered migrations, the ``schema_version`` table records which of them a
database has had, and opening a ledger applies the missing ones in one transaction. The tables
the ledger queries are the model the migrations build. A new column is one migration here
(``change.add_column(...)``) plus its field where the rows are built and read.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from clearance._state.db import Schema, SchemaChange, UTCDateTime
from clearance._state.db.nul_text import NulText

__all__ = [
    "CALLS",
    "ENTRIES",
    "EVENTS",
    "LEDGER_SCHEMA",
    "MESSAGES",
    "RUNS",
    "SCHEMA_VERSION",
    "TASKS",
    "TASK_REASONS",
    "TOOL_CALLS",
]

LEDGER_SCHEMA = Schema("schema_version")
"""The ledger's migrations; migration ``i`` (1-based) brings a database to version ``i``."""


def _run_id() -> Column[str]:
    return Column(
        "run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False
    )


@LEDGER_SCHEMA.migration
def _m001_create_tables(change: SchemaChange) -> None:
    """Version 1: runs, tasks, calls and messages."""
    change.create_table(
        "runs",
        Column("run_id", String(64), primary_key=True),
        Column("team", String(128), nullable=False),
        Column("goal", NulText),
        Column("status", String(16), nullable=False),
        Column("graph", JSON(none_as_null=True)),
        Column("config", JSON, nullable=False),
        Column("synthesis", NulText),
        Column("error", NulText),
        Column("requests", Integer, nullable=False, default=0),
        Column("prompt_tokens", Integer, nullable=False, default=0),
        Column("completion_tokens", Integer, nullable=False, default=0),
        Column("created_at", UTCDateTime, nullable=False),
        Column("finished_at", UTCDateTime),
        Index("ix_runs_created_at", "created_at"),
    )
    change.create_table(
        "tasks",
        # Insertion order of a task's first record: the order `tasks()` returns.
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        _run_id(),
        Column("task_id", String(128), nullable=False),
        Column("title", NulText, nullable=False),
        Column("assignee", String(128), nullable=False),
        Column("depends_on", JSON, nullable=False),
        Column("memory_scope", String(16), nullable=False),
        Column("status", String(16), nullable=False),
        Column("result", NulText),
        Column("error", NulText),
        Column("started_at", UTCDateTime),
        Column("finished_at", UTCDateTime),
        UniqueConstraint("run_id", "task_id", name="uq_tasks_run_task"),
        Index("ix_tasks_run_id", "run_id"),
    )
    change.create_table(
        "calls",
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        Column("call_id", String(64), nullable=False, unique=True),
        _run_id(),
        Column("subject", String(160), nullable=False),
        Column("agent", String(128), nullable=False),
        Column("model_id", String(256), nullable=False),
        Column("messages", JSON, nullable=False),
        Column("manifest", JSON, nullable=False),
        Column("prompt_sha256", String(64), nullable=False),
        Column("response", NulText),
        Column("finish_reason", String(64)),
        Column("requests", Integer, nullable=False),
        Column("prompt_tokens", Integer, nullable=False),
        Column("completion_tokens", Integer, nullable=False),
        Column("error", NulText),
        Column("started_at", UTCDateTime, nullable=False),
        Column("latency_s", Float, nullable=False),
        Index("ix_calls_run_subject", "run_id", "subject"),
    )
    change.create_table(
        "messages",
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        _run_id(),
        Column("message_id", String(128), nullable=False),
        Column("sender", String(128), nullable=False),
        Column("recipient", String(128), nullable=False),
        Column("content", NulText, nullable=False),
        Column("created_at", UTCDateTime, nullable=False),
        UniqueConstraint("run_id", "message_id", name="uq_messages_run_message"),
    )


@LEDGER_SCHEMA.migration
def _m002_call_record_digest(change: SchemaChange) -> None:
    """Version 2: ``calls.record_sha256``, a digest of the call's messages and manifest."""
    change.add_column("calls", Column("record_sha256", String(64)))


@LEDGER_SCHEMA.migration
def _m003_task_reasons(change: SchemaChange) -> None:
    """Version 3: ``task_reasons``, every failure, skip or interruption a task ever had.

    A resumed run overwrites a failed task's record when the task runs again; the reasons stay
    here, so ``clearance verify`` can still check a prompt that showed the old failure.
    """
    change.create_table(
        "task_reasons",
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        _run_id(),
        Column("task_id", String(128), nullable=False),
        Column("status", String(16), nullable=False),
        Column("error", NulText, nullable=False),
        Column("recorded_at", UTCDateTime, nullable=False),
        Index("ix_task_reasons_run_task", "run_id", "task_id"),
    )


@LEDGER_SCHEMA.migration
def _m004_tool_calls(change: SchemaChange) -> None:
    """Version 4: ``tool_calls``, every tool call of an agent loop with its result."""
    change.create_table(
        "tool_calls",
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        Column("tool_call_id", String(128), nullable=False),
        _run_id(),
        Column("subject", String(160), nullable=False),
        Column("agent", String(128), nullable=False),
        Column("step", Integer, nullable=False),
        Column("name", String(128), nullable=False),
        Column("arguments", JSON, nullable=False),
        Column("result", NulText, nullable=False),
        Column("is_error", Integer, nullable=False),
        Column("store_reads", JSON, nullable=False),
        Column("chain", JSON),
        Column("created_at", UTCDateTime, nullable=False),
        UniqueConstraint("run_id", "tool_call_id", name="uq_tool_calls_run_call"),
        Index("ix_tool_calls_run_subject", "run_id", "subject"),
    )


@LEDGER_SCHEMA.migration
def _m005_hash_chain(change: SchemaChange) -> None:
    """Version 5: the runs' hash chains, events, key ids and pending calls.

    Tables ``ledger_entries`` and ``events``; columns ``runs.chain_key_id`` (the id of the key
    a run is chained with) and ``calls.pending`` (sent, no outcome recorded yet).
    """
    change.create_table(
        "ledger_entries",
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        _run_id(),
        Column("seq", Integer, nullable=False),
        Column("kind", String(16), nullable=False),
        Column("subject", String(160), nullable=False),
        Column("payload_sha256", String(64), nullable=False),
        Column("chain_sha256", String(64), nullable=False),
        UniqueConstraint("run_id", "seq", name="uq_ledger_entries_run_seq"),
    )
    change.create_table(
        "events",
        Column("ordinal", Integer, primary_key=True, autoincrement=True),
        Column("event_id", String(64), nullable=False, unique=True),
        _run_id(),
        Column("kind", String(64), nullable=False),
        Column("subject", String(160), nullable=False),
        Column("data", JSON, nullable=False),
        Column("created_at", UTCDateTime, nullable=False),
        Index("ix_events_run_kind", "run_id", "kind"),
    )
    change.add_column("runs", Column("chain_key_id", String(32)))
    change.add_column(
        "calls", Column("pending", Integer, nullable=False, default=0, server_default=text("0"))
    )


@LEDGER_SCHEMA.migration
def _m006_run_lease(change: SchemaChange) -> None:
    """Version 6: run leases, so that one run is run by one process at a time.

    Columns ``runs.owner`` (the process running it) and ``runs.lease_expires_at``.
    """
    change.add_column("runs", Column("owner", String(256)))
    change.add_column("runs", Column("lease_expires_at", UTCDateTime))


@LEDGER_SCHEMA.migration
def _m007_cached_prompt_tokens(change: SchemaChange) -> None:
    """Version 7: ``calls.cached_prompt_tokens``, NULL where the server reported none."""
    change.add_column("calls", Column("cached_prompt_tokens", Integer))


@LEDGER_SCHEMA.migration
def _m008_usage_counted(change: SchemaChange) -> None:
    """Version 8: ``calls.usage_counted``.

    1 where the server reported no usage and the tokens were counted (`Usage.counted`), NULL
    where they were reported.
    """
    change.add_column("calls", Column("usage_counted", Integer))


@LEDGER_SCHEMA.migration
def _m009_call_parameters(change: SchemaChange) -> None:
    """Version 9: ``calls.parameters``, what the model was asked besides the prompt.

    `ModelRequest.parameters`: sampling, max tokens, the tools offered (names and digests),
    the JSON schema asked for; NULL for calls recorded before.
    """
    change.add_column("calls", Column("parameters", JSON))


@LEDGER_SCHEMA.migration
def _m010_grouped_chain_entries(change: SchemaChange) -> None:
    """Version 10: ``ledger_entries.records``, the records a group entry chains.

    A transaction that writes several records of a run appends one entry for all of them
    (kind ``"group"``): its ``records`` column holds their ``[kind, subject,
    payload_sha256]`` in write order as canonical JSON, and its ``payload_sha256`` is that
    text's SHA-256 (`clearance._state.chain`). NULL for an entry of one record, as before.
    """
    change.add_column("ledger_entries", Column("records", Text))


@LEDGER_SCHEMA.migration
def _m011_drop_redundant_task_index(change: SchemaChange) -> None:
    """Version 11: no ``ix_tasks_run_id``.

    Its one column, ``run_id``, leads the unique index of ``(run_id, task_id)``, which
    answers the same lookups; every task's first record paid for both.
    """
    change.drop_index("tasks", "ix_tasks_run_id")


SCHEMA_VERSION = LEDGER_SCHEMA.latest
"""The schema version this code reads and writes."""

_tables = LEDGER_SCHEMA.metadata.tables
RUNS: Table = _tables["runs"]
TASKS: Table = _tables["tasks"]
CALLS: Table = _tables["calls"]
MESSAGES: Table = _tables["messages"]
TASK_REASONS: Table = _tables["task_reasons"]
TOOL_CALLS: Table = _tables["tool_calls"]
ENTRIES: Table = _tables["ledger_entries"]
EVENTS: Table = _tables["events"]
