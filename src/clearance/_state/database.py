"""The SQLAlchemy plumbing shared by the run ledger and the context store.

`DatabaseBase` opens an engine from a URL (SQLite or PostgreSQL), configures SQLite
connections (write-ahead logging, ``synchronous=NORMAL``, foreign keys, a busy timeout, and
``BEGIN IMMEDIATE`` for writes so that writers queue instead of failing), and gives its
subclasses short read and write transactions whose failures surface as `StoreError` naming
the operation and the URL (password masked).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

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
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.types import TypeDecorator

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import StoreError

__all__ = ["BUSY_TIMEOUT_MS", "DatabaseBase", "Migration", "version_table"]

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


def _configure_sqlite(engine: Engine) -> None:
    """Set the pragmas of every new SQLite connection and take over ``BEGIN``.

    The ``sqlite3`` module's legacy transaction handling neither begins a transaction
    before DDL nor offers ``BEGIN IMMEDIATE``; the recipe from SQLAlchemy's SQLite
    documentation disables it and emits ``BEGIN`` from the ``begin`` event instead.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class DatabaseBase:
    """An SQLAlchemy engine with the lifecycle and transactions the stores share.

    Subclasses set ``_LABEL`` (``"run ledger"``, ``"store"``), used in error messages.
    Usable as a context manager; `close` releases the connections.

    Args:
        url: SQLAlchemy URL: ``sqlite:///path`` (relative), ``sqlite:////abs/path``, or
            ``postgresql+psycopg://user@host:port/db``. The parent folder of an SQLite file
            is created.
        clock: Source of timestamps (aware UTC).

    Raises:
        StoreError: The URL is malformed or names an unsupported database or a missing
            driver; the message holds the URL (password masked) and the cause.
    """

    _LABEL = "database"

    def __init__(self, url: str, *, clock: Clock = utc_now) -> None:
        self._url = _mask(url)
        self._clock = clock
        self._closed = False
        try:
            parsed = make_url(url)
            if parsed.get_backend_name() == "sqlite":
                _ensure_sqlite_folder(parsed)
            engine = create_engine(parsed)
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
            _configure_sqlite(engine)
        self._engine = engine
        self._write_engine = engine.execution_options(**{_WRITE: True})

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

    @contextmanager
    def _writing(self, operation: str) -> Iterator[Connection]:
        """One write transaction; database failures become `StoreError` naming ``operation``."""
        if self._closed:
            raise StoreError(f"cannot {operation}: the {self._LABEL} at {self._url} is closed")
        try:
            with self._write_engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot {operation} in the {self._LABEL} at {self._url}: {_cause(exc)}"
            ) from exc

    def _schema_version(self, conn: Connection, versions: Table) -> int:
        if not inspect(conn).has_table(versions.name):
            return 0
        return int(conn.execute(select(func.max(versions.c.version))).scalar() or 0)

    def _migrate(self, versions: Table, migrations: Sequence[Migration]) -> None:
        """Apply the migrations the database lacks, in order, in one transaction.

        The schema is versioned the way simonw's ``llm`` does it: ``migrations`` is an ordered
        list of functions (migration ``i``, 0-based, brings a database to version ``i + 1``)
        and the ``versions`` table records which of them a database has had.

        Raises:
            StoreError: The database's schema is newer than ``migrations`` know, or the
                database failed.
        """
        latest = len(migrations)
        with self._reading("read the schema version") as conn:
            if self._schema_version(conn, versions) == latest:
                return
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
        """One read transaction (a consistent snapshot); failures become `StoreError`."""
        if self._closed:
            raise StoreError(f"cannot {operation}: the {self._LABEL} at {self._url} is closed")
        try:
            with self._engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot {operation} from the {self._LABEL} at {self._url}: {_cause(exc)}"
            ) from exc
