"""`LedgerEvents`: a run's events (spawns, clarifications, limits...), recorded and read.

An event is append-only and chained like every record. Its kind is an `EventKind` and its data
is validated against that kind's model (`clearance._core.event_schema`) before it is written,
so a new kind of event needs no table change, only a member and a model. `record_first_event`
records one only if the run has none like it yet, in one write transaction (a person's decision
on an approval request: the first recorded is the only one).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from clearance._core.errors import ConfigError
from clearance._core.event_schema import dump_event
from clearance._core.ids import new_id
from clearance._core.prompt import canonical_json
from clearance._core.vocabulary import EventKind
from clearance._state.db.types import tolerant_columns
from clearance._state.ledger.reads import LedgerReads
from clearance._state.ledger.records import EventRecord, event_record, unknown_run
from clearance._state.ledger.schema import EVENTS, RUNS
from clearance._state.write_behind import PendingWrite, Rows

__all__ = ["LedgerEvents"]


class LedgerEvents(LedgerReads):
    """The events of `RunLedger` (see there for opening and errors)."""

    def record_event(self, run_id: str, kind: EventKind, subject: str, data: dict[str, Any]) -> str:
        """Record one event of a run (append-only, chained like every record).

        Args:
            run_id: The run's full id.
            kind: What happened (``spawn``, ``clarification``, ``limit_exceeded``...).
            subject: What it happened to (a task, an agent, a call), at most 160 characters.
            data: JSON-ready details matching the kind's model in
                `clearance._core.event_schema` (fields the model does not name are refused).

        Returns:
            The new event's id (``evt_...``).

        Raises:
            ConfigError: ``kind`` is unknown, ``subject`` is too long, or ``data`` is not
                JSON-ready or does not match the kind's schema.
            StoreError: The run is unknown, or the database failed (inside `write_behind`:
                raised by a later call).
        """
        row = self._event_row(run_id, kind, subject, data)
        # str(): an `EventKind` is named by its value, not its repr.
        operation = f"record a {str(kind)!r} event of run {run_id!r}"
        self._submit(PendingWrite(operation, {"event": [row]}))
        return str(row["event_id"])

    def record_first_event(
        self, run_id: str, kind: EventKind, subject: str, data: dict[str, Any], *, unique: str
    ) -> EventRecord | None:
        """Record an event unless the run has one of ``kind`` with the same ``data[unique]``.

        The check and the write are one write transaction taken before the check (SQLite:
        ``BEGIN IMMEDIATE``; PostgreSQL: the run's row locked ``FOR UPDATE``, which every
        write of the run's chain takes too), so of two processes recording at once the
        second sees the first's event and records nothing: a person's decision on an
        approval request is recorded once. Written at once, after this ledger's queued
        writes, even inside `write_behind`.

        Args:
            run_id: The run's full id.
            kind: The event's kind.
            subject: What it happened to, as `record_event`.
            data: Its data, as `record_event`.
            unique: The field of ``data`` no two events of ``kind`` of the run may share.

        Returns:
            ``None`` when recorded; else the run's earlier event of ``kind`` with that value
            (nothing is recorded).

        Raises:
            ConfigError: As `record_event`.
            MalformedRecord: An earlier event's row is malformed.
            StoreError: The run is unknown, or the database failed.
        """
        row = self._event_row(run_id, kind, subject, data)
        value = row["data"].get(unique)
        lost = self._leases.take_lost()
        if lost is not None:
            raise lost
        with self._writing(f"record a {str(kind)!r} event of run {run_id!r}") as conn:
            if self._dialect == "postgresql":  # SQLite's BEGIN IMMEDIATE already serializes
                locked = select(RUNS.c.run_id).where(RUNS.c.run_id == run_id).with_for_update()
                if conn.execute(locked).first() is None:
                    raise unknown_run(run_id, self._url)
            query = (
                select(*tolerant_columns(EVENTS))
                .where(EVENTS.c.run_id == run_id, EVENTS.c.kind == kind)
                .order_by(EVENTS.c.ordinal)
            )
            for found in conn.execute(query):
                earlier = event_record(found)
                if earlier.data.get(unique) == value:
                    return earlier
            rows = [row]
            built: Rows = {"event": rows}
            self._write_rows(conn, "event", rows)
            entries, requests = self._chain.entries_of(conn, [built])
            self._chain.append(conn, entries)
        self._chain.committed(requests)
        return None

    def _event_row(
        self, run_id: str, kind: EventKind, subject: str, data: dict[str, Any]
    ) -> dict[str, Any]:
        """The row of a new event, its data checked against its kind's schema."""
        if not kind or len(kind) > 64:
            raise ConfigError(
                f"an event kind must be 1 to 64 characters, got {str(kind)!r}", field="kind"
            )
        if len(subject) > 160:
            raise ConfigError("an event subject must be at most 160 characters", field="subject")
        try:
            data = json.loads(canonical_json(data))  # a copy: later edits of `data` are not kept
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"event data is not JSON-ready: {exc}", field="data") from exc
        if not isinstance(data, dict):
            raise ConfigError("event data must be a mapping", field="data")
        return {
            "event_id": new_id("evt"),
            "run_id": run_id,
            "kind": kind,
            "subject": subject,
            "data": dump_event(kind, data),
            "created_at": self._clock(),
        }

    def events(self, run_id: str, kind: str | None = None) -> list[EventRecord]:
        """Return the events of a run, in the order recorded (``[]`` for none).

        Args:
            run_id: The run's full id.
            kind: Only events of this kind; ``None`` for all.

        Raises:
            MalformedRecord: An event's row is malformed (the message names the event and
                the field).
            StoreError: The database failed.
        """
        query = select(*tolerant_columns(EVENTS)).where(EVENTS.c.run_id == run_id)
        if kind is not None:
            query = query.where(EVENTS.c.kind == kind)
        with self._reading(f"read the events of run {run_id!r}") as conn:
            return [event_record(row) for row in conn.execute(query.order_by(EVENTS.c.ordinal))]
