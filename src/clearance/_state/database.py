"""The SQLAlchemy plumbing shared by the run ledger and the context store.

`DatabaseBase` opens an engine from a URL (SQLite or PostgreSQL), configures SQLite
connections (write-ahead logging, ``synchronous=NORMAL``, foreign keys, a busy timeout, and
``BEGIN IMMEDIATE`` for writes so that writers queue instead of failing), and gives its
subclasses short read and write transactions whose failures surface as `StoreError` naming
the operation and the URL (password masked).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Self

from sqlalchemy import (
    Column,
    DateTime,
    Dialect,
    Integer,
    MetaData,
    Table,
    create_engine,
    event,
    func,
    inspect,
    select,
)
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, ResourceClosedError, SQLAlchemyError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.types import TypeDecorator
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import StoreError

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DatabaseBase",
    "DriverStatement",
    "JSONText",
    "Migration",
    "version_table",
]

BUSY_TIMEOUT_MS = 10_000
"""How long an SQLite connection waits for another writer's lock before failing."""

_WRITE = "clearance_ledger_write"
"""Execution option marking the write engine's connections (SQLite: ``BEGIN IMMEDIATE``)."""


class _UTCDateTime(TypeDecorator[datetime]):
    """Stores aware datetimes as UTC and reads them back aware (SQLite drops the zone).

    A naive datetime is taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    # On SQLite each conversion is one call: the same text and values as the two methods
    # above chained with SQLAlchemy's ``DATETIME`` processors (``YYYY-MM-DD HH:MM:SS.ffffff``,
    # naive UTC), without the chain. Every other database goes through the methods above.

    def bind_processor(self, dialect: Dialect) -> Callable[[datetime | None], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)
        return _sqlite_time_text

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], datetime | None] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)
        return _sqlite_time_value


def _sqlite_time_text(value: datetime | None) -> str | None:
    """An aware (or naive UTC) datetime as SQLite ``DATETIME`` text, naive UTC."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(" ", "microseconds")


def _sqlite_time_value(value: str | None) -> datetime | None:
    """SQLite ``DATETIME`` text as an aware UTC datetime."""
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


class JSONText(str):
    """Text that is already JSON: a ``JSON`` column stores it as it is, unserialized.

    For a value serialized once for a digest and stored too (the ledger's call records);
    reading the column parses it like any other JSON value.
    """

    __slots__ = ()


def _serialize_json(value: Any) -> str:
    """The engines' JSON serializer: `JSONText` as it is, anything else with `json.dumps`."""
    if type(value) is JSONText:
        return value
    return json.dumps(value)


class DriverStatement:
    """A Core statement compiled once by SQLAlchemy, for running on a DB-API connection.

    On an SQLite file a short statement costs SQLite a few microseconds, and SQLAlchemy's
    execution machinery (cache-key lookup, execution context, parameter construction, result
    object) several times that. For the hottest statements of a store, `DatabaseBase` runs
    this form on the thread's held connection (`HeldConnections`) instead: the SQL text is
    SQLAlchemy's own compilation for the engine's dialect, byte for byte what its execution
    would send, and each parameter goes through the type's own bind processor. Only the
    execution machinery is skipped. Positional paramstyles only (``qmark`` for ``sqlite3``).

    Args:
        statement: The statement, with named bound parameters.
        dialect: The engine's dialect.

    Raises:
        ValueError: The statement is not a SQL statement (DDL, say), the dialect's
            paramstyle is not positional, or the statement has parameters rendered at
            execution time (``expanding`` or literal-execute ones).
    """

    __slots__ = ("_binds", "sql")

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        if not isinstance(compiled, SQLCompiler):
            raise ValueError(f"not a SQL statement: {type(statement).__name__}")
        names = compiled.positiontup
        if names is None:
            raise ValueError(f"paramstyle {dialect.paramstyle!r} is not positional")
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("the statement has parameters rendered at execution time")
        self.sql: str = compiled.string
        """The SQL text sent to the database."""
        binds = compiled.binds
        self._binds = tuple(
            (
                name,
                binds[name].value,
                binds[name].type.dialect_impl(dialect).bind_processor(dialect),
            )
            for name in names
        )

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for ``values``, each through its bind processor.

        Args:
            values: Values by bound name; a name missing takes the value the statement
                bound, as SQLAlchemy's execution does.

        Returns:
            One value per ``?`` of `sql`, in order.
        """
        out = []
        for name, default, process in self._binds:
            value = values.get(name, default)
            out.append(value if process is None else process(value))
        return tuple(out)


Migration = Callable[[Connection], None]
"""One schema change, run inside the migration transaction."""


def version_table(name: str) -> Table:
    """A table recording which migrations a database has had (``version``, ``applied_at``)."""
    return Table(
        name,
        MetaData(),
        Column("version", Integer, primary_key=True, autoincrement=False),
        Column("applied_at", _UTCDateTime, nullable=False),
    )


def _lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name`` (PostgreSQL migrations)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def _mask(url: str) -> str:
    """``url`` with any password replaced by ``***``, even when it does not parse."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (SQLAlchemyError, ValueError, TypeError):
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def _cause(exc: BaseException) -> str:
    """A one-line description of a database failure (never the SQL or its parameters)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else 'no details'}"


def _ensure_sqlite_folder(url: URL) -> None:
    """Create the parent folder of an SQLite database file."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    Path(database).parent.mkdir(parents=True, exist_ok=True)


def _is_locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (or "busy") error."""
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


def _enable_wal(cursor: Any) -> None:
    """``PRAGMA journal_mode = WAL``, retried while another connection holds the database.

    Switching a database to write-ahead logging takes an exclusive lock, and when several
    connections open a new database at the same moment SQLite may answer "database is locked"
    at once instead of waiting through the busy timeout. Retried with exponential backoff
    (1 ms doubling to 50 ms, tenacity) for at most `BUSY_TIMEOUT_MS`; then the error stands.
    """
    for attempt in Retrying(
        retry=retry_if_exception(_is_locked),
        stop=stop_after_delay(BUSY_TIMEOUT_MS / 1000),
        wait=wait_exponential(multiplier=0.001, max=0.05),
        reraise=True,
    ):
        with attempt:
            cursor.execute("PRAGMA journal_mode = WAL")


def _read_only_sqlite(path: str) -> Callable[[], sqlite3.Connection]:
    """A connection factory opening the SQLite file ``path`` read-only (``mode=ro``).

    A database in write-ahead-log mode needs its ``-shm`` file, which SQLite cannot create
    in a read-only folder; the file is then opened ``immutable=1`` (no locks, no log: what
    is in the file is what is read), which is exact for a ledger nobody writes to anymore.
    """
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            conn.close()
            if not os.path.isfile(path):
                raise
            conn = sqlite3.connect(uri + "&immutable=1", uri=True, check_same_thread=False)
        return conn

    return connect


def _configure_sqlite(engine: Engine, *, begin_event: bool = True, read_only: bool = False) -> None:
    """Set the pragmas of every new SQLite connection and take over ``BEGIN``.

    The ``sqlite3`` module's legacy transaction handling neither begins a transaction
    before DDL nor offers ``BEGIN IMMEDIATE``; the recipe from SQLAlchemy's SQLite
    documentation disables it and emits ``BEGIN`` from the ``begin`` event instead. Without
    ``begin_event`` nothing is sent when SQLAlchemy begins (see `HeldConnections`).
    ``read_only`` leaves out the pragmas that write (``journal_mode``, ``synchronous``).
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not read_only:  # switching to write-ahead logging writes the file
                _enable_wal(cursor)
                cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    if not begin_event:
        return

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def is_sqlite_file(url: URL) -> bool:
    """Whether ``url`` names an SQLite database file (not ``:memory:``, not a URI)."""
    database = url.database
    return (
        url.get_backend_name() == "sqlite"
        and bool(database)
        and database != ":memory:"
        and not str(database).startswith("file:")
        and not url.query.get("uri")
    )


_INHERITED: list[Any] = []
"""Connections and pools a forked child inherited: kept referenced and never closed there,
since closing a copy of an SQLite connection in the child can disturb the parent's."""

_holders: weakref.WeakSet[HeldConnections] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for holder in list(_holders):
        holder._abandon()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class HeldConnections:
    """One SQLAlchemy connection per thread, checked out once and kept between operations.

    Checking a connection out of the pool and back in for every operation costs more than
    running a short statement on SQLite, so each thread keeps its own. The engine's
    connections send no ``BEGIN`` when SQLAlchemy begins: a statement alone runs in
    autocommit (one ``SELECT`` is one consistent snapshot, seeing every write committed
    before it), and a write transaction starts with `begin_immediate` and ends with the
    connection's ``commit``.

    The connections of threads that have ended go back to the pool when another thread
    takes its first one, and all of them on `close`. In a child made by ``os.fork`` the
    parent's connections and pool are abandoned, neither used nor closed, and the child
    opens its own.

    Args:
        engine: An SQLite file engine configured without the ``begin`` event, whose pool
            does not limit its overflow (each thread holds one connection).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._local = threading.local()
        self._lock = threading.Lock()
        self._held: list[tuple[threading.Thread, Connection]] = []
        self._closed = False
        _holders.add(self)

    def connection(self) -> Connection:
        """This thread's connection (checked out on its first use)."""
        conn: Connection | None = getattr(self._local, "conn", None)
        return conn if conn is not None else self._hold()

    def driver_connection(self) -> sqlite3.Connection:
        """The ``sqlite3`` connection under this thread's `connection`."""
        dbapi: sqlite3.Connection | None = getattr(self._local, "dbapi", None)
        if dbapi is None:
            dbapi = self.connection().connection.dbapi_connection  # type: ignore[assignment]
            assert dbapi is not None
            self._local.dbapi = dbapi
        return dbapi

    def _hold(self) -> Connection:
        with self._lock:
            if self._closed:
                raise ResourceClosedError("the connections were closed")
            ended = [(t, c) for t, c in self._held if not t.is_alive()]
            self._held = [(t, c) for t, c in self._held if t.is_alive()]
            conn = self._engine.connect()
            self._held.append((threading.current_thread(), conn))
        self._local.conn = conn
        for _, old in ended:
            _close_quietly(old)
        return conn

    @staticmethod
    def begin_immediate(conn: Connection) -> None:
        """Start a write transaction on ``conn``, taking SQLite's write lock now.

        The statement goes to the DB-API connection directly, as the dialect's own commit
        and rollback do: through SQLAlchemy's statement execution it would cost more than a
        short write. A failure is wrapped the way SQLAlchemy wraps its own.

        Raises:
            SQLAlchemyError: The lock was not had within the busy timeout, or the database
                failed.
        """
        dialect = conn.dialect
        cursor = conn.connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except dialect.loaded_dbapi.Error as exc:
            raise DBAPIError.instance(
                "BEGIN IMMEDIATE", (), exc, dialect.loaded_dbapi.Error, dialect=dialect
            ) from exc
        finally:
            cursor.close()

    def release(self) -> None:
        """Give up this thread's connection (after a failure), rolling back what it holds."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = self._local.dbapi = None
        with self._lock:
            self._held = [(t, c) for t, c in self._held if c is not conn]
        _close_quietly(conn)

    def close(self) -> None:
        """Return every thread's connection to the pool.

        A thread still in an operation on its connection may see that operation fail.
        """
        with self._lock:
            held, self._held = self._held, []
            self._closed = True
        self._local = threading.local()
        for _, conn in held:
            _close_quietly(conn)

    def _abandon(self) -> None:
        """In a forked child: forget the parent's connections and pool without closing them."""
        _INHERITED.extend(c for _, c in self._held)
        _INHERITED.append(self._engine.pool)
        self._held = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._engine.dispose(close=False)


def _close_quietly(conn: Connection) -> None:
    """Close ``conn`` (rolling back any transaction), ignoring a failure to do so."""
    with suppress(SQLAlchemyError):
        conn.close()


class DatabaseBase:
    """An SQLAlchemy engine with the lifecycle and transactions the stores share.

    Subclasses set ``_LABEL`` (``"run ledger"``, ``"store"``), used in error messages.
    Usable as a context manager; `close` releases the connections.

    Args:
        url: SQLAlchemy URL: ``sqlite:///path`` (relative), ``sqlite:////abs/path``, or
            ``postgresql+psycopg://user@host:port/db``. The parent folder of an SQLite file
            is created.
        clock: Source of timestamps (aware UTC).
        read_only: Open an SQLite file read-only (``mode=ro``; see `_read_only_sqlite`),
            creating nothing and writing nothing, so a file or folder without write
            permission can be read; writes then fail with `StoreError`.

    Raises:
        StoreError: The URL is malformed or names an unsupported database or a missing
            driver; the message holds the URL (password masked) and the cause.
    """

    _LABEL = "database"
    _HOLD_CONNECTIONS = False
    """Whether each thread holds one connection of an SQLite file (`HeldConnections`)."""

    def __init__(self, url: str, *, clock: Clock = utc_now, read_only: bool = False) -> None:
        self._url = _mask(url)
        self._clock = clock
        self._closed = False
        self._read_only = False
        try:
            parsed = make_url(url)
            self._read_only = read_only and is_sqlite_file(parsed)
            if parsed.get_backend_name() == "sqlite" and not self._read_only:
                _ensure_sqlite_folder(parsed)
            hold = self._HOLD_CONNECTIONS and is_sqlite_file(parsed)
            # A thread holds its connection (see `HeldConnections`): none may wait for one.
            options: dict[str, Any] = {"max_overflow": -1} if hold else {}
            if self._read_only:
                assert parsed.database is not None
                options["creator"] = _read_only_sqlite(parsed.database)
            engine = create_engine(parsed, json_serializer=_serialize_json, **options)
        except (SQLAlchemyError, ImportError, OSError, ValueError) as exc:
            raise StoreError(
                f"cannot open the {self._LABEL} at {self._url}: {_cause(exc)}"
            ) from exc
        self._dialect = engine.dialect.name
        if self._dialect not in ("sqlite", "postgresql"):
            engine.dispose()
            raise StoreError(
                f"cannot open the {self._LABEL} at {self._url}: unsupported database "
                f"{self._dialect!r} (use sqlite or postgresql)"
            )
        if self._dialect == "sqlite":
            _configure_sqlite(engine, begin_event=not hold, read_only=self._read_only)
        self._engine = engine
        self._write_engine = engine.execution_options(**{_WRITE: True})
        self._held = HeldConnections(engine) if hold else None

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
                f"{_cause(exc)}"
            ) from exc

    @contextmanager
    def _writing(self, operation: str) -> Iterator[Connection]:
        """One write transaction; database failures become `StoreError` naming ``operation``.

        On SQLite it takes the write lock up front (``BEGIN IMMEDIATE``).
        """
        if self._closed:
            raise self._closed_error(operation)
        held = self._held
        if held is None:
            try:
                with self._write_engine.begin() as conn:
                    yield conn
            except SQLAlchemyError as exc:
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
        return StoreError(f"cannot {operation} in the {self._LABEL} at {self._url}: {_cause(exc)}")

    def _read_error(self, operation: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"cannot {operation} from the {self._LABEL} at {self._url}: {_cause(exc)}"
        )

    def _schema_version(self, conn: Connection, versions: Table) -> int:
        if not inspect(conn).has_table(versions.name):
            return 0
        return int(conn.execute(select(func.max(versions.c.version))).scalar() or 0)

    def _migrate(self, versions: Table, migrations: Sequence[Migration]) -> None:
        """Apply the migrations the database lacks, in order, in one transaction.

        The schema is versioned the way simonw's ``llm`` does it: ``migrations`` is an ordered
        list of functions (migration ``i``, 0-based, brings a database to version ``i + 1``)
        and the ``versions`` table records which of them a database has had.

        On a database opened read-only nothing is applied: one whose schema is not the
        latest is refused.

        Raises:
            StoreError: The database's schema is newer than ``migrations`` know, or (opened
                read-only) not the latest, or the database failed.
        """
        latest = len(migrations)
        with self._reading("read the schema version") as conn:
            current = self._schema_version(conn, versions)
        if current == latest:
            return
        if self._read_only:
            raise StoreError(
                f"the {self._LABEL} at {self._url}, opened read-only, has schema version "
                f"{current}, not {latest}: open it once with write access to upgrade it"
                if current
                else f"the {self._LABEL} at {self._url}, opened read-only, has no tables"
            )
        with self._writing("migrate the schema") as conn:
            if self._dialect == "postgresql":  # SQLite's BEGIN IMMEDIATE already serializes
                conn.execute(select(func.pg_advisory_xact_lock(_lock_key(versions.name))))
            current = self._schema_version(conn, versions)  # again, under the write lock
            if current > latest:
                raise StoreError(
                    f"the {self._LABEL} at {self._url} has schema version {current}, newer than "
                    f"this version of Clearance supports ({latest}); upgrade Clearance"
                )
            versions.create(conn, checkfirst=True)
            for version in range(current + 1, latest + 1):
                migrations[version - 1](conn)
                # Real time, not the injected clock: keeps a test clock's ticks for the data.
                conn.execute(versions.insert().values(version=version, applied_at=utc_now()))

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
