"""`DatabaseBase`: the engine lifecycle and transactions the stores share.

`DatabaseBase` opens an engine from a URL (SQLite or PostgreSQL; SQLite connections are
configured by `clearance._state.db.sqlite`), migrates its schema
(`clearance._state.db.migrations`), and gives its subclasses short read and write
transactions whose failures surface as `StoreError` naming the operation and the URL
(password masked). On an SQLite file a subclass may hold one connection per thread
(`HeldConnections`) and run its hottest statements on it directly (`DriverStatement`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, NoReturn, Self

from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import StoreError
from clearance._state.db.failures import CommitUnknown, failure_cause, mask_url
from clearance._state.db.fastpath import DriverStatement
from clearance._state.db.held import HeldConnections
from clearance._state.db.migrations import Schema, lock_key
from clearance._state.db.opening import is_sqlite_file_url, open_engine, supported_dialect
from clearance._state.db.server_clock import ServerClock
from clearance._state.db.sqlite import BUSY_TIMEOUT_MS, WRITE_OPTION

__all__ = ["DatabaseBase", "open_engine"]


class DatabaseBase:
    """An SQLAlchemy engine with the lifecycle and transactions the stores share.

    Subclasses set ``_LABEL`` (``"run ledger"``, ``"store"``), used in error messages.
    Usable as a context manager; `close` releases the connections.

    Args:
        url: SQLAlchemy URL: ``sqlite:///path`` (relative), ``sqlite:////abs/path``, or
            ``postgresql+psycopg://user@host:port/db``. The parent folder of an SQLite file
            is created (unless ``create`` is false or ``read_only``). Or an engine to share:
            used as its owner configured it, and not disposed by `close`.
        clock: Source of timestamps (aware UTC); ``None``: the database's clock
            (`server_time`).
        read_only: Open an SQLite file read-only (``mode=ro``; see `read_only_sqlite`),
            creating nothing and writing nothing, so a file or folder without write
            permission can be read; on PostgreSQL every session is read-only
            (``TRANSACTION READ ONLY``). Writes then fail with `StoreError`, and a
            schema that is not the latest is refused, not upgraded. Implies ``create``
            false, on any database.
        create: Create the database (an SQLite file and its folder) and its tables when it
            has none yet. ``False``, for code that acts on what a database already holds:
            a missing SQLite file, or a database without this store's table of versions
            (empty, or another program's), is refused with `StoreError` when the subclass
            migrates (`_migrate`), and nothing is written to it.

    Raises:
        StoreError: The URL is malformed or names an unsupported database or a missing
            driver, or names a folder, or gives an SQLite query argument that would be
            ignored, or (``create`` false) an SQLite file that does not exist, or the
            database cannot be reached (a PostgreSQL server fails after
            `clearance._state.db.opening.CONNECT_TIMEOUT_S` without an answer); the
            message holds the URL (password masked) and the cause.
    """

    _LABEL = "database"
    _HOLD_CONNECTIONS = False
    """Whether each thread holds one connection of an SQLite file (`HeldConnections`)."""
    _PAGE_SIZE: int | None = None
    """The page size of an SQLite file this creates (bytes); ``None``: SQLite's (4096)."""
    _LOCK_TIMEOUT_MS: int | None = BUSY_TIMEOUT_MS
    """On PostgreSQL, how long a statement waits for a lock another session holds before it
    fails (``lock_timeout``): as long as an SQLite writer waits for the file's lock, for the
    ledger, the store and memory alike; ``None``: the server's setting (by default,
    forever)."""

    def __init__(
        self,
        url: str | Engine,
        *,
        clock: Clock | None = None,
        read_only: bool = False,
        create: bool = True,
    ) -> None:
        self._closed = False
        self._owns_engine = not isinstance(url, Engine)
        self._create = create and not read_only
        # An SQLite file whose schema is read before anything is written (see `_migrate`).
        self._probe_url: str | None = None
        if isinstance(url, Engine):  # shared with its owner, used as it is configured
            self._url = mask_url(url.url.render_as_string(hide_password=False))
            self._read_only = False
            self._dialect = supported_dialect(url, self._LABEL, self._url)
            self._engine = url
            self._held: HeldConnections | None = None
        else:
            self._url = mask_url(url)
            sqlite_file = is_sqlite_file_url(url)
            self._read_only = read_only and (sqlite_file or _backend(url) == "postgresql")
            if sqlite_file and not self._create and not self._read_only:
                self._probe_url = url
            hold = self._HOLD_CONNECTIONS and sqlite_file
            self._engine = open_engine(
                url,
                label=self._LABEL,
                hold=hold,
                read_only=self._read_only,
                page_size=self._PAGE_SIZE,
                lock_timeout_ms=self._LOCK_TIMEOUT_MS,
                create=self._create,
            )
            self._dialect = self._engine.dialect.name
            self._held = HeldConnections(self._engine) if hold else None
        self._write_engine = self._engine.execution_options(**{WRITE_OPTION: True})
        # Measured with the schema version, on the same connection (`_schema_version`).
        self._server_time: Clock = (
            ServerClock(label=self._LABEL, url=self._url)
            if self._dialect == "postgresql"
            else utc_now
        )
        self._clock: Clock = clock if clock is not None else self._server_time

    @property
    def server_time(self) -> Clock:
        """The current time on the database's clock, for times other hosts compare.

        On PostgreSQL, this host's clock moved onto the server's (`ServerClock`, measured
        when the database is opened and at each lease renewal: leases and store expiries
        written here mean the same on every host); on SQLite, this host's.
        """
        return self._server_time

    @property
    def url(self) -> str:
        """The database URL, with any password shown as ``***``."""
        return self._url

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._dialect

    def close(self) -> None:
        """Release every connection. Further use raises `StoreError`; closing twice is fine."""
        if not self._closed:
            self._closed = True
            if self._held is not None:
                self._held.close()
            if self._owns_engine:
                self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._url!r})"

    def _checkpoint_wal(self) -> None:
        """Copy the frames of SQLite's write-ahead log into the database file, if it can now.

        SQLite checkpoints on its own when a commit grows the log past 1,000 pages, on the
        committing connection, and when the last connection closes; either can land on a
        caller that waits. A writer thread calls this between its commits instead, as SQLite
        suggests for checkpoints run from a separate thread ("Application-Initiated
        Checkpoints", https://www.sqlite.org/wal.html). ``PASSIVE``: it waits for no reader or
        writer, and frames it cannot copy now stay in the log for a later checkpoint. Nothing
        to do on PostgreSQL.

        Raises:
            StoreError: The checkpoint failed (the committed data stays in the log).
        """
        if self._dialect != "sqlite":
            return
        try:
            connection = self._engine.raw_connection()
            try:
                cursor = connection.cursor()
                cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
                cursor.close()
            finally:
                connection.close()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StoreError(
                f"cannot checkpoint the write-ahead log of the {self._LABEL} at {self._url}: "
                f"{failure_cause(exc)}"
            ) from exc

    @contextmanager
    def _writing(self, operation: str) -> Iterator[Connection]:
        """One write transaction; database failures become `StoreError` naming ``operation``.

        On SQLite it takes the write lock up front (``BEGIN IMMEDIATE``). When the connection
        is lost while the transaction commits (the server may have committed it), the error
        says so and is raised from a `CommitUnknown` (`commit_unknown`).
        """
        if self._closed:
            raise self._closed_error(operation)
        held = self._held
        if held is None:
            committing = False
            try:
                with self._write_engine.begin() as conn:
                    yield conn
                    committing = True
            except SQLAlchemyError as exc:
                if committing and getattr(exc, "connection_invalidated", False):
                    raise self._commit_unknown_error(operation, exc) from _unknown(exc)
                raise self._write_error(operation, exc) from exc
            return
        try:
            conn = held.connection()
            held.begin_immediate(conn)
            yield conn
            conn.commit()
        except BaseException as exc:
            self._give_up_held(held, exc, self._write_error(operation, exc))

    def _driver_first(
        self, statement: DriverStatement, values: Mapping[str, Any], operation: str
    ) -> tuple[Any, ...] | None:
        """The first row of a read run as `DriverStatement` on this thread's held connection.

        Like `_reading`: one statement in autocommit, one snapshot; failures become
        `StoreError` naming ``operation``. Only where connections are held (an SQLite file).
        """
        held = self._held
        assert held is not None
        if self._closed:
            raise self._closed_error(operation)
        try:
            cursor = held.driver_connection().execute(statement.sql, statement.parameters(values))
            row: tuple[Any, ...] | None = cursor.fetchone()
            cursor.close()  # ends the statement, and with it the read snapshot
        except BaseException as exc:
            self._give_up_held(held, exc, self._read_error(operation, exc))
        return row

    def _driver_write(
        self, statement: DriverStatement, values: Mapping[str, Any], operation: str
    ) -> int:
        """Run a write as `DriverStatement` in its own transaction on the held connection.

        Like `_writing`: ``BEGIN IMMEDIATE``, the statement, ``COMMIT``; on failure the
        connection is given up (rolling back) and database errors become `StoreError`
        naming ``operation``. Only where connections are held (an SQLite file).

        Returns:
            The statement's row count.
        """
        held = self._held
        assert held is not None
        if self._closed:
            raise self._closed_error(operation)
        try:
            dbapi = held.driver_connection()
            dbapi.execute("BEGIN IMMEDIATE")
            count = dbapi.execute(statement.sql, statement.parameters(values)).rowcount
            dbapi.commit()
        except BaseException as exc:
            self._give_up_held(held, exc, self._write_error(operation, exc))
        return count

    @staticmethod
    def _give_up_held(held: HeldConnections, exc: BaseException, error: StoreError) -> NoReturn:
        """Raise for ``exc``, a failure on this thread's held connection, giving it up.

        Giving the connection up rolls back what it holds. A database failure is raised as
        ``error`` (caused by ``exc``); anything else, a cancellation say, as it is.
        """
        held.release()
        if isinstance(exc, (sqlite3.Error, SQLAlchemyError)):
            raise error from exc
        raise exc

    def _closed_error(self, operation: str) -> StoreError:
        return StoreError(f"cannot {operation}: the {self._LABEL} at {self._url} is closed")

    def _write_error(self, operation: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"cannot {operation} in the {self._LABEL} at {self._url}: {failure_cause(exc)}"
        )

    def _commit_unknown_error(self, operation: str, exc: BaseException) -> StoreError:
        """The error of a write whose connection was lost while it committed.

        Its class is the one `_write_error` gives; it is raised from a `CommitUnknown`, so
        that the writes are not tried again as if they had not been committed.
        """
        return type(self._write_error(operation, exc))(
            f"cannot {operation} in the {self._LABEL} at {self._url}: the connection was "
            f"lost while committing, so it may have been committed or not: {failure_cause(exc)}"
        )

    def _read_error(self, operation: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"cannot {operation} from the {self._LABEL} at {self._url}: {failure_cause(exc)}"
        )

    def _migrate(self, schema: Schema) -> None:
        """Apply the migrations the database lacks, in order, in one transaction.

        See `clearance._state.db.migrations`. A database whose schema is newer than
        ``schema`` knows is refused. On a database opened read-only nothing is applied: one
        whose schema is not the latest is refused. Opened without ``create``, a database
        without the table of versions (none of this store's tables) is refused, and an
        SQLite file is read before anything is written to it (not even the switch to
        write-ahead logging).

        Raises:
            StoreError: The database's schema is newer than ``schema`` knows, or (opened
                read-only) not the latest, or (without ``create``) absent, or the database
                failed.
        """
        latest = schema.latest
        current = self._schema_version(schema)
        if current > latest:
            raise self._newer_error(current, latest)
        if current == latest:
            return
        if not current and not self._create:
            raise StoreError(
                f"no {self._LABEL} at {self._url}: the database has none of its tables "
                f"(no {schema.versions.name} table)"
            )
        if self._read_only:
            raise StoreError(
                f"the {self._LABEL} at {self._url}, opened read-only, has schema version "
                f"{current}, not {latest}: open it once with write access to upgrade it"
            )
        with self._writing("migrate the schema") as conn:
            if self._dialect == "postgresql":  # SQLite's BEGIN IMMEDIATE already serializes
                conn.execute(select(func.pg_advisory_xact_lock(lock_key(schema.versions.name))))
            current = schema.current_version(conn)  # again, under the write lock
            if current > latest:
                raise self._newer_error(current, latest)
            if not current and not self._create:  # dropped since it was read
                raise StoreError(f"no {self._LABEL} at {self._url}: its tables were removed")
            # Real time, not the injected clock: keeps a test clock's ticks for the data.
            schema.upgrade(conn, current, utc_now)

    def _schema_version(self, schema: Schema) -> int:
        """The schema version the database has (0: none of the store's tables).

        An SQLite file opened without ``create`` is read on a read-only connection of its
        own, so that a file that is not this store's is refused before it is written to.
        """
        if self._probe_url is None:
            with self._reading("read the schema version") as conn:
                if isinstance(self._server_time, ServerClock):
                    self._server_time.refresh(conn)
                return schema.current_version(conn)
        probe = open_engine(self._probe_url, label=self._LABEL, read_only=True)
        try:
            with probe.connect() as conn:
                return schema.current_version(conn)
        except SQLAlchemyError as exc:
            raise self._read_error("read the schema version", exc) from exc
        finally:
            probe.dispose()

    def _newer_error(self, current: int, latest: int) -> StoreError:
        return StoreError(
            f"the {self._LABEL} at {self._url} has schema version {current}, newer than "
            f"this version of Clearance supports ({latest}); upgrade Clearance"
        )

    @contextmanager
    def _reading(self, operation: str) -> Iterator[Connection]:
        """A connection to read with; failures become `StoreError` naming ``operation``.

        Its statements run in one transaction (a consistent snapshot), except on held
        connections (`HeldConnections`), where each statement runs alone in autocommit: a
        read of one statement is still one snapshot.
        """
        if self._closed:
            raise self._closed_error(operation)
        held = self._held
        if held is None:
            try:
                with self._engine.connect() as conn:
                    yield conn
            except SQLAlchemyError as exc:
                raise self._read_error(operation, exc) from exc
            return
        try:
            yield held.connection()
        except BaseException as exc:
            self._give_up_held(held, exc, self._read_error(operation, exc))


def _unknown(exc: BaseException) -> CommitUnknown:
    """A `CommitUnknown` caused by ``exc``."""
    marker = CommitUnknown(failure_cause(exc))
    marker.__cause__ = exc
    return marker


def _backend(url: str) -> str | None:
    """The backend a URL names (``"sqlite"``, ``"postgresql"``...); ``None``: it does not parse."""
    try:
        return make_url(url).get_backend_name()
    except (SQLAlchemyError, ValueError, TypeError):
        return None
