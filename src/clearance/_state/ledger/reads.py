"""`LedgerReads`: every read of the run ledger (runs, tasks, calls, messages, tool calls, chain).

Each read first waits for this ledger's queued writes (it reads its own writes) and runs in
one snapshot; database failures surface as `StoreError` naming the read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select

from clearance._core.errors import LedgerError
from clearance._core.row_limit import check_limit
from clearance._state.ledger.base import LedgerBase
from clearance._state.ledger.records import (
    CallRecord,
    ChainEntry,
    RunRecord,
    TaskRecord,
    ToolCallRecord,
    call_record,
    chain_entry,
    run_record,
    task_record,
    tool_call_record,
    unknown_run,
)
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
from clearance._state.ledger.task_view import merge_tasks

__all__ = ["LedgerReads"]


class LedgerReads(LedgerBase):
    """The reads of `RunLedger` (see there for opening and errors)."""

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
            select(RUNS)
            .where(func.substr(RUNS.c.run_id, 1, len(run_id)) == run_id)
            .order_by((RUNS.c.run_id == run_id).desc(), RUNS.c.run_id)
            .limit(6)
        )
        with self._reading(f"read run {run_id!r}") as conn:
            rows = conn.execute(query).all()
        if not rows:
            raise unknown_run(run_id, self._url)
        if rows[0].run_id != run_id and len(rows) > 1:
            shown = ", ".join(row.run_id for row in rows[:5])
            more = ", ..." if len(rows) > 5 else ""
            raise LedgerError(
                f"run id prefix {run_id!r} is ambiguous: it matches {shown}{more}; "
                "give more characters"
            )
        return run_record(rows[0])

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        """Return the most recent runs, newest first.

        Args:
            limit: Most runs to return (1 to `MAX_ROWS`, 10,000).

        Raises:
            ConfigError: ``limit`` is out of that range.
            StoreError: The database failed.
        """
        check_limit(limit)
        query = select(RUNS).order_by(RUNS.c.created_at.desc(), RUNS.c.run_id.desc()).limit(limit)
        with self._reading("list runs") as conn:
            return [run_record(row) for row in conn.execute(query)]

    def tasks(self, run_id: str) -> list[TaskRecord]:
        """Return the latest record of each task of a run, in graph order.

        A task has a row once it first changed state; until then it reads from the run's
        recorded graph as unstarted (``ready`` without dependencies, else ``pending``; see
        `clearance._state.ledger.task_view`). A run none of whose tasks has changed state yet
        (a plan-only run, say) has no tasks; a run without a graph has its rows, in the order
        first recorded.

        Args:
            run_id: The run's full id; an unknown run has no tasks (``[]``).

        Raises:
            StoreError: The database failed.
        """
        query = select(TASKS).where(TASKS.c.run_id == run_id).order_by(TASKS.c.ordinal)
        with self._reading(f"read the tasks of run {run_id!r}") as conn:
            records = [task_record(row) for row in conn.execute(query)]
            if not records:
                return []
            graph = conn.execute(select(RUNS.c.graph).where(RUNS.c.run_id == run_id)).scalar()
        return merge_tasks(run_id, graph, records)

    def calls(self, run_id: str, *, subject: str | None = None) -> list[CallRecord]:
        """Return the model calls of a run, in the order they were recorded.

        Args:
            run_id: The run's full id; an unknown run has no calls (``[]``).
            subject: Only calls with this subject (``"task:<id>"``, ``"synthesis"``,
                ``"plan"``); ``None`` for all.

        Raises:
            StoreError: The database failed.
        """
        query = select(CALLS).where(CALLS.c.run_id == run_id)
        if subject is not None:
            query = query.where(CALLS.c.subject == subject)
        query = query.order_by(CALLS.c.ordinal)
        with self._reading(f"read the calls of run {run_id!r}") as conn:
            return [call_record(row) for row in conn.execute(query)]

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
            select(TASK_REASONS.c.task_id, TASK_REASONS.c.error)
            .where(TASK_REASONS.c.run_id == run_id)
            .order_by(TASK_REASONS.c.ordinal)
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
        query = select(MESSAGES).where(MESSAGES.c.run_id == run_id).order_by(MESSAGES.c.ordinal)
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

    def tool_calls(self, run_id: str) -> list[ToolCallRecord]:
        """Return the tool calls of a run, in the order recorded (``[]`` for none).

        Raises:
            StoreError: The database failed.
        """
        query = (
            select(TOOL_CALLS).where(TOOL_CALLS.c.run_id == run_id).order_by(TOOL_CALLS.c.ordinal)
        )
        with self._reading(f"read the tool calls of run {run_id!r}") as conn:
            return [tool_call_record(row) for row in conn.execute(query)]

    def chain_entries(self, run_id: str) -> list[ChainEntry]:
        """Return a run's hash-chain entries, in order (``[]`` for none).

        Raises:
            StoreError: The database failed.
        """
        query = select(ENTRIES).where(ENTRIES.c.run_id == run_id).order_by(ENTRIES.c.seq)
        with self._reading(f"read the hash chain of run {run_id!r}") as conn:
            return [chain_entry(row) for row in conn.execute(query)]

    def chain_heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """The last chain position of each run: it grows with every record a run gets.

        One indexed query, however long the runs are, so a reader can tell cheaply whether
        a run changed since it last looked (the run page's live refresh, its list's cache).

        Args:
            run_ids: Full run ids; an empty sequence reads nothing.

        Returns:
            Run id to its last ``seq``; a run with no chain entry (unknown, or recorded
            before the chain) is left out.

        Raises:
            StoreError: The database failed.
        """
        if not run_ids:
            return {}
        query = (
            select(ENTRIES.c.run_id, func.max(ENTRIES.c.seq))
            .where(ENTRIES.c.run_id.in_(list(run_ids)))
            .group_by(ENTRIES.c.run_id)
        )
        with self._reading("read the chain heads of runs") as conn:
            return {str(row[0]): int(row[1]) for row in conn.execute(query)}

    def record_rows(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        """Every recorded row of a run, by kind of chain entry, in the order recorded.

        For auditing (``verify``): the rows as stored, one mapping of column values each;
        ``"run"`` holds the run's own row.

        Raises:
            StoreError: The database failed.
        """
        tables = {
            "run": RUNS,
            "task": TASKS,
            "task_reason": TASK_REASONS,
            "message": MESSAGES,
            "call": CALLS,
            "tool_call": TOOL_CALLS,
            "event": EVENTS,
        }
        found: dict[str, list[dict[str, Any]]] = {}
        with self._reading(f"read the records of run {run_id!r}") as conn:
            for kind, table in tables.items():
                query = select(table).where(table.c.run_id == run_id)
                if "ordinal" in table.c:
                    query = query.order_by(table.c.ordinal)
                found[kind] = [dict(row) for row in conn.execute(query).mappings()]
        return found
