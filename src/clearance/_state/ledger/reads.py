"""`LedgerReads`: every read of the run ledger (runs, tasks, calls, messages, tool calls, chain).

Each read first waits for this ledger's queued writes (it reads its own writes) and runs in
one snapshot; database failures surface as `StoreError` naming the read. Rows are read with
`tolerant_columns` and checked as their records are built: a row edited by hand into what no
write puts there is a `MalformedRecord` naming the record and the field (`run_listing` lists
it among the runs that are fine instead).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import func, select

from clearance._core.errors import LedgerError, MalformedRecord
from clearance._core.row_limit import check_limit
from clearance._core.vocabulary import RecordKind
from clearance._state.db.types import tolerant_columns
from clearance._state.ledger.audit import AuditRows, CallSink, read_audit_rows
from clearance._state.ledger.audit import message_record as _message
from clearance._state.ledger.base import LedgerBase
from clearance._state.ledger.records import (
    CallRecord,
    ChainEntry,
    RunRecord,
    TaskRecord,
    ToolCallRecord,
    call_record,
    chain_entry,
    event_record,
    run_record,
    task_record,
    tool_call_record,
    unknown_run,
)
from clearance._state.ledger.row_checks import record_name, row_problem
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
            MalformedRecord: The run's row is malformed (the message names the run and the
                field).
            StoreError: No run matches (the message names ``run_id``), several runs share the
                prefix (the message lists some of them), or the database failed.
        """
        if not run_id:
            raise LedgerError("no run id given")
        query = (
            select(*tolerant_columns(RUNS))
            .where(func.substr(RUNS.c.run_id, 1, len(run_id)) == run_id)
            .order_by((RUNS.c.run_id == run_id).desc(), RUNS.c.run_id)
            .limit(6)
        )
        with self._reading(f"read run {run_id!r}") as conn:
            rows = conn.execute(query).all()
        if not rows:
            raise unknown_run(run_id, self._url)
        if rows[0].run_id != run_id and len(rows) > 1:
            shown = ", ".join(record_name(row.run_id) for row in rows[:5])
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
            MalformedRecord: One of them is malformed (see `run_listing`, which lists the
                others); the message names the run and the field.
            StoreError: The database failed.
        """
        records = []
        for entry in self.run_listing(limit):
            if isinstance(entry, MalformedRecord):
                raise entry
            records.append(entry)
        return records

    def run_count(self) -> int:
        """How many runs the ledger holds (what `run_listing` pages through).

        Raises:
            StoreError: The database failed.
        """
        with self._reading("count runs") as conn:
            return int(conn.execute(select(func.count()).select_from(RUNS)).scalar_one())

    def run_listing(self, limit: int = 20) -> list[RunRecord | MalformedRecord]:
        """The most recent runs, newest first, each its record or why it cannot be read.

        A run whose row was edited into what no write puts there (a ``created_at`` that is
        not a time, bytes for a status...) is its `MalformedRecord`, naming the run and the
        field, in its place among the others, so one such run does not hide the rest. A
        run's token totals, which a listing does not show, are left as stored (`get_run`
        checks them).

        Args:
            limit: Most runs to return (1 to `MAX_ROWS`, 10,000).

        Raises:
            ConfigError: ``limit`` is out of that range.
            StoreError: The database failed.
        """
        check_limit(limit)
        query = (
            select(*tolerant_columns(RUNS))
            .order_by(RUNS.c.created_at.desc(), RUNS.c.run_id.desc())
            .limit(limit)
        )
        with self._reading("list runs") as conn:
            rows = conn.execute(query).all()
        listed: list[RunRecord | MalformedRecord] = []
        for row in rows:
            try:
                listed.append(run_record(row, totals=False))
            except MalformedRecord as exc:
                listed.append(exc)
        return listed

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
            MalformedRecord: A task's row, or its run's, is malformed (the message names
                the record and the field).
            StoreError: The database failed.
        """
        query = (
            select(*tolerant_columns(TASKS))
            .where(TASKS.c.run_id == run_id)
            .order_by(TASKS.c.ordinal)
        )
        with self._reading(f"read the tasks of run {run_id!r}") as conn:
            records = [task_record(row) for row in conn.execute(query)]
            if not records:
                return []
            run = conn.execute(
                select(*tolerant_columns(RUNS)).where(RUNS.c.run_id == run_id)
            ).first()
        graph = None if run is None else run_record(run, totals=False).graph
        return merge_tasks(run_id, graph, records)

    def calls(self, run_id: str, *, subject: str | None = None) -> list[CallRecord]:
        """Return the model calls of a run, in the order they were recorded.

        Args:
            run_id: The run's full id; an unknown run has no calls (``[]``).
            subject: Only calls with this subject (``"task:<id>"``, ``"synthesis"``,
                ``"plan"``); ``None`` for all.

        Raises:
            MalformedRecord: A call's row is malformed (the message names the call and the
                field).
            StoreError: The database failed.
        """
        query = select(*tolerant_columns(CALLS)).where(CALLS.c.run_id == run_id)
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
            MalformedRecord: A reason's task id or text is not text (the message names it).
            StoreError: The database failed.
        """
        query = (
            select(TASK_REASONS.c.task_id, TASK_REASONS.c.error)
            .where(TASK_REASONS.c.run_id == run_id)
            .order_by(TASK_REASONS.c.ordinal)
        )
        reasons: dict[str, list[str]] = {}
        with self._reading(f"read the task reasons of run {run_id!r}") as conn:
            rows = conn.execute(query).all()
        for row in rows:
            for name in ("task_id", "error"):
                if type(row._mapping[name]) is not str:
                    raise MalformedRecord(
                        f"a task reason of task {record_name(row.task_id)} of run "
                        f"{record_name(run_id)} is malformed: its {name} is not text"
                    )
            reasons.setdefault(row.task_id, []).append(row.error)
        return reasons

    def task_reason_statuses(self, run_id: str) -> dict[str, list[str]]:
        """The status each reason of `task_reasons` was recorded with, in the same order.

        Returns:
            Task id to ``failed``, ``skipped`` or ``interrupted`` per reason, oldest first.

        Raises:
            MalformedRecord: A reason's task id or status is not text.
            StoreError: The database failed.
        """
        query = (
            select(TASK_REASONS.c.task_id, TASK_REASONS.c.status)
            .where(TASK_REASONS.c.run_id == run_id)
            .order_by(TASK_REASONS.c.ordinal)
        )
        statuses: dict[str, list[str]] = {}
        with self._reading(f"read the task reasons of run {run_id!r}") as conn:
            rows = conn.execute(query).all()
        for row in rows:
            if type(row.task_id) is not str or type(row.status) is not str:
                raise MalformedRecord(
                    f"a task reason of run {record_name(run_id)} is malformed: its task id "
                    "or status is not text"
                )
            statuses.setdefault(row.task_id, []).append(row.status)
        return statuses

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        """Return the messages of a run, in the order first recorded.

        Args:
            run_id: The run's full id; an unknown run has no messages (``[]``).

        Returns:
            One mapping per message with the fields of `Message`: ``id``, ``sender``,
            ``recipient``, ``content`` and ``created_at`` (an aware UTC datetime).

        Raises:
            MalformedRecord: A message's id, sender, recipient or content is not text, or its
                time is not a time (the message names the message and the field).
            StoreError: The database failed.
        """
        query = (
            select(*tolerant_columns(MESSAGES))
            .where(MESSAGES.c.run_id == run_id)
            .order_by(MESSAGES.c.ordinal)
        )
        with self._reading(f"read the messages of run {run_id!r}") as conn:
            rows = conn.execute(query).all()
        return [_message(row) for row in rows]

    def tool_calls(self, run_id: str) -> list[ToolCallRecord]:
        """Return the tool calls of a run, in the order recorded (``[]`` for none).

        Raises:
            MalformedRecord: A tool call's row is malformed (the message names it and the
                field).
            StoreError: The database failed.
        """
        query = (
            select(*tolerant_columns(TOOL_CALLS))
            .where(TOOL_CALLS.c.run_id == run_id)
            .order_by(TOOL_CALLS.c.ordinal)
        )
        with self._reading(f"read the tool calls of run {run_id!r}") as conn:
            return [tool_call_record(row) for row in conn.execute(query)]

    def chain_entries(self, run_id: str) -> list[ChainEntry]:
        """Return a run's hash-chain entries, in order (``[]`` for none).

        Raises:
            MalformedRecord: An entry's row is malformed (the message names it and the
                field).
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
            MalformedRecord: A run's last ``seq`` is not a whole number (edited by hand).
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
            rows = conn.execute(query).all()
        heads: dict[str, int] = {}
        for run, seq in rows:
            if type(seq) is not int:
                raise MalformedRecord(
                    f"the hash chain of run {record_name(run)} is malformed: its last seq is "
                    "not a whole number"
                )
            heads[str(run)] = seq
        return heads

    def record_rows(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        """Every recorded row of a run, by kind of chain entry, in the order recorded.

        For auditing (``verify``): the rows as stored, one mapping of column values each;
        ``"run"`` holds the run's own row.

        Raises:
            MalformedRecord: A row holds bytes, or a time or JSON that is not one (the
                message names the record and the column): nothing a write puts there, and
                nothing a digest of it could be computed from.
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
                query = select(*tolerant_columns(table)).where(table.c.run_id == run_id)
                if "ordinal" in table.c:
                    query = query.order_by(table.c.ordinal)
                found[kind] = [_checked_row(kind, row) for row in conn.execute(query)]
        return found

    def audit_rows(self, run_id: str, sink: CallSink) -> AuditRows:
        """Every record of a run, each table read once, in one snapshot (for ``verify``).

        The rows are those of `record_rows` and the records those of `tasks`,
        `task_reasons`, `messages`, `tool_calls` and `events`; the calls are read last, one
        row at a time, through ``sink`` (see `clearance._state.ledger.audit`), so a run's
        prompts are never all in memory at once.

        Raises:
            MalformedRecord: A row is malformed (the message names the record and field).
            StoreError: The database failed.
        """
        with self._reading(f"read the records of run {run_id!r}") as conn:
            return read_audit_rows(conn, run_id, sink)


_RECORDS: dict[str, Callable[[Any], object]] = {
    "run": run_record,
    "task": task_record,
    "call": call_record,
    "tool_call": tool_call_record,
    "event": event_record,
}
"""The record each kind of row is checked as (`record_rows`); a message as `_message`."""


def _checked_row(kind: str, row: Any) -> dict[str, Any]:
    """A row of ``kind`` as `LedgerReads.record_rows` returns it, checked as its record is.

    Raises:
        MalformedRecord: The row is not what its record holds (`clearance._state.ledger.
            records`), or a column no record holds is bytes or not a time (`row_problem`).
    """
    check = _RECORDS.get(kind)
    if check is not None:
        check(row)
    elif kind == RecordKind.MESSAGE:
        _message(row)
    values = dict(row._mapping)
    problem = row_problem(kind, values)
    if problem is not None:
        raise MalformedRecord(problem)
    return values
