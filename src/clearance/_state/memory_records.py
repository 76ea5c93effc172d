"""The memory store's records: their schema, `MemoryRecord`, partitions and audit reads.

`PersistentMemory` (``memory.py``) is how an agent reads and writes them, within its scopes and
its partition; the functions here ignore both, for auditing (``clearance verify``,
``clearance memory``).

Each record carries its ``provider``: the provider of the model whose output it is
(``openai``, ``llama-cpp``, ``fake``...; ``None`` when not known). Records of the fake model
(``fake:<name>``, a test double) form a partition of their own (`partition_of`): a memory
opened for the fake model reads only them, any other memory never reads them. A demo on the
fake model then shows memory working without ever putting fake answers before a real model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator

from clearance._core.errors import MalformedRecord
from clearance._core.names import check_count
from clearance._core.vocabulary import MemoryKind
from clearance._state.db import DatabaseBase, Schema, SchemaChange
from clearance._state.db.nul_text import MARK, NulText

__all__ = [
    "FAKE_PROVIDER",
    "MEMORY_SCHEMA",
    "MEMORIES",
    "MAX_LISTED",
    "MAX_RECORD_CHARS",
    "READ_COLUMNS",
    "READ_COLUMNS_SQL",
    "MemoryDatabase",
    "MemoryRecord",
    "RecordLookup",
    "count_memories",
    "cut_to_cap",
    "kept_chars",
    "list_memories",
    "memory_lookup",
    "partition_of",
    "record_of",
]


class _RecordTime(TypeDecorator[datetime]):
    """A record's ``created_at``: a time that is not one (edited by hand) is a `MalformedRecord`.

    The same column as ``DateTime(timezone=True)``; only reading it differs: SQLite holds any
    text there, which SQLAlchemy's own conversion would raise a ``ValueError`` for.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def result_processor(
        self, dialect: sa.Dialect, coltype: object
    ) -> Callable[[Any], datetime | None] | None:
        process = super().result_processor(dialect, coltype)
        if process is None:
            return None

        def checked(value: Any) -> datetime | None:
            try:
                return process(value)
            except (ValueError, TypeError, OverflowError):
                raise MalformedRecord(
                    f"a memory record is malformed: its created_at {_shown(value)} is not a time"
                ) from None

        return checked


MEMORY_SCHEMA = Schema("memory_schema_version")
"""The memory store's migrations (its own table of versions: it may share a database)."""


@MEMORY_SCHEMA.migration
def _m001_memories(change: SchemaChange) -> None:
    """Version 1: ``clearance_memories`` and its full-text index.

    A memory store made before versioning already has them: both are created if missing.
    """
    change.create_table(
        "clearance_memories",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("scope", sa.String(200), nullable=False, index=True),
        sa.Column("author", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("content", NulText, nullable=False),
        sa.Column("created_at", _RecordTime(), nullable=False),
        sa.Column("embedding", sa.Text, nullable=True),
        checkfirst=True,
    )
    if change.dialect == "sqlite":
        change.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS clearance_memories_fts "
            "USING fts5(id UNINDEXED, content, tokenize = 'porter unicode61')"
        )
    elif change.dialect == "postgresql":
        change.execute(
            "CREATE INDEX IF NOT EXISTS clearance_memories_tsv "
            "ON clearance_memories USING gin (to_tsvector('english', content))"
        )


@MEMORY_SCHEMA.migration
def _m002_provider(change: SchemaChange) -> None:
    """Version 2: each record's ``provider`` (``NULL`` for records written before it)."""
    change.add_column("clearance_memories", sa.Column("provider", sa.String(64), nullable=True))


MEMORIES = MEMORY_SCHEMA.metadata.tables["clearance_memories"]

MAX_LISTED = 10_000
"""Most records `list_memories` returns."""

MAX_RECORD_CHARS = 1_000_000
"""Most characters of one record's content: more is refused when recorded, and a longer record
found in the database (inserted by hand) is a `MalformedRecord` on reading, its text never
loaded (`READ_COLUMNS`)."""


def cut_to_cap(content: str) -> str:
    """``content`` as a record keeps it: whole up to `MAX_RECORD_CHARS` characters, else cut.

    A longer text keeps its first `kept_chars` characters and ends with a visible mark
    saying how many of how many (``[cut by Clearance: the first 999,926 of 1,200,010
    characters are kept]``), within the cap.
    """
    total = len(content)
    if total <= MAX_RECORD_CHARS:
        return content
    kept = kept_chars(total)
    return content[:kept] + _cut_mark(kept, total)


def kept_chars(total: int) -> int:
    """How many characters a record keeps of a text of ``total`` (`cut_to_cap`)."""
    if total <= MAX_RECORD_CHARS:
        return total
    return MAX_RECORD_CHARS - len(_cut_mark(MAX_RECORD_CHARS, total))  # fewer: no longer


def _cut_mark(kept: int, total: int) -> str:
    """The mark that ends a record cut to its first ``kept`` of ``total`` characters."""
    return f"\n\n[cut by Clearance: the first {kept:,} of {total:,} characters are kept]"


MAX_STORED_CHARS = len(MARK) + 2 * MAX_RECORD_CHARS
"""Most characters a record's content takes in its column: on PostgreSQL a content holding
NUL is stored escaped (`clearance._state.db.nul_text`), at most twice as long behind a mark.
`record_of` holds the content read back to `MAX_RECORD_CHARS`."""

_LENGTH = sa.func.length(MEMORIES.c.content)
READ_COLUMNS = (
    *(column for column in MEMORIES.c if column.name != "content"),
    sa.case((_LENGTH <= MAX_STORED_CHARS, MEMORIES.c.content), else_=sa.null()).label("content"),
    _LENGTH.label("content_chars"),
)
"""What a read selects: every column, the content only up to `MAX_STORED_CHARS` characters
(``NULL`` past it), and its length (``content_chars``) for `record_of` to name."""

READ_COLUMNS_SQL = ", ".join(
    [f"m.{column.name}" for column in MEMORIES.c if column.name != "content"]
    + [
        f"CASE WHEN length(m.content) <= {MAX_STORED_CHARS} THEN m.content END AS content",
        "length(m.content) AS content_chars",
    ]
)
"""`READ_COLUMNS` for a raw query, the table aliased ``m``."""

FAKE_PROVIDER = "fake"
"""The fake model's provider (``fake:<name>``): its records are a partition of their own."""


def partition_of(provider: str | None) -> str:
    """The partition a provider's records are in: ``"fake"`` for `FAKE_PROVIDER`, else ``"real"``.

    Records whose provider is unknown (``None``: written before providers were recorded, or
    by code that gave none) are ``"real"``.
    """
    return "fake" if provider == FAKE_PROVIDER else "real"


class MemoryDatabase(DatabaseBase):
    """The memory store's database, migrated when opened (see `DatabaseBase`).

    Args:
        url_or_engine: A SQLAlchemy URL, or an engine to share.
        read_only: Open an SQLite file read-only, creating and writing nothing (see
            `DatabaseBase`).
        create: Create the database and its tables when it has none; ``False``: refuse a
            database that is not a memory store (missing, empty, another program's).

    Raises:
        StoreError: The database cannot be opened or migrated, or (``read_only`` or not
            ``create``) is not a memory store.
    """

    _LABEL = "memory store"

    def __init__(
        self, url_or_engine: str | sa.Engine, *, read_only: bool = False, create: bool = True
    ) -> None:
        super().__init__(url_or_engine, read_only=read_only, create=create)
        try:
            self._migrate(MEMORY_SCHEMA)
        except BaseException:
            self.close()
            raise


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryRecord:
    """One remembered message or fact.

    Attributes:
        id: Unique id; prompts cite it as origin ``memory:<id>``.
        scope: ``agent:<name>`` or ``group:<name>``.
        author: The agent that recorded it.
        kind: ``"message"`` (a conversation turn) or ``"fact"``.
        content: The text.
        created_at: When it was recorded (aware UTC).
        score: Relevance of the last retrieval (higher is better), ``None`` otherwise.
        provider: The provider of the model whose output it is (``"openai"``, ``"fake"``...);
            ``None`` when not known.
    """

    id: str
    scope: str
    author: str
    kind: MemoryKind
    content: str
    created_at: datetime
    score: float | None = None
    provider: str | None = None

    @property
    def origin(self) -> str:
        """The record's origin in a prompt: ``memory:<id>``."""
        return f"memory:{self.id}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for the ledger)."""
        return {
            "id": self.id,
            "scope": self.scope,
            "author": self.author,
            "kind": self.kind,
            "content": self.content,
            "created_at": self.created_at.isoformat(),
        }


class RecordLookup:
    """An unscoped lookup of memory records by id (see `memory_lookup`), holding its database.

    Call it with an id for the record (``None`` when there is none). `close` releases the
    database's connections (closing twice is fine; a lookup after it raises `StoreError`);
    usable as a context manager, which closes it.
    """

    __slots__ = ("_database",)

    def __init__(self, database: MemoryDatabase) -> None:
        self._database = database

    def __call__(self, memory_id: str) -> MemoryRecord | None:
        with self._database._reading(f"read memory {memory_id!r}") as conn:
            row = conn.execute(sa.select(*READ_COLUMNS).where(MEMORIES.c.id == memory_id)).first()
        return record_of(row._mapping) if row is not None else None

    def close(self) -> None:
        """Release the database's connections (an engine passed in is left to its owner)."""
        self._database.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def memory_lookup(url_or_engine: str | sa.Engine) -> RecordLookup:
    """An unscoped lookup of records by id, for auditing (``clearance verify``).

    Not for agents: it ignores scopes. Pass it to `verify_run` as ``memories``, then close it
    (``with memory_lookup(url) as lookup:``, or ``lookup.close()``): it holds the database
    open. The database is opened read-only (see `DatabaseBase`): nothing is created,
    upgraded or written, and a database that is not a memory store is refused.

    Raises:
        StoreError: The database cannot be opened, or is not a memory store (or is one of
            an older schema: open it once with write access).
    """
    return RecordLookup(MemoryDatabase(url_or_engine, read_only=True))


def list_memories(url_or_engine: str | sa.Engine, *, limit: int = 50) -> list[MemoryRecord]:
    """The newest records of every scope and partition, newest first, for auditing.

    Not for agents: it ignores scopes (``clearance memory`` lists them). An SQLite file
    is opened read-only: nothing is created or written, and a database that is not a
    memory store is refused.

    Args:
        url_or_engine: The memory store.
        limit: Most records to return (an integer from 1 to `MAX_LISTED`).

    Raises:
        ConfigError: ``limit`` is not an integer from 1 to `MAX_LISTED`.
        StoreError: The database cannot be opened or read, or is not a memory store (or,
            an SQLite file, one of an older schema: open it once with write access).
        MalformedRecord: A record is not of the shape the store writes (edited by hand).
    """
    check_count("limit", limit, least=1, most=MAX_LISTED)
    database = MemoryDatabase(url_or_engine, read_only=True)
    try:
        with database._reading("list memories") as conn:
            rows = conn.execute(
                sa.select(*READ_COLUMNS)
                .order_by(MEMORIES.c.created_at.desc(), MEMORIES.c.id.desc())
                .limit(limit)
            ).all()
    finally:
        database.close()
    return [record_of(r._mapping) for r in rows]


def count_memories(url_or_engine: str | sa.Engine) -> int:
    """How many records the memory store holds, of every scope (what `list_memories` lists).

    Raises:
        StoreError: As `list_memories`.
    """
    database = MemoryDatabase(url_or_engine, read_only=True)
    try:
        with database._reading("count memories") as conn:
            count = conn.execute(sa.select(sa.func.count()).select_from(MEMORIES)).scalar_one()
    finally:
        database.close()
    return int(count)


def record_of(row: Any, *, score: float | None = None) -> MemoryRecord:
    """The `MemoryRecord` of a row of ``clearance_memories`` (``score`` from a ranking).

    Raises:
        MalformedRecord: The row holds what the store never writes (edited by hand): a
            field that is not text, content over `MAX_RECORD_CHARS` (past `MAX_STORED_CHARS`
            it is not loaded: `READ_COLUMNS`), an unknown kind, a ``created_at`` that is
            not a time.
    """
    ident, content = row["id"], row["content"]
    # As read back (on PostgreSQL a content holding NUL is stored longer, escaped), or as
    # stored when it was too long to load.
    chars = len(content) if isinstance(content, str) else row.get("content_chars")
    if isinstance(chars, int) and chars > MAX_RECORD_CHARS:
        raise _malformed(
            ident, f"its content is {chars:,} characters, over the {MAX_RECORD_CHARS:,} a "
            "record may hold",
        )  # fmt: skip
    texts = ("id", "scope", "author", "content")
    wrong = next((name for name in texts if not isinstance(row[name], str)), None)
    provider = row.get("provider")
    if wrong is None and provider is not None and not isinstance(provider, str):
        wrong = "provider"
    if wrong is not None:
        raise _malformed(ident, f"its {wrong} is {type(row[wrong]).__name__}, not text")
    try:
        kind = MemoryKind(row["kind"])
    except ValueError:
        raise _malformed(
            ident, f"its kind {_shown(row['kind'])} is not {' or '.join(MemoryKind)}"
        ) from None
    created = row["created_at"]
    if isinstance(created, str):
        try:
            created = datetime.fromisoformat(created)
        except ValueError:
            raise _malformed(ident, f"its created_at {_shown(created)} is not a time") from None
    if not isinstance(created, datetime):
        raise _malformed(ident, f"its created_at {_shown(created)} is not a time")
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return MemoryRecord(
        id=ident,
        scope=row["scope"],
        author=row["author"],
        kind=kind,
        content=row["content"],
        created_at=created,
        score=score,
        provider=provider,
    )


def _malformed(ident: object, problem: str) -> MalformedRecord:
    """The error of memory record ``ident`` holding what the store never writes."""
    return MalformedRecord(f"memory record {_shown(ident)} is malformed: {problem}")


def _shown(value: object) -> str:
    """``value`` quoted for a one-line message, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
