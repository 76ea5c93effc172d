"""`ContextStore`: durable, namespaced key/value knowledge with TTL, shared deliberately.

Entries are keyed by ``(namespace, key)`` and hold a text value, the agent that wrote it,
``created_at``, ``updated_at`` and ``expires_at`` (``None``: never expires). Storage is
SQLAlchemy Core on SQLite by default (a file in WAL mode, ``.clearance/store.db``) or
PostgreSQL for scale; both use the same table, indexed on namespace and on expiry.

- Writes are single-statement upserts in the dialect's ``INSERT ... ON CONFLICT DO UPDATE``
  form, never read-then-write, so concurrent writers on one key (threads or processes) never
  fail on the key and the last write wins.
- Expired entries are filtered on read, never deleted by a read; `ContextStore.cleanup`
  removes them and says how many.
- `ContextStore.set_with_extension` and `ContextStore.touch` push expiry forward, so
  knowledge that is used survives and unused knowledge ages out.
- Reads are single ``SELECT`` statements; on an SQLite file they run in autocommit on the
  thread's own connection (see `clearance._state.database.HeldConnections`).
- On an SQLite file `ContextStore.set` and `ContextStore.get`, the hot paths, send
  SQLAlchemy's compiled SQL straight to that connection
  (`clearance._state.database.DriverStatement`): SQLAlchemy's execution would cost several
  times SQLite's own work. The statements and parameters are the same either way.
- All times are timezone-aware UTC from an injectable clock, so tests never sleep.

Agents never get the store itself, only `ContextStore.view` (see `clearance._state.grants`),
which denies every namespace not granted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Delete,
    Index,
    Integer,
    MetaData,
    Select,
    String,
    Table,
    Text,
    Update,
    and_,
    bindparam,
    case,
    delete,
    func,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import ConfigError, StoreError
from clearance._state.database import (
    DatabaseBase,
    DriverStatement,
    Migration,
    _UTCDateTime,
    version_table,
)

if TYPE_CHECKING:
    from clearance._state.grants import StoreGrants, StoreView

__all__ = [
    "DEFAULT_EXTENSION_TTL_S",
    "DEFAULT_STORE_URL",
    "ContextStore",
    "StoreEntry",
    "escape_like",
]

DEFAULT_STORE_URL = "sqlite:///.clearance/store.db"
"""Where the store lives unless told otherwise (relative to the working directory)."""

DEFAULT_EXTENSION_TTL_S = 90 * 24 * 3600
"""Expiry pushed forward by `ContextStore.set_with_extension` and `touch`: 90 days, in s."""

LIKE_ESCAPE = "\\"
"""The escape character of prefix patterns (escaped itself when it occurs in a prefix)."""


_metadata = MetaData()
_entries = Table(
    "store_entries",
    _metadata,
    Column("namespace", String(255), primary_key=True),
    Column("key", String(1024), primary_key=True),
    Column("value", Text, nullable=False),
    Column("agent", String(255), nullable=False),
    Column("created_at", _UTCDateTime, nullable=False),
    Column("updated_at", _UTCDateTime, nullable=False),
    Column("expires_at", _UTCDateTime, nullable=True),
    Index("ix_store_entries_namespace", "namespace"),
    Index("ix_store_entries_expires_at", "expires_at"),
)


def _m001_create_entries(conn: Connection) -> None:
    """Version 1: ``store_entries`` (a store made before versioning already has it)."""
    _metadata.create_all(conn, checkfirst=True)


_MIGRATIONS: list[Migration] = [_m001_create_entries]
"""Applied in order when a store opens; a schema change is a new function appended here."""

_versions = version_table("store_schema_version")
"""Which migrations a store's database has had (its own table: a store and a run ledger may
share one database)."""


def escape_like(text: str, escape: str = LIKE_ESCAPE) -> str:
    """Escape ``%``, ``_`` and ``escape`` in ``text`` so a ``LIKE`` pattern matches it literally.

    Args:
        text: A literal prefix.
        escape: The one-character escape used with the pattern's ``ESCAPE`` clause.

    Returns:
        The text with each ``%``, ``_`` and ``escape`` preceded by ``escape``.
    """
    return "".join(escape + ch if ch in ("%", "_", escape) else ch for ch in text)


def _live() -> ColumnElement[bool]:
    """Not expired at the bound ``now``: no expiry, or expiry after it."""
    c = _entries.c
    return or_(c.expires_at.is_(None), c.expires_at > bindparam("now", type_=_UTCDateTime))


def _newest_first(stmt: Select[Any]) -> Select[Any]:
    """Live rows only, most recently updated first (ties by key), at most the bound limit."""
    return (
        stmt.where(_live())
        .order_by(_entries.c.updated_at.desc(), _entries.c.key)
        .limit(bindparam("limit", type_=Integer))
    )


@dataclass(frozen=True, slots=True)
class _Statements:
    """Every statement of the store, built once per dialect with bound parameters.

    Building an SQLAlchemy statement, and computing the cache key by which the engine finds
    its compiled form, cost far more than running it on SQLite; a statement built once keeps
    its cache key, so each call only binds values. Each attribute's note lists the
    parameters it binds (``ns`` and ``k`` select the namespace and key, since an update may
    not bind a column's own name).
    """

    upsert: sqlite.Insert | postgresql.Insert
    """namespace, key, value, agent, created_at, updated_at, expires_at."""
    extend: sqlite.Insert | postgresql.Insert
    """Like ``upsert``, but a live row's expiry never moves earlier and ``None`` stays."""
    get_entry: Select[Any]
    """ns, k, now."""
    get_value: Select[Any]
    """ns, k, now (the value column only)."""
    query: Select[Any]
    """ns, now, limit."""
    by_prefix: Select[Any]
    """ns, pattern (escaped prefix + ``%``), length, prefix, now, limit."""
    touch: Update
    """ns, k, now, new_expiry."""
    delete: Delete
    """ns, k."""
    cleanup: Delete
    """now."""

    @classmethod
    def build(cls, dialect: str) -> _Statements:
        c = _entries.c
        this = (c.namespace == bindparam("ns"), c.key == bindparam("k"))
        insert = sqlite.insert(_entries) if dialect == "sqlite" else postgresql.insert(_entries)
        excluded = insert.excluded
        # A dead (expired) row is replaced as if new: its created_at restarts too. Expired
        # means at or before the time of this write, which is the row's new updated_at.
        dead = and_(c.expires_at.is_not(None), c.expires_at <= excluded.updated_at)
        upsert = insert.on_conflict_do_update(
            index_elements=[c.namespace, c.key],
            set_={
                "value": excluded.value,
                "agent": excluded.agent,
                "updated_at": excluded.updated_at,
                "expires_at": excluded.expires_at,
                "created_at": case((dead, excluded.created_at), else_=c.created_at),
            },
        )
        # Expiry of set_with_extension: a dead row restarts; a live row never loses time and
        # a row that never expires keeps no expiry.
        keep_later = case(
            (dead, excluded.expires_at),
            (c.expires_at.is_(None), null()),
            (c.expires_at > excluded.expires_at, c.expires_at),
            else_=excluded.expires_at,
        )
        extend = insert.on_conflict_do_update(
            index_elements=[c.namespace, c.key],
            set_={
                "value": excluded.value,
                "agent": excluded.agent,
                "updated_at": excluded.updated_at,
                "expires_at": keep_later,
                "created_at": case((dead, excluded.created_at), else_=c.created_at),
            },
        )
        new = bindparam("new_expiry", type_=_UTCDateTime)
        return cls(
            upsert=upsert,
            extend=extend,
            get_entry=select(_entries).where(*this, _live()),
            get_value=select(c.value).where(*this, _live()),
            query=_newest_first(select(_entries).where(c.namespace == bindparam("ns"))),
            by_prefix=_newest_first(
                select(_entries).where(
                    c.namespace == bindparam("ns"),
                    c.key.like(bindparam("pattern", type_=String), escape=LIKE_ESCAPE),
                    func.substr(c.key, 1, bindparam("length", type_=Integer))
                    == bindparam("prefix", type_=String),
                )
            ),
            touch=update(_entries)
            .where(*this, _live())
            .values(expires_at=case((c.expires_at < new, new), else_=c.expires_at)),
            delete=delete(_entries).where(*this),
            cleanup=delete(_entries).where(
                c.expires_at.is_not(None), c.expires_at <= bindparam("now", type_=_UTCDateTime)
            ),
        )


_statements = cache(_Statements.build)
"""The `_Statements` of a dialect (``"sqlite"``, ``"postgresql"``), built on first use."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreEntry:
    """One live entry of the store.

    Attributes:
        namespace: Its namespace.
        key: Its key within the namespace.
        value: The text stored.
        agent: The agent (or operator) that last wrote it.
        created_at: First write (aware UTC).
        updated_at: Last write (aware UTC).
        expires_at: When it stops being visible (aware UTC), ``None`` for never.
    """

    namespace: str
    key: str
    value: str
    agent: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (times in ISO 8601)."""
        return {
            "namespace": self.namespace,
            "key": self.key,
            "value": self.value,
            "agent": self.agent,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
        }


MAX_TTL_S = 100 * 365 * 24 * 3600.0
"""Longest TTL accepted, in seconds (100 years); use ``None`` for an entry that never expires.
A larger or infinite TTL would overflow the expiry timestamp."""


def _check_ttl(ttl_s: float | None, field: str = "ttl_s") -> None:
    if ttl_s is not None and not 0 < ttl_s <= MAX_TTL_S:  # NaN and infinity too
        raise ConfigError(
            f"must be a positive number of seconds up to {MAX_TTL_S:.0f} (100 years; "
            f"none for never), got {ttl_s!r}",
            field=field,
        )


def _check_text(**fields: str) -> None:
    """Refuse text no database driver can encode (lone surrogates), naming the field."""
    for name, value in fields.items():
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigError(
                    f"{value!r} is not valid UTF-8 (it holds a lone surrogate)", field=name
                ) from None


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise ConfigError(f"must be at least 1, got {limit}", field="limit")


class ContextStore(DatabaseBase):
    """Durable namespaced key/value store with TTL (SQLAlchemy Core; SQLite by default).

    Safe to share between threads and processes: each write is one short transaction, and
    on SQLite writers queue on the database lock (``BEGIN IMMEDIATE`` with a busy timeout)
    instead of failing; each read is one ``SELECT``, a consistent snapshot that sees every
    write committed before it (on an SQLite file it runs in autocommit, without ``BEGIN``).
    On an SQLite file each thread keeps one connection for all its operations (a forked
    child opens its own); elsewhere each operation takes one from the pool. Usable as a
    context manager; `close` releases every connection.

    Args:
        url: SQLAlchemy URL: ``sqlite:///path`` (relative), ``sqlite:////abs/path``, or
            ``postgresql+psycopg://user@host:port/db``. The parent folder of an SQLite file is
            created.
        clock: Source of every timestamp and of "now" for expiry (aware UTC).

    Raises:
        StoreError: The URL is malformed or names an unsupported database or a missing driver,
            or the database cannot be reached; the message holds the URL (password masked).
    """

    _LABEL = "store"
    _HOLD_CONNECTIONS = True

    def __init__(self, url: str = DEFAULT_STORE_URL, *, clock: Clock = utc_now) -> None:
        super().__init__(url, clock=clock)
        try:
            self._migrate(_versions, _MIGRATIONS)
        except BaseException:
            self._engine.dispose()
            raise
        self._sql = _statements(self._dialect)
        # On an SQLite file the two hottest statements skip SQLAlchemy's execution
        # machinery (see `DriverStatement`); everywhere else every statement goes through it.
        self._driver_upsert: DriverStatement | None = None
        self._driver_get: DriverStatement | None = None
        if self._held is not None:
            dialect = self._engine.dialect
            self._driver_upsert = DriverStatement(self._sql.upsert, dialect)
            self._driver_get = DriverStatement(self._sql.get_value, dialect)

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def _entry(row: Any) -> StoreEntry:
        namespace, key, value, agent, created_at, updated_at, expires_at = row
        return StoreEntry(
            namespace=namespace,
            key=key,
            value=value,
            agent=agent,
            created_at=created_at,
            updated_at=updated_at,
            expires_at=expires_at,
        )

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
        if not isinstance(value, str):
            raise ConfigError(
                f"a store value must be text, got {type(value).__name__} (encode JSON first)",
                field="value",
            )
        _check_text(namespace=namespace, key=key, value=value, agent=agent)
        now = self._clock()
        params = {
            "namespace": namespace,
            "key": key,
            "value": value,
            "agent": agent,
            "created_at": now,
            "updated_at": now,
            "expires_at": None if ttl_s is None else now + timedelta(seconds=ttl_s),
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
            ConfigError: ``ttl_s`` is not positive and at most `MAX_TTL_S`, or ``value`` is
                not text, or an argument is text that is not valid UTF-8 (a lone surrogate).
            StoreError: The database could not be written.
        """
        _check_ttl(ttl_s)
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
            ConfigError: ``ttl_s`` is not positive and at most `MAX_TTL_S`, or ``value`` is
                not text, or an argument is text that is not valid UTF-8 (a lone surrogate).
            StoreError: The database could not be written.
        """
        _check_ttl(ttl_s)
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
            ConfigError: ``ttl_s`` is not positive and at most `MAX_TTL_S`, or an argument is
                text that is not valid UTF-8 (a lone surrogate).
            StoreError: The database could not be written.
        """
        _check_ttl(ttl_s)
        _check_text(namespace=namespace, key=key)
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
            ConfigError: Text that is not valid UTF-8 (a lone surrogate) in an argument.
            StoreError: The database could not be read.
        """
        _check_text(namespace=namespace, key=key)
        params = {"ns": namespace, "k": key, "now": self._clock()}
        with self._reading(f"read {namespace}/{key}") as conn:
            row = conn.execute(self._sql.get_entry, params).first()
        return self._entry(row) if row is not None else None

    def get(self, namespace: str, key: str) -> str | None:
        """The value at ``(namespace, key)``, or ``None`` when absent or expired.

        Expired entries are filtered out, not deleted (see `cleanup`).

        Raises:
            ConfigError: Text that is not valid UTF-8 (a lone surrogate) in an argument.
            StoreError: The database could not be read.
        """
        _check_text(namespace=namespace, key=key)
        params = {"ns": namespace, "k": key, "now": self._clock()}
        if self._driver_get is not None:
            row = self._driver_first(self._driver_get, params, f"read {namespace}/{key}")
            return None if row is None else row[0]
        with self._reading(f"read {namespace}/{key}") as conn:
            value: str | None = conn.execute(self._sql.get_value, params).scalar()
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

    def query(self, namespace: str, limit: int = 10) -> list[StoreEntry]:
        """Live entries of ``namespace``, most recently updated first (ties by key).

        Args:
            namespace: The namespace.
            limit: Most entries returned (at least 1).

        Raises:
            ConfigError: ``limit`` is below 1, or an argument is text that is not valid
                UTF-8 (a lone surrogate).
            StoreError: The database could not be read.
        """
        _check_limit(limit)
        _check_text(namespace=namespace)
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
            limit: Most entries returned (at least 1).

        Raises:
            ConfigError: ``limit`` is below 1, or an argument is text that is not valid
                UTF-8 (a lone surrogate).
            StoreError: The database could not be read.
        """
        _check_limit(limit)
        _check_text(namespace=namespace, prefix=prefix)
        params = {
            "ns": namespace,
            "pattern": escape_like(prefix) + "%",
            "length": len(prefix),
            "prefix": prefix,
            "limit": limit,
        }
        return self._select(self._sql.by_prefix, params, f"query {namespace} by prefix")

    def search(self, patterns: Iterable[str], text: str, limit: int = 10) -> list[StoreEntry]:
        """Live entries whose key or value holds ``text`` (case-insensitive), newest first.

        Only namespaces matching one of ``patterns`` are searched: a namespace, or a prefix
        followed by ``*`` (as in `StoreGrants`). Agents reach it only through
        `StoreView.search`, which passes their read grants.

        Args:
            patterns: Namespace patterns; none means no entry.
            text: Literal text (``%``, ``_`` and backslashes match themselves).
            limit: Most entries returned (at least 1).

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: The database could not be read.
        """
        _check_limit(limit)
        c = _entries.c
        scopes = []
        for pattern in sorted(set(patterns)):
            if pattern.endswith("*"):
                prefix = pattern[:-1]
                scopes.append(
                    and_(
                        c.namespace.like(escape_like(prefix) + "%", escape=LIKE_ESCAPE),
                        func.substr(c.namespace, 1, len(prefix)) == prefix,
                    )
                )
            else:
                scopes.append(c.namespace == pattern)
        if not scopes:
            return []
        needle = "%" + escape_like(text.lower()) + "%"
        stmt = (
            select(_entries)
            .where(
                or_(*scopes),
                or_(
                    func.lower(c.key).like(needle, escape=LIKE_ESCAPE),
                    func.lower(c.value).like(needle, escape=LIKE_ESCAPE),
                ),
                _live(),
            )
            .order_by(c.updated_at.desc(), c.namespace, c.key)
            .limit(limit)
        )
        return self._select(stmt, {}, "search")

    def _select(
        self, stmt: Select[Any], params: dict[str, Any], operation: str
    ) -> list[StoreEntry]:
        params["now"] = self._clock()
        entry = self._entry
        with self._reading(operation) as conn:
            rows = conn.execute(stmt, params).all()  # one fetchall, not a fetch per row
        return [entry(row) for row in rows]

    def delete(self, namespace: str, key: str) -> bool:
        """Remove the entry at ``(namespace, key)``, live or expired.

        Returns:
            Whether an entry was removed.

        Raises:
            ConfigError: Text that is not valid UTF-8 (a lone surrogate) in an argument.
            StoreError: The database could not be written.
        """
        _check_text(namespace=namespace, key=key)
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
        _check_ttl(read_extends_ttl_s, "read_extends_ttl_s")
        return StoreView(self, agent=agent, grants=parsed, read_extends_ttl_s=read_extends_ttl_s)
