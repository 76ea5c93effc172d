"""`ContextStore`: durable, namespaced key/value knowledge with TTL, shared deliberately.

Entries are keyed by ``(namespace, key)`` and hold a text value, the agent that wrote it,
``created_at``, ``updated_at``, ``expires_at`` (``None``: never expires) and ``version``,
the count of its writes (two writes within one tick of the clock share ``updated_at``, never
a version). Storage is
SQLAlchemy Core on SQLite by default (a file in WAL mode, ``.clearance/store.db``) or
PostgreSQL for scale; both use the same table, indexed on namespace and on expiry.

- Writes are single-statement upserts in the dialect's ``INSERT ... ON CONFLICT DO UPDATE``
  form, never read-then-write, so concurrent writers on one key (threads or processes) never
  fail on the key, the last write wins, and each write's version is one more than the last.
- Expired entries are filtered on read, never deleted by a read; `ContextStore.cleanup`
  removes them and says how many.
- `ContextStore.set_with_extension` and `ContextStore.touch` push expiry forward, so
  knowledge that is used survives and unused knowledge ages out.
- Reads are single ``SELECT`` statements; on an SQLite file they run in autocommit on the
  thread's own connection (see `clearance._state.db.HeldConnections`).
- On an SQLite file `ContextStore.set` and `ContextStore.get`, the hot paths, send
  SQLAlchemy's compiled SQL straight to that connection
  (`clearance._state.db.DriverStatement`): SQLAlchemy's execution would cost several
  times SQLite's own work. The statements and parameters are the same either way.
- All times are timezone-aware UTC from an injectable clock, so tests never sleep.

Agents never get the store itself, only `ContextStore.view` (see `clearance._state.grants`),
which denies every namespace not granted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Select

from clearance._core.clock import Clock
from clearance._core.errors import MalformedRecord, StoreError
from clearance._core.locations import DEFAULT_STORE_URL
from clearance._core.row_limit import check_limit
from clearance._state.db import DatabaseBase, DriverStatement
from clearance._state.db.sqlite import register_unicode_lower
from clearance._state.store.entry import (
    DEFAULT_EXTENSION_TTL_S,
    StoreEntry,
    check_store_entry,
    check_text,
    check_ttl,
    entry_of_row,
    malformed_entry,
)
from clearance._state.store.schema import (
    PRE_VERSION_SCHEMA,
    STORE_SCHEMA,
    prefix_params,
    search_statement,
    statements,
)

if TYPE_CHECKING:
    from clearance._state.grants import StoreGrants, StoreView

__all__ = ["DEFAULT_STORE_URL", "ContextStore"]


class ContextStore(DatabaseBase):
    """Durable namespaced key/value store with TTL (SQLAlchemy Core; SQLite by default).

    Safe to share between threads and processes: each write is one short transaction, and
    on SQLite writers queue on the database lock (``BEGIN IMMEDIATE`` with a busy timeout)
    instead of failing. No operation waits for a lock longer than that timeout (10 s,
    ``lock_timeout`` on PostgreSQL), nor for a PostgreSQL server to answer longer than
    `clearance._state.db.opening.CONNECT_TIMEOUT_S`: it fails with `StoreError`. Each read
    is one ``SELECT``, a consistent snapshot that sees every write committed before it (on
    an SQLite file it runs in autocommit, without ``BEGIN``).
    On an SQLite file each thread keeps one connection for all its operations (a forked
    child opens its own); elsewhere each operation takes one from the pool. Usable as a
    context manager; `close` releases every connection.

    Args:
        url: SQLAlchemy URL: ``sqlite:///path`` (relative), ``sqlite:////abs/path``, or
            ``postgresql+psycopg://user@host:port/db``. The parent folder of an SQLite file is
            created (unless ``create`` is false or ``read_only``).
        clock: Source of every timestamp and of "now" for expiry (aware UTC); ``None``: the
            database's clock (on PostgreSQL the server's, so that every host agrees on
            expiry: `server_time`).
        read_only: Open an SQLite file read-only (``clearance store get`` and ``query``):
            nothing is created or written, writes fail with `StoreError`; implies
            ``create`` false.
        create: Create the store (file, folder, table) when there is none yet. ``False``: a
            missing SQLite file, or a database that holds no store (empty, or another
            program's), is refused and nothing is written to it.

    Raises:
        StoreError: The URL is malformed or names an unsupported database or a missing driver,
            or the database cannot be reached, or (``read_only`` or not ``create``) holds no
            store; the message holds the URL (password masked).
    """

    _LABEL = "store"
    _HOLD_CONNECTIONS = True

    def __init__(
        self,
        url: str = DEFAULT_STORE_URL,
        *,
        clock: Clock | None = None,
        read_only: bool = False,
        create: bool = True,
    ) -> None:
        super().__init__(url, clock=clock, read_only=read_only, create=create)
        # Read-only, a store made before entries had a version is read as it is (each entry
        # at version 1, as the migration would make it): nothing is migrated.
        self._versioned = True
        try:
            if read_only and self._schema_version(STORE_SCHEMA) == PRE_VERSION_SCHEMA:
                self._versioned = False
            else:
                self._migrate(STORE_SCHEMA)
        except BaseException:
            self._engine.dispose()
            raise
        self._sql = statements(self._dialect, self._versioned)
        # On an SQLite file the two hottest statements skip SQLAlchemy's execution
        # machinery (see `DriverStatement`); everywhere else every statement goes through it.
        self._driver_upsert: DriverStatement | None = None
        self._driver_get: DriverStatement | None = None
        if self._held is not None:
            dialect = self._engine.dialect
            self._driver_upsert = DriverStatement(self._sql.upsert, dialect)
            self._driver_get = DriverStatement(self._sql.get_value, dialect)

    # -- helpers --------------------------------------------------------------------------

    def _entry(self, row: Any) -> StoreEntry:
        """The entry of a row (`entry_of_row`: a row edited by hand is `MalformedRecord`)."""
        return entry_of_row(row, f"the store at {self._url}")

    def _malformed(self, row: Any) -> MalformedRecord:
        return malformed_entry(row, f"the store at {self._url}")

    def _upsert(
        self,
        namespace: str,
        key: str,
        value: str,
        agent: str,
        ttl_s: float | None,
        *,
        extend: bool = False,
    ) -> None:
        """Write one entry; it expires ``ttl_s`` after its write time (never if ``None``)."""
        check_store_entry(namespace, key, value, agent, ttl_s)
        now = self._clock()
        params = {
            "namespace": namespace,
            "key": key,
            "value": value,
            "agent": agent,
            "created_at": now,
            "updated_at": now,
            "expires_at": None if ttl_s is None else now + timedelta(seconds=ttl_s),
            "version": 1,  # of a new entry; the upsert counts the writes of one kept
        }
        if extend:
            with self._writing(f"write {namespace}/{key}") as conn:
                conn.execute(self._sql.extend, params)
            return
        if self._driver_upsert is not None:
            self._driver_write(self._driver_upsert, params, f"write {namespace}/{key}")
            return
        with self._writing(f"write {namespace}/{key}") as conn:
            conn.execute(self._sql.upsert, params)

    # -- API ------------------------------------------------------------------------------

    def set(
        self, namespace: str, key: str, value: str, agent: str, ttl_s: float | None = None
    ) -> None:
        """Write ``value`` under ``(namespace, key)``, replacing any earlier value.

        One upsert statement (``INSERT ... ON CONFLICT DO UPDATE``); the last write wins.

        Args:
            namespace: The namespace.
            key: The key; any text, ``%``, ``_`` and backslashes included.
            value: The text to store.
            agent: Who writes it (recorded with the entry).
            ttl_s: Seconds until the entry expires; ``None`` for never.

        Raises:
            ConfigError: ``ttl_s`` is not a number of seconds from `MIN_TTL_S` to `MAX_TTL_S`,
                or ``namespace`` or ``key`` is empty, or ``namespace``, ``key`` or ``agent``
                is longer than its column (`MAX_NAMESPACE_CHARS`, `MAX_KEY_CHARS`,
                `MAX_AGENT_CHARS`), or ``namespace`` and ``key`` together are over
                `MAX_NAME_BYTES` of UTF-8, or ``value`` is over `MAX_VALUE_BYTES`, or an
                argument is not text or holds a NUL character or a lone surrogate.
            StoreError: The database could not be written.
        """
        self._upsert(namespace, key, value, agent, ttl_s)

    def set_with_extension(
        self,
        namespace: str,
        key: str,
        value: str,
        agent: str,
        ttl_s: float = DEFAULT_EXTENSION_TTL_S,
    ) -> None:
        """Write like `set`, and push expiry forward to ``ttl_s`` seconds from now.

        Expiry only moves forward: a live entry that expires later than ``now + ttl_s``
        keeps its later expiry, and a live entry that never expires keeps none. A new (or
        expired) entry expires ``ttl_s`` from now. One upsert statement, like `set`.

        Args:
            namespace: The namespace.
            key: The key.
            value: The text to store.
            agent: Who writes it.
            ttl_s: Seconds from now (default `DEFAULT_EXTENSION_TTL_S`, 90 days).

        Raises:
            ConfigError: ``ttl_s`` is not a number of seconds from `MIN_TTL_S` to `MAX_TTL_S`,
                or ``namespace`` or ``key`` is empty, or ``namespace``, ``key`` or ``agent``
                is longer than its column (`MAX_NAMESPACE_CHARS`, `MAX_KEY_CHARS`,
                `MAX_AGENT_CHARS`), or ``namespace`` and ``key`` together are over
                `MAX_NAME_BYTES` of UTF-8, or ``value`` is over `MAX_VALUE_BYTES`, or an
                argument is not text or holds a NUL character or a lone surrogate.
            StoreError: The database could not be written.
        """
        self._upsert(namespace, key, value, agent, ttl_s, extend=True)

    def touch(self, namespace: str, key: str, ttl_s: float | None = None) -> bool:
        """Extend a live entry's expiry to ``ttl_s`` from now, without rewriting its value.

        Expiry only moves forward; an entry without expiry keeps none. An expired entry is
        not revived.

        Args:
            namespace: The namespace.
            key: The key.
            ttl_s: Seconds from now; ``None`` means `DEFAULT_EXTENSION_TTL_S` (90 days).

        Returns:
            Whether a live entry existed.

        Raises:
            ConfigError: ``ttl_s`` is not a number of seconds from `MIN_TTL_S` to `MAX_TTL_S`,
                or an argument is not text or holds a NUL character or a lone surrogate.
            StoreError: The database could not be written.
        """
        check_ttl(ttl_s)
        check_text(namespace=namespace, key=key)
        now = self._clock()
        params = {
            "ns": namespace,
            "k": key,
            "now": now,
            "new_expiry": now + timedelta(seconds=ttl_s or DEFAULT_EXTENSION_TTL_S),
        }
        with self._writing(f"touch {namespace}/{key}") as conn:
            return bool(conn.execute(self._sql.touch, params).rowcount)

    def get_entry(self, namespace: str, key: str) -> StoreEntry | None:
        """The live entry at ``(namespace, key)``, or ``None`` when absent or expired.

        Raises:
            ConfigError: An argument is not text or holds a NUL character or a lone
                surrogate.
            StoreError: The database could not be read, or a row read holds what the
                store never writes (`MalformedRecord`: edited by hand).
        """
        check_text(namespace=namespace, key=key)
        params = {"ns": namespace, "k": key, "now": self._clock()}
        operation = f"read {namespace}/{key}"
        try:
            with self._reading(operation) as conn:
                row = conn.execute(self._sql.get_entry, params).first()
        except MalformedRecord as exc:
            raise self._unreadable(operation, exc) from None
        return self._entry(row) if row is not None else None

    def get(self, namespace: str, key: str) -> str | None:
        """The value at ``(namespace, key)``, or ``None`` when absent or expired.

        Expired entries are filtered out, not deleted (see `cleanup`).

        Raises:
            ConfigError: An argument is not text or holds a NUL character or a lone
                surrogate.
            StoreError: The database could not be read, or a row read holds what the
                store never writes (`MalformedRecord`: edited by hand).
        """
        check_text(namespace=namespace, key=key)
        params = {"ns": namespace, "k": key, "now": self._clock()}
        value: str | None
        if self._driver_get is not None:
            row = self._driver_first(self._driver_get, params, f"read {namespace}/{key}")
            value = None if row is None else row[0]
        else:
            with self._reading(f"read {namespace}/{key}") as conn:
                value = conn.execute(self._sql.get_value, params).scalar()
        if value is not None and value.__class__ is not str:
            raise self._malformed((namespace, key, value, ""))
        return value

    def get_structured(self, namespace: str, key: str) -> Any:
        """The JSON-decoded value at ``(namespace, key)``, or ``None`` when absent or expired.

        Raises:
            StoreError: The value is not valid JSON (the message names the entry and where
                decoding failed), or the database could not be read.
        """
        value = self.get(namespace, key)
        if value is None:
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise StoreError(
                f"the value of {namespace}/{key} in the store at {self._url} is not valid "
                f"JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from exc
        except RecursionError:
            raise StoreError(
                f"the value of {namespace}/{key} in the store at {self._url} is JSON nested "
                "too deeply to read"
            ) from None

    def query(self, namespace: str, limit: int = 10) -> list[StoreEntry]:
        """Live entries of ``namespace``, most recently updated first (ties by key).

        Args:
            namespace: The namespace.
            limit: Most entries returned (1 to `MAX_ROWS`, 10,000).

        Raises:
            ConfigError: ``limit`` is out of that range, or an argument is not text or holds
                a NUL character or a lone surrogate.
            StoreError: The database could not be read, or a row read holds what the
                store never writes (`MalformedRecord`: edited by hand).
        """
        check_limit(limit)
        check_text(namespace=namespace)
        params = {"ns": namespace, "limit": limit}
        return self._select(self._sql.query, params, f"query {namespace}")

    def query_by_prefix(self, namespace: str, prefix: str, limit: int = 20) -> list[StoreEntry]:
        """Live entries of ``namespace`` whose key starts with ``prefix``, newest first.

        The prefix matches literally and case-sensitively: ``%``, ``_`` and the escape
        character in it are escaped (``LIKE ... ESCAPE``), and the match is confirmed by
        comparing the key's first characters with the prefix.

        Args:
            namespace: The namespace.
            prefix: Literal start of the keys.
            limit: Most entries returned (1 to `MAX_ROWS`, 10,000).

        Raises:
            ConfigError: ``limit`` is out of that range, or an argument is not text or holds
                a NUL character or a lone surrogate.
            StoreError: The database could not be read, or a row read holds what the
                store never writes (`MalformedRecord`: edited by hand).
        """
        check_limit(limit)
        check_text(namespace=namespace, prefix=prefix)
        params = {**prefix_params(namespace, prefix), "limit": limit}
        return self._select(self._sql.by_prefix, params, f"query {namespace} by prefix")

    def count_by_prefix(self, namespace: str, prefix: str = "") -> int:
        """How many live entries `query_by_prefix` could list with no limit (one COUNT).

        Raises:
            ConfigError: An argument is not text or holds a NUL or a lone surrogate.
            StoreError: The database could not be read.
        """
        check_text(namespace=namespace, prefix=prefix)
        params = {**prefix_params(namespace, prefix), "now": self._clock()}
        with self._reading(f"count {namespace}") as conn:
            return int(conn.execute(self._sql.count_by_prefix, params).scalar_one())

    def search(self, patterns: Iterable[str], text: str, limit: int = 10) -> list[StoreEntry]:
        """Live entries whose key or value holds ``text`` (case-insensitive), newest first.

        Case is folded for every letter on every database (``Éclair`` finds ``éclair``), on
        SQLite by a function of Python's, since SQLite's ``lower`` folds only ASCII letters;
        the text is folded by the same function as the keys and values, so an entry that
        holds it is always found.

        Only namespaces matching one of ``patterns`` are searched: a namespace, or a prefix
        followed by ``*`` (as in `StoreGrants`). Agents reach it only through
        `StoreView.search`, which passes their read grants.

        Args:
            patterns: Namespace patterns; none means no entry.
            text: Literal text (``%``, ``_`` and backslashes match themselves).
            limit: Most entries returned (1 to `MAX_ROWS`, 10,000).

        Raises:
            ConfigError: ``limit`` is out of that range, or ``text`` or a pattern is not text
                or holds a NUL character or a lone surrogate.
            StoreError: The database could not be read, or a row read holds what the
                store never writes (`MalformedRecord`: edited by hand).
        """
        check_limit(limit)
        check_text(text=text)
        patterns = sorted(set(patterns))
        for pattern in patterns:
            check_text(pattern=pattern)
        sqlite = self._dialect == "sqlite"
        stmt = search_statement(patterns, text, limit, sqlite=sqlite, versioned=self._versioned)
        if stmt is None:
            return []
        return self._select(stmt, {}, "search", unicode_lower=sqlite)

    def _select(
        self,
        stmt: Select[Any],
        params: dict[str, Any],
        operation: str,
        *,
        unicode_lower: bool = False,
    ) -> list[StoreEntry]:
        params["now"] = self._clock()
        entry = self._entry
        try:
            with self._reading(operation) as conn:
                if unicode_lower:  # on the connection itself: an engine shared with us has none
                    dbapi = conn.connection.dbapi_connection
                    assert dbapi is not None
                    register_unicode_lower(dbapi)  # type: ignore[arg-type]
                rows = conn.execute(stmt, params).all()  # one fetchall, not a fetch per row
        except MalformedRecord as exc:
            raise self._unreadable(operation, exc) from None
        return [entry(row) for row in rows]

    def _unreadable(self, operation: str, exc: MalformedRecord) -> MalformedRecord:
        """``exc`` (a row edited by hand), naming the operation and the store."""
        return MalformedRecord(f"cannot {operation} from the store at {self._url}: {exc}")

    def delete(self, namespace: str, key: str) -> bool:
        """Remove the entry at ``(namespace, key)``, live or expired.

        Returns:
            Whether an entry was removed.

        Raises:
            ConfigError: An argument is not text or holds a NUL character or a lone
                surrogate.
            StoreError: The database could not be written.
        """
        check_text(namespace=namespace, key=key)
        params = {"ns": namespace, "k": key}
        with self._writing(f"delete {namespace}/{key}") as conn:
            return bool(conn.execute(self._sql.delete, params).rowcount)

    def cleanup(self) -> int:
        """Remove every expired entry.

        Returns:
            How many entries were removed.

        Raises:
            StoreError: The database could not be written.
        """
        with self._writing("remove expired entries") as conn:
            return int(conn.execute(self._sql.cleanup, {"now": self._clock()}).rowcount)

    def view(
        self,
        agent: str,
        grants: Mapping[str, str] | StoreGrants,
        *,
        read_extends_ttl_s: float | None = None,
    ) -> StoreView:
        """A view of the store for ``agent`` that allows only what ``grants`` say.

        Args:
            agent: The agent using the view (recorded as the writer of its entries).
            grants: Namespace (or ``prefix*``) to ``"read"``, ``"write"`` or
                ``"read_write"``; see `StoreGrants`.
            read_extends_ttl_s: Reads through the view push expiry forward by this many
                seconds (see `StoreView`); ``None`` leaves expiry alone.

        Raises:
            ConfigError: A grant is malformed.
        """
        from clearance._state.grants import StoreGrants, StoreView

        parsed = grants if isinstance(grants, StoreGrants) else StoreGrants.parse(grants)
        check_ttl(read_extends_ttl_s, "read_extends_ttl_s")
        return StoreView(self, agent=agent, grants=parsed, read_extends_ttl_s=read_extends_ttl_s)
