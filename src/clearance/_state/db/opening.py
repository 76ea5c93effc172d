"""Opening an engine: a URL checked, then configured as the stores use it.

`open_engine` refuses in one line what would otherwise fail later or silently (an SQLite
file that is a folder or whose path holds a NUL, a query argument SQLite would ignore, an
unsupported database), creates the folder of a new SQLite file when asked, and gives every
PostgreSQL connection a deadline to connect (`CONNECT_TIMEOUT_S`) and to answer each
statement (`clearance._state.db.deadlines`). A pooled PostgreSQL connection is checked
before each use (`ping_before_use`), so one the server ended while it was idle is replaced
instead of failing the next write.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError

from clearance._core.errors import StoreError
from clearance._core.masking import password_holds_at
from clearance._state.db.deadlines import (
    answer_deadline_s,
    answering_connect,
    is_unanswered,
    query_timeout_s,
)
from clearance._state.db.failures import failure_cause, mask_url
from clearance._state.db.sqlite import (
    PYSQLITE_QUERY_ARGUMENTS,
    configure_sqlite,
    ensure_sqlite_folder,
    read_only_sqlite,
    sqlite_file_path,
    uri_flag,
)
from clearance._state.db.types import deserialize_json, serialize_json

__all__ = [
    "CONNECT_TIMEOUT_S",
    "MAX_CONNECT_TIMEOUT_S",
    "configure_postgresql",
    "is_sqlite_file_url",
    "open_engine",
    "ping_before_use",
    "postgresql_connect_args",
    "supported_dialect",
]

CONNECT_TIMEOUT_S = 5
"""Seconds a PostgreSQL connection may take to be established (libpq's ``connect_timeout``)
before it fails, unless the URL sets its own (``?connect_timeout=30``): a host that drops
packets, or a server that accepts and never answers, is an error instead of a hang."""

MAX_CONNECT_TIMEOUT_S = 600
"""Longest ``connect_timeout`` a PostgreSQL URL may set, in seconds."""


def is_sqlite_file_url(url: str) -> bool:
    try:
        return sqlite_file_path(url) is not None
    except ValueError:
        return False  # `open_engine` names what is wrong


def _check_sqlite_path(path: str, label: str, masked: str, *, must_exist: bool) -> None:
    """Refuse an SQLite path that is not a database file, or is missing when it must exist.

    A folder, a FIFO, socket or device, a loop of symbolic links, or (``must_exist``) a path
    where nothing is.

    Raises:
        StoreError: One line naming the URL (SQLite itself says only "unable to open
            database file", and blocks for ever opening a FIFO read-only).
    """
    if "\x00" in path:
        raise StoreError(f"cannot open the {label} at {masked}: its path holds a NUL character")
    if os.path.isdir(path) or path.endswith(("/", os.sep)):
        raise StoreError(f"cannot open the {label} at {masked}: it is a folder, not a file")
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(
                f"cannot open the {label} at {masked}: its path is a loop of symbolic links"
            ) from None
    else:
        if not stat.S_ISREG(mode):
            raise StoreError(
                f"cannot open the {label} at {masked}: it is not a regular file "
                "(a FIFO, socket or device)"
            )
    if must_exist and not os.path.exists(path):
        raise StoreError(f"no {label} at {masked}: the file does not exist")


def _check_sqlite_query(parsed: URL) -> None:
    """Refuse query arguments SQLAlchemy would ignore (with a warning) on an SQLite URL.

    Without ``uri=true`` an SQLite URI argument such as ``mode=ro`` is dropped: the file
    would be opened, and written, as if it were not there.

    Raises:
        ValueError: Such an argument, named.
    """
    if uri_flag(parsed):
        return
    ignored = sorted(set(parsed.query) - PYSQLITE_QUERY_ARGUMENTS)
    if ignored:
        raise ValueError(
            f"SQLite takes no query argument {', '.join(map(repr, ignored))} without "
            "uri=true (an SQLite URI: sqlite:///file:path?mode=ro&uri=true)"
        )


def postgresql_connect_args(url: URL) -> dict[str, Any]:
    """The arguments of every new PostgreSQL connection: a deadline to connect.

    ``connect_timeout`` `CONNECT_TIMEOUT_S`, unless the URL's query sets its own, which must
    be whole seconds from 1 to `MAX_CONNECT_TIMEOUT_S` (libpq takes 0 or less as no
    deadline at all).

    Raises:
        ValueError: The URL's ``connect_timeout`` is not such a number.
    """
    given = url.query.get("connect_timeout")
    if given is None:
        return {"connect_timeout": CONNECT_TIMEOUT_S}
    text = given if isinstance(given, str) else ",".join(given)
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_CONNECT_TIMEOUT_S):
        raise ValueError(
            f"connect_timeout must be whole seconds from 1 to {MAX_CONNECT_TIMEOUT_S}, got {text!r}"
        )
    return {}


def configure_postgresql(
    engine: Engine,
    *,
    lock_timeout_ms: int | None = None,
    read_only: bool = False,
    statement_timeout_ms: int | None = None,
) -> None:
    """Set up every new PostgreSQL session of ``engine`` with ``SET`` statements.

    ``lock_timeout`` ``lock_timeout_ms`` (unless ``None``): a statement waiting longer for
    another session's lock fails; ``statement_timeout`` ``statement_timeout_ms`` (unless
    ``None``): the server cancels a statement running longer; and, when ``read_only``,
    transactions that refuse to write (``SET SESSION CHARACTERISTICS AS TRANSACTION READ
    ONLY``). Statements rather than the connection's ``options``, which a pooler such as
    PgBouncer refuses. Nothing is set when all are off.
    """
    statements = []
    if statement_timeout_ms is not None:
        statements.append(f"SET statement_timeout = {int(statement_timeout_ms)}")
    if lock_timeout_ms is not None:
        statements.append(f"SET lock_timeout = {int(lock_timeout_ms)}")
    if read_only:
        statements.append("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    if not statements:
        return

    @event.listens_for(engine, "connect", insert=True)
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True  # SQLAlchemy's recipe: no transaction left open
        try:
            cursor = dbapi_connection.cursor()
            try:
                for statement in statements:
                    cursor.execute(statement)
            finally:
                cursor.close()
        finally:
            dbapi_connection.autocommit = autocommit


def ping_before_use(engine: Engine) -> None:
    """Make a ping that found no answer in time fail the checkout, not reconnect.

    The engine's pool pings each pooled connection before handing it out
    (``pool_pre_ping``): one the server ended while it sat idle (a backend terminated by an
    administrator or an idle timeout, a server restarted, a pooler's connection closed) is
    replaced by a new one, with nothing sent on the old one, so the next write does not fail
    for it. A ping that outlasted the answer deadline (`clearance._state.db.deadlines`) is
    not taken as such a disconnect: the server is there and does not answer, and a new
    connection would only wait once more, ``connect_timeout`` long.
    """

    @event.listens_for(engine, "handle_error")
    def _on_error(context: Any) -> None:
        if context.is_pre_ping and is_unanswered(context.original_exception):
            context.is_disconnect = False


def supported_dialect(engine: Engine, label: str, masked: str) -> str:
    """The dialect name of ``engine``, if SQLite or PostgreSQL.

    Raises:
        StoreError: Another database.
    """
    dialect = engine.dialect.name
    if dialect not in ("sqlite", "postgresql"):
        raise StoreError(
            f"cannot open the {label} at {masked}: unsupported database {dialect!r} "
            "(use sqlite or postgresql)"
        )
    return dialect


def open_engine(
    url: str,
    *,
    label: str = "database",
    hold: bool = False,
    read_only: bool = False,
    page_size: int | None = None,
    lock_timeout_ms: int | None = None,
    create: bool = True,
) -> Engine:
    """An engine for ``url`` configured as the stores use it (see `clearance._state.db.sqlite`).

    The parent folder of a writable SQLite file is created, unless ``create`` is false. A
    PostgreSQL connection that is not established within `CONNECT_TIMEOUT_S` fails (see
    `postgresql_connect_args`), and so does a statement the server has not answered
    within the URL's ``query_timeout`` (`clearance._state.db.deadlines`).

    Args:
        url: SQLAlchemy URL (``sqlite:///path``, ``postgresql+psycopg://...``).
        label: What is opened (``"run ledger"``...), for error messages.
        hold: Each thread will hold one connection of an SQLite file (`HeldConnections`):
            the pool does not limit its overflow and no ``BEGIN`` is sent by SQLAlchemy.
        read_only: Open an SQLite file read-only (`read_only_sqlite`); on PostgreSQL,
            every session's transactions are read-only (`configure_postgresql`).
        page_size: The page size of an SQLite file created (bytes); ``None``: SQLite's.
        lock_timeout_ms: On PostgreSQL, each connection's ``lock_timeout`` (ms): a statement
            waiting longer for another session's lock fails. ``None``: the server's.
        create: Create an SQLite file (and its folder) that does not exist; ``False``: refuse
            it, as ``read_only`` does.

    Raises:
        StoreError: The URL is malformed or names an unsupported database or a missing
            driver, or an SQLite file that is a folder or whose path holds a NUL, or
            (``read_only`` or not ``create``) one that does not exist, or it gives an
            SQLite query argument that would be ignored (``mode=ro`` without
            ``uri=true``), or its password holds an ``@`` not written ``%40``; the message
            holds the URL (password masked) and the cause.
    """
    masked = mask_url(url)
    if password_holds_at(url):  # the driver would send the rest to a name server as a host
        raise StoreError(
            f"cannot open the {label} at {masked}: its password holds '@': write it as %40"
        )
    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise StoreError(
                f"cannot open the {label} at {masked}: unsupported database {backend!r} "
                "(use sqlite or postgresql)"
            )
        options: dict[str, Any] = {}
        if backend == "sqlite":
            _check_sqlite_query(parsed)
            path = sqlite_file_path(parsed)
            if path is not None:
                _check_sqlite_path(path, label, masked, must_exist=read_only or not create)
                if create and not read_only:
                    ensure_sqlite_folder(parsed)
            if read_only:
                if path is None:
                    raise StoreError(
                        f"cannot open the {label} at {masked} read-only: it is an in-memory "
                        "database, which holds nothing yet"
                    )
                options["creator"] = read_only_sqlite(path)
        else:
            options["connect_args"] = postgresql_connect_args(parsed)
            options["pool_pre_ping"] = True
            query_timeout = query_timeout_s(parsed)
            parsed = parsed.difference_update_query(["query_timeout"])  # not libpq's
        # A thread holds its connection (see `HeldConnections`): none may wait for one.
        if hold:
            options["max_overflow"] = -1
        engine = create_engine(
            parsed, json_serializer=serialize_json, json_deserializer=deserialize_json, **options
        )
    except (SQLAlchemyError, ImportError, OSError, ValueError) as exc:
        raise StoreError(f"cannot open the {label} at {masked}: {failure_cause(exc)}") from exc
    try:
        dialect = supported_dialect(engine, label, masked)
    except StoreError:
        engine.dispose()
        raise
    if dialect == "sqlite":
        configure_sqlite(engine, begin_event=not hold, read_only=read_only, page_size=page_size)
    else:
        if parsed.get_driver_name() == "psycopg":
            event.listen(engine, "do_connect", answering_connect(answer_deadline_s(query_timeout)))
        ping_before_use(engine)
        configure_postgresql(
            engine,
            lock_timeout_ms=lock_timeout_ms,
            read_only=read_only,
            statement_timeout_ms=query_timeout * 1000,
        )
    return engine
