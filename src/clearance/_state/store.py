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
- All times are timezone-aware UTC from an injectable clock, so tests never sleep.

Agents never get the store itself, only `ContextStore.view` (see `clearance._state.grants`),
which denies every namespace not granted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Index,
    MetaData,
    String,
    Table,
    Text,
    and_,
    case,
    delete,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import ColumnElement

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import ConfigError, StoreError
from clearance._state.database import DatabaseBase, _UTCDateTime

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


def escape_like(text: str, escape: str = LIKE_ESCAPE) -> str:
    """Escape ``%``, ``_`` and ``escape`` in ``text`` so a ``LIKE`` pattern matches it literally.

    Args:
        text: A literal prefix.
        escape: The one-character escape used with the pattern's ``ESCAPE`` clause.

    Returns:
        The text with each ``%``, ``_`` and ``escape`` preceded by ``escape``.
    """
    return "".join(escape + ch if ch in ("%", "_", escape) else ch for ch in text)


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


def _check_ttl(ttl_s: float | None, field: str = "ttl_s") -> None:
    if ttl_s is not None and not ttl_s > 0:
        raise ConfigError(f"must be a positive number of seconds, got {ttl_s!r}", field=field)


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise ConfigError(f"must be at least 1, got {limit}", field="limit")


class ContextStore(DatabaseBase):
    """Durable namespaced key/value store with TTL (SQLAlchemy Core; SQLite by default).

    Safe to share between threads and processes: each operation is one short transaction,
    and on SQLite writers queue on the database lock (``BEGIN IMMEDIATE`` with a busy
    timeout) instead of failing. Usable as a context manager; `close` releases connections.

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

    def __init__(self, url: str = DEFAULT_STORE_URL, *, clock: Clock = utc_now) -> None:
        super().__init__(url, clock=clock)
        try:
            with self._writing("create the store table") as conn:
                _metadata.create_all(conn, checkfirst=True)
        except BaseException:
            self._engine.dispose()
            raise

    # -- helpers --------------------------------------------------------------------------

    def _expiry(self, now: datetime, ttl_s: float | None) -> datetime | None:
        return None if ttl_s is None else now + timedelta(seconds=ttl_s)

    @staticmethod
    def _live(now: datetime) -> ColumnElement[bool]:
        return or_(_entries.c.expires_at.is_(None), _entries.c.expires_at > now)

    @staticmethod
    def _entry(row: Any) -> StoreEntry:
        return StoreEntry(
            namespace=row.namespace,
            key=row.key,
            value=row.value,
            agent=row.agent,
            created_at=row.created_at,
            updated_at=row.updated_at,
            expires_at=row.expires_at,
        )

    def _upsert(
        self, namespace: str, key: str, value: str, agent: str, expires_at: datetime | None
    ) -> None:
        if not isinstance(value, str):
            raise ConfigError(
                f"a store value must be text, got {type(value).__name__} (encode JSON first)",
                field="value",
            )
        now = self._clock()
        insert = (
            sqlite.insert(_entries) if self._dialect == "sqlite" else postgresql.insert(_entries)
        )
        stmt = insert.values(
            namespace=namespace,
            key=key,
            value=value,
            agent=agent,
            created_at=now,
            updated_at=now,
            expires_at=expires_at,
        )
        # A dead (expired) row is replaced as if new: its created_at restarts too.
        excluded = stmt.excluded
        dead = and_(_entries.c.expires_at.is_not(None), _entries.c.expires_at <= now)
        stmt = stmt.on_conflict_do_update(
            index_elements=[_entries.c.namespace, _entries.c.key],
            set_={
                "value": excluded.value,
                "agent": excluded.agent,
                "updated_at": excluded.updated_at,
                "expires_at": excluded.expires_at,
                "created_at": case((dead, excluded.created_at), else_=_entries.c.created_at),
            },
        )
        with self._writing(f"write {namespace}/{key}") as conn:
            conn.execute(stmt)

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
            ConfigError: ``ttl_s`` is not positive, or ``value`` is not text.
            StoreError: The database could not be written.
        """
        _check_ttl(ttl_s)
        self._upsert(namespace, key, value, agent, self._expiry(self._clock(), ttl_s))

    def set_with_extension(
        self,
        namespace: str,
        key: str,
        value: str,
        agent: str,
        ttl_s: float = DEFAULT_EXTENSION_TTL_S,
    ) -> None:
        """Write like `set`, and push expiry to ``ttl_s`` seconds from now (default 90 days).

        Raises:
            ConfigError: ``ttl_s`` is not positive, or ``value`` is not text.
            StoreError: The database could not be written.
        """
        _check_ttl(ttl_s)
        self._upsert(namespace, key, value, agent, self._expiry(self._clock(), ttl_s))

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
            ConfigError: ``ttl_s`` is not positive.
            StoreError: The database could not be written.
        """
        _check_ttl(ttl_s)
        now = self._clock()
        new = literal(now + timedelta(seconds=ttl_s or DEFAULT_EXTENSION_TTL_S), _UTCDateTime)
        stmt = (
            update(_entries)
            .where(_entries.c.namespace == namespace, _entries.c.key == key, self._live(now))
            .values(
                expires_at=case((_entries.c.expires_at < new, new), else_=_entries.c.expires_at)
            )
        )
        with self._writing(f"touch {namespace}/{key}") as conn:
            return bool(conn.execute(stmt).rowcount)

    def get_entry(self, namespace: str, key: str) -> StoreEntry | None:
        """The live entry at ``(namespace, key)``, or ``None`` when absent or expired.

        Raises:
            StoreError: The database could not be read.
        """
        stmt = select(_entries).where(
            _entries.c.namespace == namespace,
            _entries.c.key == key,
            self._live(self._clock()),
        )
        with self._reading(f"read {namespace}/{key}") as conn:
            row = conn.execute(stmt).first()
        return self._entry(row) if row is not None else None

    def get(self, namespace: str, key: str) -> str | None:
        """The value at ``(namespace, key)``, or ``None`` when absent or expired.

        Expired entries are filtered out, not deleted (see `cleanup`).

        Raises:
            StoreError: The database could not be read.
        """
        entry = self.get_entry(namespace, key)
        return entry.value if entry is not None else None

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
            ConfigError: ``limit`` is below 1.
            StoreError: The database could not be read.
        """
        _check_limit(limit)
        return self._select(_entries.c.namespace == namespace, limit, f"query {namespace}")

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
            ConfigError: ``limit`` is below 1.
            StoreError: The database could not be read.
        """
        _check_limit(limit)
        condition = and_(
            _entries.c.namespace == namespace,
            _entries.c.key.like(escape_like(prefix) + "%", escape=LIKE_ESCAPE),
            func.substr(_entries.c.key, 1, len(prefix)) == prefix,
        )
        return self._select(condition, limit, f"query {namespace} by prefix")

    def _select(
        self, condition: ColumnElement[bool], limit: int, operation: str
    ) -> list[StoreEntry]:
        stmt = (
            select(_entries)
            .where(condition, self._live(self._clock()))
            .order_by(_entries.c.updated_at.desc(), _entries.c.key)
            .limit(limit)
        )
        with self._reading(operation) as conn:
            return [self._entry(row) for row in conn.execute(stmt)]

    def delete(self, namespace: str, key: str) -> bool:
        """Remove the entry at ``(namespace, key)``, live or expired.

        Returns:
            Whether an entry was removed.

        Raises:
            StoreError: The database could not be written.
        """
        stmt = delete(_entries).where(_entries.c.namespace == namespace, _entries.c.key == key)
        with self._writing(f"delete {namespace}/{key}") as conn:
            return bool(conn.execute(stmt).rowcount)

    def cleanup(self) -> int:
        """Remove every expired entry.

        Returns:
            How many entries were removed.

        Raises:
            StoreError: The database could not be written.
        """
        now = self._clock()
        stmt = delete(_entries).where(
            _entries.c.expires_at.is_not(None), _entries.c.expires_at <= now
        )
        with self._writing("remove expired entries") as conn:
            return int(conn.execute(stmt).rowcount)

    def view(self, agent: str, grants: Mapping[str, str] | StoreGrants) -> StoreView:
        """A view of the store for ``agent`` that allows only what ``grants`` say.

        Args:
            agent: The agent using the view (recorded as the writer of its entries).
            grants: Namespace (or ``prefix*``) to ``"read"``, ``"write"`` or
                ``"read_write"``; see `StoreGrants`.

        Raises:
            ConfigError: A grant is malformed.
        """
        from clearance._state.grants import StoreGrants, StoreView

        parsed = grants if isinstance(grants, StoreGrants) else StoreGrants.parse(grants)
        return StoreView(self, agent=agent, grants=parsed)
