"""The context store's schema and statements: one table, every statement built once per dialect."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Delete,
    Index,
    Integer,
    Select,
    String,
    Text,
    Update,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal,
    null,
    or_,
    select,
    update,
)
from sqlalchemy import (
    text as sql_text,
)
from sqlalchemy.sql.elements import ColumnElement

from clearance._state.db import Schema, SchemaChange, UTCDateTime
from clearance._state.db.sqlite import UNICODE_LOWER

if TYPE_CHECKING:  # the dialect in use is imported when a statement is built
    from sqlalchemy.dialects import postgresql, sqlite

__all__ = [
    "ENTRIES",
    "LIKE_ESCAPE",
    "PRE_VERSION_SCHEMA",
    "STORE_SCHEMA",
    "escape_like",
    "live",
    "prefix_params",
    "search_statement",
    "statements",
]

LIKE_ESCAPE = "\\"
"""The escape character of prefix patterns (escaped itself when it occurs in a prefix)."""


STORE_SCHEMA = Schema("store_schema_version")
"""The store's migrations (its own table of versions: a store and a run ledger may share one
database)."""


@STORE_SCHEMA.migration
def _m001_create_entries(change: SchemaChange) -> None:
    """Version 1: ``store_entries`` (a store made before versioning already has it)."""
    change.create_table(
        "store_entries",
        Column("namespace", String(255), primary_key=True),
        Column("key", String(1024), primary_key=True),
        Column("value", Text, nullable=False),
        Column("agent", String(255), nullable=False),
        Column("created_at", UTCDateTime, nullable=False),
        Column("updated_at", UTCDateTime, nullable=False),
        Column("expires_at", UTCDateTime, nullable=True),
        Index("ix_store_entries_namespace", "namespace"),
        Index("ix_store_entries_expires_at", "expires_at"),
        checkfirst=True,
    )


@STORE_SCHEMA.migration
def _m002_entry_versions(change: SchemaChange) -> None:
    """Version 2: ``store_entries.version``, the entry's write count (entries kept start at 1).

    ``updated_at`` cannot tell two writes within the clock's resolution apart; the version
    can: every write adds one to it in the upsert itself, and a new entry (or one replacing
    an expired entry) starts at 1.
    """
    change.add_column(
        "store_entries",
        Column("version", Integer, nullable=False, default=1, server_default=sql_text("1")),
        checkfirst=True,  # a store of this version whose table of versions was dropped
    )


PRE_VERSION_SCHEMA = 1
"""The schema version before entries had a version: read-only, such a store is read with
every entry at version 1 (what the migration gives them)."""

ENTRIES = STORE_SCHEMA.metadata.tables["store_entries"]
"""The entries' table of the model."""


def entry_columns(versioned: bool = True) -> tuple[ColumnElement[Any], ...]:
    """The columns of a `StoreEntry`, in its row's order.

    Args:
        versioned: The table has ``version``; ``False`` reads 1 in its place (a store at
            `PRE_VERSION_SCHEMA`, opened read-only so not migrated).
    """
    c = ENTRIES.c
    version = c.version if versioned else literal(1, Integer).label("version")
    return (c.namespace, c.key, c.value, c.agent, c.created_at, c.updated_at, c.expires_at, version)


def escape_like(text: str, escape: str = LIKE_ESCAPE) -> str:
    """Escape ``%``, ``_`` and ``escape`` in ``text`` so a ``LIKE`` pattern matches it literally.

    Args:
        text: A literal prefix.
        escape: The one-character escape used with the pattern's ``ESCAPE`` clause.

    Returns:
        The text with each ``%``, ``_`` and ``escape`` preceded by ``escape``.
    """
    return "".join(escape + ch if ch in ("%", "_", escape) else ch for ch in text)


def live() -> ColumnElement[bool]:
    """Not expired at the bound ``now``: no expiry, or expiry after it."""
    c = ENTRIES.c
    return or_(c.expires_at.is_(None), c.expires_at > bindparam("now", type_=UTCDateTime))


def search_statement(
    patterns: list[str], text: str, limit: int, *, sqlite: bool, versioned: bool = True
) -> Select[Any] | None:
    """`ContextStore.search`'s statement, or ``None`` when there is no pattern.

    Live entries of the namespaces ``patterns`` cover whose key or value holds ``text``
    (Unicode lowercase), newest first, at most ``limit``. A ``prefix*`` pattern matches
    literally and case-sensitively: ``LIKE`` with the prefix escaped, confirmed by
    comparing the namespace's first characters with it. On SQLite case is folded by
    `UNICODE_LOWER` (its connection must have it), elsewhere by the database's ``lower``;
    the text is folded in the statement by the same function as the columns (Python's and
    PostgreSQL's lowercase differ: ``İ``, a final ``Σ``), so an entry holding the text is
    found. ``versioned``: as in `entry_columns`.
    """
    c = ENTRIES.c
    scopes = []
    for pattern in patterns:
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
        return None
    lower = getattr(func, UNICODE_LOWER) if sqlite else func.lower
    # Folding leaves "%", "_" and the escape as they are, and makes none of them.
    needle = lower(literal("%" + escape_like(text) + "%", String))
    return (
        select(*entry_columns(versioned))
        .where(
            or_(*scopes),
            or_(
                lower(c.key).like(needle, escape=LIKE_ESCAPE),
                lower(c.value).like(needle, escape=LIKE_ESCAPE),
            ),
            live(),
        )
        .order_by(c.updated_at.desc(), c.namespace, c.key)
        .limit(limit)
    )


def _newest_first(stmt: Select[Any]) -> Select[Any]:
    """Live rows only, most recently updated first (ties by key), at most the bound limit."""
    return (
        stmt.where(live())
        .order_by(ENTRIES.c.updated_at.desc(), ENTRIES.c.key)
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
    """namespace, key, value, agent, created_at, updated_at, expires_at, version (1).

    The stored version becomes 1 for a new or expired row, else one more than it was: in
    the statement itself, so two writers of one key never get the same version."""
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
    count_by_prefix: Select[Any]
    """ns, pattern, length, prefix, now: how many live rows ``by_prefix`` could return."""
    touch: Update
    """ns, k, now, new_expiry."""
    delete: Delete
    """ns, k."""
    cleanup: Delete
    """now."""

    @classmethod
    def build(cls, dialect: str, versioned: bool = True) -> _Statements:
        c = ENTRIES.c
        columns = entry_columns(versioned)
        this = (c.namespace == bindparam("ns"), c.key == bindparam("k"))
        insert: sqlite.Insert | postgresql.Insert
        if dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            insert = sqlite_insert(ENTRIES)
        else:
            from sqlalchemy.dialects.postgresql import insert as postgresql_insert

            insert = postgresql_insert(ENTRIES)
        excluded = insert.excluded
        # A dead (expired) row is replaced as if new: its created_at restarts too. Expired
        # means at or before the time of this write, which is the row's new updated_at.
        dead = and_(c.expires_at.is_not(None), c.expires_at <= excluded.updated_at)
        version = case((dead, excluded.version), else_=c.version + 1)
        upsert = insert.on_conflict_do_update(
            index_elements=[c.namespace, c.key],
            set_={
                "value": excluded.value,
                "agent": excluded.agent,
                "updated_at": excluded.updated_at,
                "expires_at": excluded.expires_at,
                "created_at": case((dead, excluded.created_at), else_=c.created_at),
                "version": version,
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
                "version": version,
            },
        )
        new = bindparam("new_expiry", type_=UTCDateTime)
        prefixed = (
            c.namespace == bindparam("ns"),
            c.key.like(bindparam("pattern", type_=String), escape=LIKE_ESCAPE),
            func.substr(c.key, 1, bindparam("length", type_=Integer))
            == bindparam("prefix", type_=String),
        )
        return cls(
            upsert=upsert,
            extend=extend,
            get_entry=select(*columns).where(*this, live()),
            get_value=select(c.value).where(*this, live()),
            query=_newest_first(select(*columns).where(c.namespace == bindparam("ns"))),
            by_prefix=_newest_first(select(*columns).where(*prefixed)),
            count_by_prefix=select(func.count()).select_from(ENTRIES).where(*prefixed, live()),
            touch=update(ENTRIES)
            .where(*this, live())
            .values(expires_at=case((c.expires_at < new, new), else_=c.expires_at)),
            delete=delete(ENTRIES).where(*this),
            cleanup=delete(ENTRIES).where(
                c.expires_at.is_not(None), c.expires_at <= bindparam("now", type_=UTCDateTime)
            ),
        )


def prefix_params(namespace: str, prefix: str) -> dict[str, Any]:
    """The bound parameters ``by_prefix`` and ``count_by_prefix`` share (all but now, limit)."""
    return {
        "ns": namespace,
        "pattern": escape_like(prefix) + "%",
        "length": len(prefix),
        "prefix": prefix,
    }


statements = cache(_Statements.build)
"""The `_Statements` of a dialect (``"sqlite"``, ``"postgresql"``) and of a table with or
without ``version`` (see `entry_columns`), built on first use."""
