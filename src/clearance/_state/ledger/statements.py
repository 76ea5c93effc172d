"""The statement of each kind of ledger write, built once per dialect, and their order.

Building an SQLAlchemy statement costs more than running a short one on SQLite, so each is
built once (`statement`) and every commit only binds rows to it.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, bindparam, update

from clearance._state.ledger.schema import (
    CALLS,
    ENTRIES,
    EVENTS,
    MESSAGES,
    RUNS,
    TASK_REASONS,
    TASKS,
    TOOL_CALLS,
)

if TYPE_CHECKING:  # the dialect in use is imported when a statement is built
    from sqlalchemy.dialects import postgresql, sqlite

__all__ = ["WRITE_ORDER", "insert", "statement"]

WRITE_ORDER = (
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

_TASK_FIELDS = (
    "title", "assignee", "depends_on", "memory_scope", "status", "result", "error",
    "started_at", "finished_at",
)  # fmt: skip
"""What a task upsert overwrites (all but the key and the ordinal)."""

_FINISH_FIELDS = (
    "response", "finish_reason", "requests", "prompt_tokens", "completion_tokens",
    "cached_prompt_tokens", "usage_counted", "error", "latency_s",
)  # fmt: skip
"""What the outcome of a call sets (bound as ``b_<name>``)."""

_INSERTS: dict[str, Table] = {
    "run": RUNS,
    "task_reason": TASK_REASONS,
    "call": CALLS,
    "tool_call": TOOL_CALLS,
    "event": EVENTS,
    "entry": ENTRIES,
}


def insert(table: Table, dialect: str) -> sqlite.Insert | postgresql.Insert:
    """The dialect's ``INSERT`` of ``table`` (with ``ON CONFLICT`` support)."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)
    from sqlalchemy.dialects.postgresql import insert as postgresql_insert

    return postgresql_insert(table)


@cache
def statement(key: str, dialect: str) -> Any:
    """The statement of write kind ``key`` on ``dialect`` (``"sqlite"``, ``"postgresql"``).

    Raises:
        KeyError: ``key`` is no kind of write.
    """
    if key == "task":
        upsert = insert(TASKS, dialect)
        return upsert.on_conflict_do_update(
            index_elements=[TASKS.c.run_id, TASKS.c.task_id],
            set_={name: upsert.excluded[name] for name in _TASK_FIELDS},
        )
    if key == "message":
        upsert = insert(MESSAGES, dialect)
        return upsert.on_conflict_do_update(
            index_elements=[MESSAGES.c.run_id, MESSAGES.c.message_id],
            set_={
                name: upsert.excluded[name]
                for name in ("sender", "recipient", "content", "created_at")
            },
        )
    if key == "call_finish":
        return (
            update(CALLS)
            .where(CALLS.c.call_id == bindparam("b_call_id"))
            .values({**{name: bindparam(f"b_{name}") for name in _FINISH_FIELDS}, "pending": 0})
        )
    return _INSERTS[key].insert()
