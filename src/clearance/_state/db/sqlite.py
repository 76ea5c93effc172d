"""SQLite specifics: connection pragmas, write-ahead logging, ``BEGIN IMMEDIATE``, read-only files.

Every SQLite connection of a store uses write-ahead logging (readers never block the
writer), ``synchronous=NORMAL`` (a commit survives a crash of the process; the last commits
may be lost on power failure), enforced foreign keys and a busy timeout; writes take the
write lock up front (``BEGIN IMMEDIATE``) so that writers queue instead of failing.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

__all__ = [
    "BUSY_TIMEOUT_MS",
    "PYSQLITE_QUERY_ARGUMENTS",
    "UNICODE_LOWER",
    "WAL_SIZE_LIMIT_BYTES",
    "WRITE_OPTION",
    "configure_sqlite",
    "enable_wal",
    "ensure_sqlite_folder",
    "is_sqlite_file",
    "lock_wait_failed",
    "read_only_sqlite",
    "register_unicode_lower",
    "sqlite_file_path",
    "uri_flag",
]

BUSY_TIMEOUT_MS = 10_000
"""How long an SQLite connection waits for another writer's lock before failing."""

WAL_SIZE_LIMIT_BYTES = 32 << 20
"""Size the write-ahead log is cut back to once a checkpoint has emptied it (32 MiB): a
reader that held a snapshot (``clearance serve``, a long ``verify``) lets the log grow while
it holds, and the file would otherwise keep that size on disk for as long as it is open."""

WRITE_OPTION = "clearance_ledger_write"
"""Execution option marking the write engine's connections (SQLite: ``BEGIN IMMEDIATE``)."""


def _bind_none_directly() -> None:
    """Have ``sqlite3`` bind ``None`` as ``NULL`` without searching for an adapter.

    ``sqlite3`` binds an exact ``str``, ``int``, ``float`` or ``bytearray`` as it is, and looks
    for an adapter for any other value, ``None`` included: with none registered, CPython 3.11
    raises and clears two ``AttributeError``s (``__adapt__``, ``__conform__``) per value before
    binding it unchanged, which costs more than binding a short row. A registered adapter is
    found first: this one (``dict.get`` of an empty dict, a C function) gives ``None`` back, so
    ``NULL`` is bound as before. An adapter registered for ``None`` already is kept.
    """
    if (type(None), sqlite3.PrepareProtocol) not in sqlite3.adapters:
        as_null: Callable[[None], None] = cast("Callable[[None], None]", {}.get)
        sqlite3.register_adapter(type(None), as_null)


_bind_none_directly()


PYSQLITE_QUERY_ARGUMENTS = frozenset(
    {"uri", "timeout", "isolation_level", "detect_types", "check_same_thread", "cached_statements"}
)
"""The query arguments of an SQLite URL that SQLAlchemy passes to ``sqlite3.connect``; with
``uri=true`` the others go into the SQLite URI, without it they would be ignored."""


def uri_flag(url: URL) -> bool:
    """Whether ``uri`` is true in the URL's query (SQLAlchemy's reading of it).

    Raises:
        ValueError: ``uri`` is not a boolean (``true``, ``false``, ``1``, ``0``...).
    """
    from sqlalchemy.util import asbool

    value = url.query.get("uri")
    if value is None:
        return False
    try:
        if isinstance(value, str):
            return bool(asbool(value))
    except ValueError:
        pass
    raise ValueError(f"uri must be true or false, got {value!r}")


def sqlite_file_path(url: str | URL) -> str | None:
    """The path of the SQLite database file that ``url`` names, or ``None``.

    ``None`` for a URL that does not parse, is not SQLite, or names an in-memory database
    (``sqlite://``, ``sqlite:///:memory:``, or an SQLite URI such as ``file::memory:`` or
    one with ``mode=memory``). With ``uri=true``, a database starting with ``file:`` is an
    SQLite URI (``file:path``, ``file:///abs/path``, https://www.sqlite.org/uri.html) whose
    percent-decoded path is returned; any other database, with or without ``uri``, is the
    file's path as written (relative to the working folder).

    Raises:
        ValueError: ``uri`` is not a boolean, or a URI names a host other than
            ``localhost``.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if isinstance(url, str):
        try:
            url = make_url(url)
        except (ArgumentError, ValueError):
            return None
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if not (database.startswith("file:") and uri_flag(url)):
        return database
    parts = urllib.parse.urlsplit(database)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"an SQLite URI names no host but localhost, got {parts.netloc!r}")
    given = url.query.get("mode", ())
    modes = [
        *urllib.parse.parse_qs(parts.query).get("mode", []),
        *((given,) if isinstance(given, str) else given),
    ]
    path = urllib.parse.unquote(parts.path)
    if "memory" in modes or path in ("", ":memory:"):
        return None
    return path


def is_sqlite_file(url: URL) -> bool:
    """Whether ``url`` names an SQLite database file (not an in-memory database).

    Raises:
        ValueError: As `sqlite_file_path`.
    """
    return sqlite_file_path(url) is not None


def ensure_sqlite_folder(url: URL) -> None:
    """Create the parent folder of an SQLite database file."""
    path = sqlite_file_path(url)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)


UNICODE_LOWER = "clearance_lower"
"""The SQL name of `register_unicode_lower`'s function: case folded for every letter, since
SQLite's own ``lower`` folds only ASCII letters (``É`` stays ``É``) where PostgreSQL's folds
them all."""


def _unicode_lower(value: str | bytes | int | float | None) -> str | bytes | int | float | None:
    return value.casefold() if isinstance(value, str) else value


def register_unicode_lower(dbapi_connection: sqlite3.Connection) -> None:
    """Give an SQLite connection `UNICODE_LOWER`: Python's ``str.casefold`` (``NULL`` stays).

    ``casefold`` folds each letter alone (``str.lower`` lowers a ``Σ`` by the letters around
    it), so a text that holds another still holds it folded: a search finds it.
    """
    dbapi_connection.create_function(UNICODE_LOWER, 1, _unicode_lower, deterministic=True)


def _is_locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (or "busy") error."""
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


def lock_wait_failed(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is SQLite's ``SQLITE_BUSY``.

    Such an error says another connection held the database's lock for the whole busy
    timeout: a property of the database, not of the statement that met it, so trying other
    statements at once would each wait that long again.
    """
    seen: BaseException | None = exc
    for _ in range(8):  # a short chain of causes
        if seen is None:
            return False
        if isinstance(seen, sqlite3.OperationalError):
            code = getattr(seen, "sqlite_errorcode", None)
            return code & 0xFF == sqlite3.SQLITE_BUSY if isinstance(code, int) else False
        orig = getattr(seen, "orig", None)
        seen = orig if isinstance(orig, BaseException) else seen.__cause__
    return False


def enable_wal(cursor: Any) -> None:
    """``PRAGMA journal_mode = WAL``, retried while another connection holds the database.

    Switching a database to write-ahead logging takes an exclusive lock, and when several
    connections open a new database at the same moment SQLite may answer "database is locked"
    at once instead of waiting through the busy timeout. Retried with exponential backoff
    (1 ms doubling to 50 ms, tenacity) for at most `BUSY_TIMEOUT_MS`; then the error stands.
    """
    try:  # the usual case, without building the retrying loop (most of the time it takes)
        cursor.execute("PRAGMA journal_mode = WAL")
        return
    except sqlite3.OperationalError as exc:
        if not _is_locked(exc):
            raise
    for attempt in Retrying(
        retry=retry_if_exception(_is_locked),
        stop=stop_after_delay(BUSY_TIMEOUT_MS / 1000),
        wait=wait_exponential(multiplier=0.001, max=0.05),
        reraise=True,
    ):
        with attempt:
            cursor.execute("PRAGMA journal_mode = WAL")


def read_only_sqlite(path: str) -> Callable[[], sqlite3.Connection]:
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


def configure_sqlite(
    engine: Engine,
    *,
    begin_event: bool = True,
    read_only: bool = False,
    page_size: int | None = None,
) -> None:
    """Set the pragmas of every new SQLite connection and take over ``BEGIN``.

    The ``sqlite3`` module's legacy transaction handling neither begins a transaction
    before DDL nor offers ``BEGIN IMMEDIATE``; the recipe from SQLAlchemy's SQLite
    documentation disables it and emits ``BEGIN`` from the ``begin`` event instead. Without
    ``begin_event`` nothing is sent when SQLAlchemy begins (see `HeldConnections`).
    ``read_only`` leaves out the pragmas that write (``journal_mode``, ``synchronous``).
    ``page_size`` (bytes, a power of two from 512 to 65536) is the page size of a database
    file created by the connection; a file that exists keeps its own (SQLite changes it
    only by ``VACUUM``, never in write-ahead-log mode).
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not read_only:  # switching to write-ahead logging writes the file
                if page_size is not None:  # before anything is written: a new file's
                    cursor.execute(f"PRAGMA page_size = {int(page_size)}")
                enable_wal(cursor)
                cursor.execute("PRAGMA synchronous = NORMAL")
                cursor.execute(f"PRAGMA journal_size_limit = {int(WAL_SIZE_LIMIT_BYTES)}")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    if not begin_event:
        return

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
