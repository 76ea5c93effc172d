"""`LedgerBase`: the run ledger's database, its group commit and its write-behind thread.

Writes are queued as rows per kind of statement (`clearance._state.ledger.rows`) and
committed by `LedgerBase._commit_writes`, one ``executemany`` per statement and chunk, each
record then appended to its run's hash chain (`clearance._state.ledger.chaining`). Inside
`LedgerBase.write_behind` a writer thread commits them in groups
(`clearance._state.write_behind`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache, partial
from typing import Any

from sqlalchemy import Update, bindparam, update
from sqlalchemy.engine import Connection, make_url

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import LedgerError, StoreError
from clearance._core.locations import DEFAULT_LEDGER_URL
from clearance._state.chain import key_id, load_ledger_key, payload_sha256
from clearance._state.db import (
    DatabaseBase,
    DriverStatement,
    compiled_statement,
    run_on_driver,
)
from clearance._state.ledger.chaining import ChainWriter
from clearance._state.ledger.leases import LeaseKeeper
from clearance._state.ledger.records import unknown_run
from clearance._state.ledger.rows import last_upsert_per_task
from clearance._state.ledger.schema import LEDGER_SCHEMA, RUNS
from clearance._state.ledger.statements import WRITE_ORDER, statement
from clearance._state.write_behind import COMMITTED, Rows, Write, WriteBehind

__all__ = ["DEFAULT_LEDGER_URL", "LedgerBase"]

_CHUNK = 64
"""Writes turned into rows, or rows sent to the database, between two yields of the GIL."""


def _yield_gil() -> None:
    """Let another thread that waits for the interpreter lock run (``time.sleep(0)``)."""
    time.sleep(0)


def _no_yield() -> None:
    """Go on without yielding the interpreter lock (a coroutine waits for this commit)."""


class LedgerBase(DatabaseBase):
    """The run ledger's database: opening, group commit, write-behind and closing.

    See `RunLedger` for the arguments and the errors raised.
    """

    _LABEL = "run ledger"
    # 16 KiB pages for a new ledger file: a group commit writes each page it changed to the
    # write-ahead log, and a call's row (its prompt's messages and manifest) fills most of
    # a 4 KiB page by itself, so with SQLite's default every call and its outcome each
    # write a page; with 16 KiB pages a group writes fewer, fuller pages (a run's writer
    # spends about a tenth less CPU). An existing file keeps its page size.
    _PAGE_SIZE = 16384

    def _closed_error(self, operation: str) -> StoreError:
        return LedgerError(str(super()._closed_error(operation)))

    def _write_error(self, operation: str, exc: BaseException) -> StoreError:
        return LedgerError(str(super()._write_error(operation, exc)))

    def _read_error(self, operation: str, exc: BaseException) -> StoreError:
        return LedgerError(str(super()._read_error(operation, exc)))

    def __init__(
        self,
        url: str = DEFAULT_LEDGER_URL,
        *,
        clock: Clock | None = None,
        read_only: bool = False,
        create: bool = True,
    ) -> None:
        key = load_ledger_key()  # a bad key fails before anything is opened
        # Records keep this host's times (a run's times all from one clock); leases are on
        # the database's (`server_time`).
        super().__init__(url, clock=clock or utc_now, read_only=read_only, create=create)
        self._key = key
        self._key_id = key_id(key) if key is not None else None
        database = make_url(url).database or ""
        # Each thread has its own in-memory SQLite database: a writer thread would write
        # to another one, so an in-memory ledger writes on the caller's thread always.
        self._in_memory = self._dialect == "sqlite" and (
            database in ("", ":memory:") or "mode=memory" in database
        )
        self._chain = ChainWriter(key, self._key_id, self._url, self._dialect)
        # The digested fields of each run this ledger started, as it last wrote them
        # (`RunLedger._update_run`).
        self._runs: dict[str, dict[str, Any]] = {}
        # Not `self._writing`: that would wait for (and take the errors of) the writer thread,
        # which belong to the ledger's user.
        self._leases = LeaseKeeper(
            partial(DatabaseBase._writing, self), renew=not self._in_memory, clock=self._server_time
        )
        try:
            self._migrate(LEDGER_SCHEMA)
        except BaseException:
            self._engine.dispose()
            raise

    @property
    def chain_key(self) -> bytes | None:
        """The ledger key this ledger chains (and verifies) with, or ``None`` (unkeyed).

        Read from ``CLEARANCE_LEDGER_KEY`` or ``CLEARANCE_LEDGER_KEY_FILE`` when the ledger
        is opened (see `clearance._state.chain`).
        """
        return self._key

    def wait_committed(self) -> Awaitable[None]:
        """Wait, without blocking the event loop, until every queued write is committed.

        Await what it returns (no coroutine of its own: a request waits on the writer's
        future itself). Nothing to wait for outside `write_behind` (writes are committed
        when made). Inside it, the writer thread takes the queue at once and wakes the
        waiting coroutine itself when the group is committed (`WriteBehind.wait`): no thread
        is started per wait, and every coroutine of a loop woken by one group costs one
        wake-up of the loop.

        Raises:
            StoreError: A queued write failed (raised once).
        """
        behind = self._behind
        return behind.wait() if behind is not None else COMMITTED

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
        queued (at most once a second), so that neither a later commit nor `close` copies a
        whole run's log into the database file (SQLite's "Application-Initiated Checkpoints",
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
        # when its tasks wait for their models), so its work rarely competes for the GIL; see
        # BENCHMARKS.md for how 10 ms was chosen. Between groups, the writer checkpoints
        # SQLite's log, so that neither the run's last commit nor `close` has to copy a whole
        # run's log into the database file.
        behind = WriteBehind(
            self._commit_writes,
            name="clearance-ledger-writer",
            quiet_s=0.010,
            max_delay_s=0.5,
            on_idle=self._checkpoint_wal,  # nothing to do on PostgreSQL
            # A checkpoint writes the database file (and syncs it): at most every 50 ms, so
            # that it seldom delays a request's commit that a model call waits for, yet the
            # log is copied while the run waits on its models rather than all at `close`
            # (once a second left a short run's whole log to `close`: 20 -> 14 ms at the end
            # of a 500-task run, BENCHMARKS.md section 2).
            idle_interval_s=0.05,
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
        try:
            if behind is not None:
                behind.close()
        finally:
            self._leases.stop()
            super().close()

    def _submit(self, write: Write) -> None:
        lost = self._leases.take_lost()
        if lost is not None:
            raise lost
        behind = self._behind
        if behind is not None:
            behind.submit(write)
        else:
            self._commit_writes([write])

    def _commit_writes(self, writes: Sequence[Write]) -> None:
        """Commit ``writes`` in one transaction, one ``executemany`` per statement and chunk.

        On the writer thread, the work is cut into chunks of `_CHUNK` writes or rows, and the
        thread lets go of the interpreter lock between chunks (`_yield_gil`), which gives an
        event loop waiting for the lock a chance to run before the rest of a large group;
        not when a coroutine waits for the commit (a request to be sent): letting the loop
        run would only delay it.
        """
        behind = self._behind
        pause = _no_yield if behind is not None and behind.awaited else _yield_gil
        by_key: dict[str, list[dict[str, Any]]] = {}
        built: list[Rows] = []
        for start in range(0, len(writes), _CHUNK):
            if start:
                pause()
            for write in writes[start : start + _CHUNK]:
                rows_of = write.build()
                built.append(rows_of)
                for key, rows in rows_of.items():
                    by_key.setdefault(key, []).extend(rows)
        if len(by_key.get("task", ())) > 1:
            by_key["task"] = last_upsert_per_task(by_key["task"])
        operation = writes[0].operation if len(writes) == 1 else f"record {len(writes)} writes"
        with self._writing(operation) as conn:
            # A run's row before the rows that refer to it; an unknown kind fails loudly.
            for key in sorted(by_key, key=WRITE_ORDER.index):
                queued = by_key[key]
                for start in range(0, len(queued), _CHUNK):
                    pause()
                    self._write_rows(conn, key, queued[start : start + _CHUNK])
            # Then each record's chain entry, in the order written (see `_state.chain`).
            pause()
            entries, requests = self._chain.entries_of(conn, built)
            self._chain.append(conn, entries)
        self._chain.committed(requests)

    def _change_run(self, operation: str, run_id: str, **values: Any) -> None:
        """Update a run's row and chain its new state, in a transaction of its own.

        If the transaction fails, the row this ledger remembers for the run is forgotten
        (the database may hold the row from before): the next change reads it back.
        """
        try:
            with self._writing(operation) as conn:
                self._update_run(conn, run_id, **values)
        except BaseException:
            self._runs.pop(run_id, None)
            raise

    def _update_run(self, conn: Connection, run_id: str, **values: Any) -> None:
        """Update a run's row and append its new state to the run's chain.

        The new state is digested from the row this ledger wrote (`start_run`) and updated
        since, while the row still names this ledger as its owner (then no other ledger has
        changed a digested field); otherwise it is read back (a run reopened to resume it,
        or taken by another process).
        """
        known = self._runs.pop(run_id, None)
        if known is not None and self._owned_update(conn, run_id, values):
            row = {**known, **values}
            self._chain.append(conn, [(run_id, "run", run_id, payload_sha256("run", row))])
            if row.get("owner") == self._leases.owner:  # else forgotten: no longer ours
                self._runs[run_id] = row
            return
        result = conn.execute(update(RUNS).where(RUNS.c.run_id == run_id).values(**values))
        if result.rowcount == 0:
            raise unknown_run(run_id, self._url)
        self._chain.append_run(conn, run_id)

    def _owned_update(self, conn: Connection, run_id: str, values: dict[str, Any]) -> bool:
        """Update the run's ``values`` if this ledger owns its row; whether it did.

        On SQLite the statement is compiled once per process (`compiled_statement`) and runs
        on the driver's connection: SQLAlchemy would compile it again for each ledger opened.
        """
        owner = self._leases.owner
        columns = tuple(sorted(values))
        driver = (
            compiled_statement(_owned_run_update(columns), self._engine.dialect)
            if self._dialect == "sqlite"
            else None
        )
        if driver is None:
            query = update(RUNS).where(RUNS.c.run_id == run_id, RUNS.c.owner == owner)
            return bool(conn.execute(query.values(**values)).rowcount)
        bound = {f"v_{name}": value for name, value in values.items()}
        bound["w_run_id"], bound["w_owner"] = run_id, owner
        cursor = run_on_driver(conn, driver.sql, driver.parameters(bound))
        try:
            return bool(cursor.rowcount)
        finally:
            cursor.close()

    def _write_rows(self, conn: Connection, key: str, rows: list[dict[str, Any]]) -> None:
        """Write ``rows`` of kind ``key`` (`statement`) in ``conn``'s transaction.

        On SQLite, rows that all give the same columns go to ``sqlite3``'s
        ``executemany`` as the statement SQLAlchemy compiles for those columns, each value
        through its type's bind processor (`DriverStatement`): SQLAlchemy's execution
        machinery costs several times what SQLite does for these short rows. Otherwise (and
        for rows whose columns differ), SQLAlchemy executes the statement.
        """
        if self._dialect == "sqlite":
            first = rows[0].keys()
            # Every row gives the same columns (compared in C: no Python frame per row).
            if all(map(first.__eq__, map(dict.keys, rows))):
                driver = self._driver_statement(key, tuple(first))
                if driver is not None:
                    params = driver.parameters_many(rows)
                    run_on_driver(conn, driver.sql, params, many=True).close()
                    return
        # The statement is built once per ledger: each call binds parameters.
        conn.execute(statement(key, self._dialect), rows)

    def _driver_statement(self, key: str, columns: tuple[str, ...]) -> DriverStatement | None:
        """The `DriverStatement` of kind ``key`` for rows giving ``columns``, or ``None``."""
        # An update names its own bound parameters; an insert binds the columns given.
        return compiled_statement(
            statement(key, self._dialect),
            self._engine.dialect,
            None if key == "call_finish" else columns,
        )

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


@cache
def _owned_run_update(columns: tuple[str, ...]) -> Update:
    """The update of a run's ``columns`` where its row names the owner given.

    Bound names: ``w_run_id``, ``w_owner``, and ``v_<column>`` for each column.
    """
    return (
        update(RUNS)
        .where(RUNS.c.run_id == bindparam("w_run_id"), RUNS.c.owner == bindparam("w_owner"))
        .values({name: bindparam(f"v_{name}", type_=RUNS.c[name].type) for name in columns})
    )
