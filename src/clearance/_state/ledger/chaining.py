"""The hash chain's hookup: each committed record appended to its run's chain.

The chain itself (digests, keyed links, group entries) is `clearance._state.chain`; this
module reads a run's chain head in the write transaction and appends the records written:
one entry for a run's only record, one group entry for several.

A call's outcome is an update of its request's row, and its entry digests the row as
updated. The writer keeps the row of each request it committed until the
outcome arrives (`ChainWriter.committed`), so the updated row is known without reading it
back; an outcome whose request another writer committed (or a failed group's) is read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from clearance._core.errors import LedgerError
from clearance._state.chain import (
    GROUP_KIND,
    LEDGER_KEY_ENV,
    SUBJECT_FIELDS,
    chain_sha256,
    group_entry,
    payload_sha256,
)
from clearance._state.db import run_on_driver
from clearance._state.ledger.records import unknown_run
from clearance._state.ledger.schema import CALLS, ENTRIES, RUNS
from clearance._state.ledger.statements import WRITE_ORDER, statement
from clearance._state.write_behind import Rows

__all__ = ["ChainWriter", "Entry"]

Entry = tuple[str, str, str, str]
"""``(run id, kind, subject, payload digest)`` of one record to chain."""

_ENTRY_COLUMNS = (
    "run_id", "seq", "kind", "subject", "payload_sha256", "chain_sha256", "records",
)  # fmt: skip
_INSERT_ENTRY = (
    f"INSERT INTO {ENTRIES.name} ({', '.join(_ENTRY_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
"""The chain entries' ``INSERT`` on SQLite (as SQLAlchemy would compile it)."""

_HEAD = (
    f"SELECT r.chain_key_id, e.seq, e.chain_sha256 FROM {RUNS.name} AS r "
    f"LEFT JOIN {ENTRIES.name} AS e ON e.run_id = r.run_id AND e.seq = "
    f"(SELECT max(seq) FROM {ENTRIES.name} WHERE run_id = ?) WHERE r.run_id = ?"
)
"""A run's key id and its last entry's ``(seq, chain)`` (``NULL``s before its first), on SQLite."""

_OUTCOME_FIELDS = (
    "response", "finish_reason", "requests", "prompt_tokens", "completion_tokens",
    "cached_prompt_tokens", "usage_counted", "error", "latency_s",
)  # fmt: skip
"""What a call's outcome sets (as ``b_<name>``; see `statement`), besides ``pending = 0``."""

_outcome_values = itemgetter(*(f"b_{name}" for name in _OUTCOME_FIELDS))
"""A ``call_finish`` row's `_OUTCOME_FIELDS` values, in order."""

_PLACES = {key: i for i, key in enumerate(WRITE_ORDER)}


def _write_order(item: tuple[str, Any]) -> int:
    """The place of ``(key, rows)`` in `WRITE_ORDER`, for sorting a write's rows."""
    return _PLACES[item[0]]


class ChainWriter:
    """Appends records to their runs' hash chains, inside the transaction that wrote them.

    Args:
        key: The ledger key the chains are made with, or ``None`` (unkeyed).
        key_id: Its id (`clearance._state.chain.key_id`), or ``None``.
        url: The ledger's URL (password masked), for error messages.
        dialect: ``"sqlite"`` or ``"postgresql"``.
    """

    def __init__(self, key: bytes | None, key_id: str | None, url: str, dialect: str) -> None:
        self._key = key
        self._key_id = key_id
        self._url = url
        self._dialect = dialect
        # The row of each committed request whose outcome has not come yet.
        self._requests: dict[str, dict[str, Any]] = {}

    def append_run(self, conn: Connection, run_id: str) -> None:
        """Append a run's row, as it is now, to its chain."""
        row = dict(conn.execute(select(RUNS).where(RUNS.c.run_id == run_id)).mappings().one())
        self.append(conn, [(run_id, "run", run_id, payload_sha256("run", row))])

    def _head(self, conn: Connection, run_id: str) -> tuple[int, str, bytes | None]:
        """``(last seq, last chain value, key)`` of a run, read in the write transaction.

        Raises:
            StoreError: The run is unknown, or it is chained with another key than this
                ledger's (appending would break its chain).
        """
        if self._dialect == "sqlite":
            # One statement on the driver's connection: SQLAlchemy's execution of the two
            # queries below costs several times what SQLite does.
            cursor = run_on_driver(conn, _HEAD, (run_id, run_id))
            try:
                found = cursor.fetchone()
            finally:
                cursor.close()
            if found is None:
                raise unknown_run(run_id, self._url)
            self._check_key(run_id, found[0])
            return (found[1], found[2], self._key) if found[1] is not None else (0, "", self._key)
        query = select(RUNS.c.chain_key_id).where(RUNS.c.run_id == run_id)
        if self._dialect == "postgresql":
            query = query.with_for_update()  # one writer per run's chain at a time
        row = conn.execute(query).first()
        if row is None:
            raise unknown_run(run_id, self._url)
        self._check_key(run_id, row[0])
        last = conn.execute(
            select(ENTRIES.c.seq, ENTRIES.c.chain_sha256)
            .where(ENTRIES.c.run_id == run_id)
            .order_by(ENTRIES.c.seq.desc())
            .limit(1)
        ).first()
        return (last[0], last[1], self._key) if last is not None else (0, "", self._key)

    def _check_key(self, run_id: str, recorded: str | None) -> None:
        """Raise `LedgerError` unless run ``run_id`` is chained with this ledger's key."""
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

    def append(self, conn: Connection, entries: Sequence[Entry]) -> None:
        """Chain ``(run id, kind, subject, payload digest)`` records, in order, per run.

        Each run gets one entry: the record's own for one record, a group entry
        (`clearance._state.chain.group_entry`) for several. On SQLite the rows go straight
        to ``sqlite3``'s ``executemany`` (all their columns are text and integers, which
        need no conversion); elsewhere SQLAlchemy inserts them.
        """
        by_run: dict[str, list[tuple[str, str, str]]] = {}
        for run_id, kind, subject, payload in entries:
            by_run.setdefault(run_id, []).append((kind, subject, payload))
        rows: list[tuple[str, int, str, str, str, str, str | None]] = []
        for run_id, records in by_run.items():
            seq, previous, key = self._head(conn, run_id)
            seq += 1
            text: str | None = None
            if len(records) == 1:
                kind, subject, payload = records[0]
            else:
                kind = GROUP_KIND
                subject, payload, text = group_entry(records)
            chain = chain_sha256(previous, run_id, seq, kind, subject, payload, key)
            rows.append((run_id, seq, kind, subject, payload, chain, text))
        if not rows:
            return
        if self._dialect == "sqlite":
            run_on_driver(conn, _INSERT_ENTRY, rows, many=True).close()
            return
        conn.execute(
            statement("entry", self._dialect),
            [dict(zip(_ENTRY_COLUMNS, r, strict=True)) for r in rows],
        )

    def committed(self, pending: dict[str, dict[str, Any] | None]) -> None:
        """Note what `entries_of` returned as pending, once its transaction is committed."""
        for call_id, fields in pending.items():
            if fields is None:
                self._requests.pop(call_id, None)
            else:
                self._requests[call_id] = fields

    def _read_outcomes(
        self, conn: Connection, entries: list[Entry], unknown: dict[str, list[int]]
    ) -> list[Entry]:
        """``entries`` with the outcomes at ``unknown`` digested from their rows, read back.

        An outcome whose call has no row is left out (it updated nothing).
        """
        digests: dict[str, str] = {}
        finished = list(unknown)
        columns = [c for c in CALLS.c if c.name not in ("messages", "manifest")]
        for start in range(0, len(finished), 500):
            query = select(*columns).where(CALLS.c.call_id.in_(finished[start : start + 500]))
            for found in conn.execute(query).mappings():
                digests[found["call_id"]] = payload_sha256("call", dict(found))
        missing: set[int] = set()
        for call_id, places in unknown.items():
            digest = digests.get(call_id)
            for place in places:
                if digest is None:
                    missing.add(place)
                else:
                    run_id, kind, subject, _ = entries[place]
                    entries[place] = (run_id, kind, subject, digest)
        if missing:
            entries = [entry for place, entry in enumerate(entries) if place not in missing]
        return entries

    def entries_of(
        self, conn: Connection, built: Sequence[Rows]
    ) -> tuple[list[Entry], dict[str, dict[str, Any] | None]]:
        """The chain entries of writes about to be committed, in write order.

        A call's outcome (an update) is digested from its row as updated: from its request
        if this writer committed it, else read back.

        Returns:
            The entries, and the changes to the committed requests to make with `committed`
            once the transaction is committed (a request's row, or ``None`` when its
            outcome is written).
        """
        pending: dict[str, dict[str, Any] | None] = {}
        committed = self._requests
        entries: list[Entry] = []
        unknown: dict[str, list[int]] = {}  # call id -> places of its outcome's entries
        for rows in built:
            # Most writes are of one kind; several go in `WRITE_ORDER`, as they are written.
            items = rows.items() if len(rows) == 1 else sorted(rows.items(), key=_write_order)
            for key, kind_rows in items:
                if key == "call_finish":
                    for row in kind_rows:
                        call_id = row["b_call_id"]
                        request = pending.get(call_id) or committed.get(call_id)
                        if request is None:  # digested once read back, below
                            unknown.setdefault(call_id, []).append(len(entries))
                            entries.append((row["b_run_id"], "call", call_id, ""))
                            continue
                        updated = {**request, "pending": 0}
                        updated.update(zip(_OUTCOME_FIELDS, _outcome_values(row), strict=True))
                        entries.append(
                            (row["b_run_id"], "call", call_id, payload_sha256("call", updated))
                        )
                        pending[call_id] = None
                    continue
                if key == "call":
                    for row in kind_rows:
                        if row.get("pending"):
                            # The row as written (its digested fields are read from it later).
                            pending[row["call_id"]] = row
                field = SUBJECT_FIELDS[key]
                for row in kind_rows:
                    entries.append((row["run_id"], key, str(row[field]), payload_sha256(key, row)))
        if unknown:
            entries = self._read_outcomes(conn, entries, unknown)
        return entries, pending
