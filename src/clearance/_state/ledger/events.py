"""`LedgerEvents`: a run's events (spawns, clarifications, limits...), recorded and read.

An event is append-only and chained like every record. Its kind is an `EventKind` and its data
is validated against that kind's model (`clearance._core.event_schema`) before it is written,
so a new kind of event needs no table change, only a member and a model.
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
from clearance._state.ledger.records import EventRecord, event_record
from clearance._state.ledger.schema import EVENTS
from clearance._state.write_behind import PendingWrite

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
        data = dump_event(kind, data)
        event_id = new_id("evt")
        row = {
            "event_id": event_id,
            "run_id": run_id,
            "kind": kind,
            "subject": subject,
            "data": data,
            "created_at": self._clock(),
        }
        # str(): an `EventKind` is named by its value, not its repr.
        operation = f"record a {str(kind)!r} event of run {run_id!r}"
        self._submit(PendingWrite(operation, {"event": [row]}))
        return event_id

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
