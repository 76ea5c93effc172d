"""`PersistentMemory`: one agent's long-term memory, with relevance retrieval.

Stored through SQLAlchemy: SQLite by default, PostgreSQL for a shared server. Every record
belongs to one **scope**: ``agent:<name>`` (private to that agent) or ``group:<name>`` (a
memory group declared in the team file, shared by exactly its members). A memory reads only
the scopes its agent is in, so agent B never retrieves agent A's memories unless both are in
a declared group, and then only what was recorded to that group by its members: a group's
scope is its name, and another team sharing the database may declare a group of that name
with other members, whose records this team's members never read (nor they this team's).

Ranking:

- SQLite: an FTS5 index over the content, ranked by BM25 (``bm25()``; Robertson and
  Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", 2009; SQLite's FTS5
  documentation, section "The bm25() function").
- PostgreSQL: built-in full-text search, ``to_tsvector('english', content)`` with a GIN index,
  ranked by ``ts_rank_cd`` (cover density).
- With an `Embedder`: cosine similarity of embeddings, over the newest `MAX_SCANNED` records
  of the readable scopes.

The query is split into words (runs of letters and digits), each kept once; a record
matches when it holds any of them.

A memory reads only the records of its partition (see ``memory_records.py``): the fake
model's records when it records the fake model's output, every other record otherwise.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

import sqlalchemy as sa

from clearance._core.errors import AccessDenied, MalformedRecord, StoreError
from clearance._core.ids import new_id
from clearance._core.names import check_count
from clearance._core.vocabulary import MemoryKind
from clearance._state.conversation import Turn
from clearance._state.db.nul_text import NulText
from clearance._state.memory_records import (
    FAKE_PROVIDER,
    MAX_LISTED,
    MAX_RECORD_CHARS,
    MEMORIES,
    READ_COLUMNS,
    READ_COLUMNS_SQL,
    MemoryDatabase,
    MemoryRecord,
    count_memories,
    cut_to_cap,
    list_memories,
    memory_lookup,
    partition_of,
    record_of,
)

__all__ = [
    "FAKE_PROVIDER",
    "MAX_SCANNED",
    "Embedder",
    "MemoryRecord",
    "PersistentMemory",
    "agent_scope",
    "group_scope",
    "count_memories",
    "list_memories",
    "memory_lookup",
    "partition_of",
]

_WORD = re.compile(r"\w+", re.UNICODE)
_PAIRS = sa.bindparam("pairs", expanding=True, type_=sa.String())
"""The ``"<scope>|<author>"`` pairs a raw query reads (typed: the list may be empty)."""

MAX_SCANNED = 10_000
"""Most records a search ranked in Python scores (by embedding, or by shared words where the
database has no full-text index): the newest of the scopes it reads. Full-text search ranks
every record in the database's own index."""

_NEWEST_FIRST = (MEMORIES.c.created_at.desc(), MEMORIES.c.id.desc())


def agent_scope(agent: str) -> str:
    """The private scope of ``agent``: ``agent:<name>``."""
    return f"agent:{agent}"


def group_scope(group: str) -> str:
    """The shared scope of a memory group: ``group:<name>``."""
    return f"group:{group}"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors for semantic retrieval.

    Attributes:
        dimensions: Length of every vector.
    """

    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


class PersistentMemory(MemoryDatabase):
    """Long-term memory of one agent: its private scope plus the groups it belongs to.

    Args:
        url_or_engine: A SQLAlchemy URL (``"sqlite:///memory.db"``,
            ``"postgresql+psycopg://..."``), opened like every store (write-ahead logging on
            SQLite, a versioned schema), or an engine to share (used as configured, not
            disposed by `close`).
        agent: The agent that owns this memory.
        groups: Memory groups declared in the team file, by name, with their members; the
            agent reads and writes the groups it is a member of and no others.
        embedder: Optional; when given, records are embedded and retrieval ranks by cosine
            similarity instead of full-text search.
        provider: The provider of the model whose output this memory records (``"openai"``,
            ``"fake"``...; ``None``: not known). It reads only records of the same partition
            (`partition_of`): the fake model's records when ``"fake"``, every other record
            otherwise.

    Raises:
        StoreError: The database cannot be opened or prepared.
    """

    def __init__(
        self,
        url_or_engine: str | sa.Engine,
        *,
        agent: str,
        groups: Mapping[str, Iterable[str]] | None = None,
        embedder: Embedder | None = None,
        provider: str | None = None,
    ):
        self.agent = agent
        self.provider = provider
        # The groups the agent is in, with their members: a group's scope is its name, and
        # another team may declare a group of that name with other members; the agent reads
        # only what the members of its own group recorded there.
        self._members = {
            name: frozenset(members)
            for name, members in ((n, set(m)) for n, m in (groups or {}).items())
            if agent in members
        }
        self.groups = frozenset(self._members)
        self.scopes = frozenset({agent_scope(agent), *(group_scope(g) for g in self.groups)})
        self.embedder = embedder
        super().__init__(url_or_engine)

    # -- writing -----------------------------------------------------------------------

    def record(
        self,
        items: str | Turn | Iterable[str | Turn],
        *,
        group: str | None = None,
        now: datetime | None = None,
        cut: bool = False,
    ) -> list[MemoryRecord]:
        """Remember messages (`Turn`) or facts (strings).

        A turn keeps its id, so recording the same turn twice stores it once.

        Args:
            items: One item or several.
            group: Record into this memory group instead of the agent's private scope.
            now: Time stamp (aware UTC); ``None`` for the current time.
            cut: Record an item over `MAX_RECORD_CHARS` characters cut, with a mark saying
                how much of it is kept (`cut_to_cap`), instead of refusing the call: what a
                run or a chat remembers of its own output, which it never fails for.

        Returns:
            The records stored (already-held turns left out).

        Raises:
            AccessDenied: The agent is not a member of ``group``.
            StoreError: The write failed, or (not ``cut``) an item is over
                `MAX_RECORD_CHARS` characters (then nothing is recorded).
        """
        scope = agent_scope(self.agent)
        if group is not None:
            if group not in self.groups:
                raise AccessDenied(self.agent, group_scope(group), "write")
            scope = group_scope(group)
        if isinstance(items, str | Turn):
            items = [items]
        created = now or datetime.now(UTC)
        records = [
            MemoryRecord(
                id=item.id if isinstance(item, Turn) else new_id("mem"),
                scope=scope,
                author=self.agent,
                kind=MemoryKind.MESSAGE if isinstance(item, Turn) else MemoryKind.FACT,
                content=_cut(_turn_text(item) if isinstance(item, Turn) else item, cut),
                created_at=created,
                provider=self.provider,
            )
            for item in items
        ]
        for number, rec in enumerate(records, 1):
            if len(rec.content) > MAX_RECORD_CHARS:
                raise StoreError(
                    f"memory record {number} of {len(records)} is {len(rec.content):,} "
                    f"characters, over the {MAX_RECORD_CHARS:,} a record may hold: nothing "
                    "recorded"
                )
        vectors = (
            self.embedder.embed([r.content for r in records]) if self.embedder and records else None
        )
        stored = []
        with self._writing("record memories") as conn:
            held = {
                row[0]
                for row in conn.execute(
                    sa.select(MEMORIES.c.id).where(MEMORIES.c.id.in_([r.id for r in records]))
                )
            }
            for i, rec in enumerate(records):
                if rec.id in held:
                    continue
                held.add(rec.id)
                conn.execute(
                    MEMORIES.insert().values(
                        id=rec.id,
                        scope=rec.scope,
                        author=rec.author,
                        kind=rec.kind,
                        content=rec.content,
                        created_at=rec.created_at,
                        embedding=json.dumps(vectors[i]) if vectors else None,
                        provider=rec.provider,
                    )
                )
                if self._dialect == "sqlite":
                    conn.execute(
                        sa.text(
                            "INSERT INTO clearance_memories_fts(id, content) VALUES (:id, :content)"
                        ),
                        {"id": rec.id, "content": rec.content},
                    )
                stored.append(rec)
        return stored

    # -- reading -----------------------------------------------------------------------

    def retrieve(
        self, query: str, limit: int = 5, *, group: str | None = None
    ) -> list[MemoryRecord]:
        """The records most relevant to ``query``, most relevant first.

        Only the agent's own scope and its groups are searched.

        Args:
            query: Free text; its words are matched (any of them).
            limit: Most records to return (an integer from 0 to `MAX_LISTED`).
            group: Search only this group's memory (empty if the agent is not a member).

        Returns:
            Up to ``limit`` records with ``score`` set; empty when nothing matches.

        Raises:
            ConfigError: ``limit`` is not an integer from 0 to `MAX_LISTED`.
            StoreError: The query failed.
            MalformedRecord: A record is not of the shape the store writes (edited by hand).
        """
        check_count("limit", limit, least=0, most=MAX_LISTED)
        scopes = self.scopes if group is None else self.scopes & {group_scope(group)}
        if limit < 1 or not scopes:
            return []
        with self._reading("retrieve memories") as conn:
            if self.embedder is not None:
                return self._by_embedding(conn, query, limit, scopes)
            # Each word once: a word repeated a thousand times costs FTS5 quadratic time.
            words = list(dict.fromkeys(_WORD.findall(query.lower())))
            if not words:
                return []
            if self._dialect == "sqlite":
                return self._by_fts5(conn, words, limit, scopes)
            if self._dialect == "postgresql":
                return self._by_tsvector(conn, words, limit, scopes)
            return self._by_overlap(conn, words, limit, scopes)

    def get(self, memory_id: str) -> MemoryRecord | None:
        """The record with this id, if it is in a scope this agent reads; else ``None``."""
        with self._reading(f"read memory {memory_id!r}") as conn:
            row = conn.execute(
                sa.select(*READ_COLUMNS).where(
                    MEMORIES.c.id == memory_id, self._readable(self.scopes), self._partition()
                )
            ).first()
        return record_of(row._mapping) if row is not None else None

    def recent(self, limit: int = 10, *, group: str | None = None) -> list[MemoryRecord]:
        """The newest records of the readable scopes (or of one group), oldest first.

        Raises:
            ConfigError: ``limit`` is not an integer from 0 to `MAX_LISTED`.
            StoreError: The query failed.
            MalformedRecord: A record is not of the shape the store writes (edited by hand).
        """
        check_count("limit", limit, least=0, most=MAX_LISTED)
        scopes = self.scopes if group is None else {group_scope(group)} & self.scopes
        with self._reading("read recent memories") as conn:
            rows = conn.execute(
                sa.select(*READ_COLUMNS)
                .where(self._readable(scopes), self._partition())
                .order_by(MEMORIES.c.created_at.desc(), MEMORIES.c.id.desc())
                .limit(limit)
            ).all()
        return [record_of(r._mapping) for r in reversed(rows)]

    def _authored(self, scopes: Iterable[str]) -> list[str]:
        """``"<scope>|<author>"`` of each of the agent's groups in ``scopes`` and each member.

        A group's records are read only when by one of its members (the agent's own scope
        is matched apart, whoever wrote in it).
        """
        return sorted(
            f"{group_scope(g)}|{member}"
            for g, members in self._members.items()
            if group_scope(g) in scopes
            for member in members
        )

    def _readable(self, scopes: Iterable[str]) -> sa.ColumnElement[bool]:
        """The records of ``scopes`` this agent reads: its own, and its groups' by members."""
        scopes = frozenset(scopes)
        own = agent_scope(self.agent)
        pair = MEMORIES.c.scope + "|" + MEMORIES.c.author
        return sa.or_(
            MEMORIES.c.scope == (own if own in scopes else None),
            pair.in_(self._authored(scopes)),
        )

    def _readable_sql(self, scopes: Iterable[str]) -> tuple[str, dict[str, object]]:
        """`_readable` for the raw queries (table alias ``m``; parameters ``:own``, ``:pairs``)."""
        scopes = frozenset(scopes)
        own = agent_scope(self.agent)
        sql = "(m.scope = :own OR (m.scope || '|' || m.author) IN :pairs)"
        return sql, {"own": own if own in scopes else None, "pairs": self._authored(scopes)}

    def _partition(self) -> sa.ColumnElement[bool]:
        """The records of this memory's partition (see `partition_of`)."""
        column = MEMORIES.c.provider
        if partition_of(self.provider) == "fake":
            return column == FAKE_PROVIDER
        return sa.or_(column.is_(None), column != FAKE_PROVIDER)

    def _partition_sql(self) -> str:
        """`_partition` for the raw queries (table alias ``m``, parameter ``:fake``)."""
        if partition_of(self.provider) == "fake":
            return "m.provider = :fake"
        return "(m.provider IS NULL OR m.provider != :fake)"

    def _by_fts5(
        self, conn: sa.Connection, words: list[str], limit: int, scopes: frozenset[str]
    ) -> list[MemoryRecord]:
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        readable, params = self._readable_sql(scopes)
        rows = conn.execute(
            sa.text(
                f"SELECT {READ_COLUMNS_SQL}, bm25(clearance_memories_fts) AS rank "
                "FROM clearance_memories_fts JOIN clearance_memories m "
                "ON m.id = clearance_memories_fts.id "
                "WHERE clearance_memories_fts MATCH :match AND m.scope IN :scopes "
                f"AND {readable} AND {self._partition_sql()} "
                "ORDER BY rank, m.created_at DESC LIMIT :limit"
            ).bindparams(
                sa.bindparam("scopes", expanding=True), _PAIRS
            ),
            {"match": match, "scopes": sorted(scopes), "limit": limit, "fake": FAKE_PROVIDER,
             **params},
        ).all()  # fmt: skip
        # bm25() is lower-is-better; publish higher-is-better scores.
        return [record_of(r._mapping, score=-float(r.rank)) for r in rows]

    def _by_tsvector(
        self, conn: sa.Connection, words: list[str], limit: int, scopes: frozenset[str]
    ) -> list[MemoryRecord]:
        readable, params = self._readable_sql(scopes)
        rows = conn.execute(
            sa.text(
                f"SELECT {READ_COLUMNS_SQL}, "
                "ts_rank_cd(to_tsvector('english', m.content), q) AS rank "
                "FROM clearance_memories m, to_tsquery('english', :query) q "
                "WHERE to_tsvector('english', m.content) @@ q AND m.scope IN :scopes "
                f"AND {readable} AND {self._partition_sql()} "
                "ORDER BY rank DESC, m.created_at DESC LIMIT :limit"
            )
            .bindparams(sa.bindparam("scopes", expanding=True), _PAIRS)
            .columns(content=NulText()),  # read back as written (`NulText`)
            {
                "query": " | ".join(words),
                "scopes": sorted(scopes),
                "limit": limit,
                "fake": FAKE_PROVIDER,
                **params,
            },
        ).all()
        return [record_of(r._mapping, score=float(r.rank)) for r in rows]

    def _by_overlap(
        self, conn: sa.Connection, words: list[str], limit: int, scopes: frozenset[str]
    ) -> list[MemoryRecord]:
        wanted = set(words)
        rows = conn.execute(
            sa.select(*READ_COLUMNS)
            .where(self._readable(scopes), self._partition())
            .order_by(*_NEWEST_FIRST)
            .limit(MAX_SCANNED)
        ).all()
        scored = []
        for row in rows:
            found = record_of(row._mapping)
            hits = len(wanted & set(_WORD.findall(found.content.lower())))
            if hits:
                scored.append(replace(found, score=float(hits)))
        scored.sort(key=lambda r: (-(r.score or 0.0), -r.created_at.timestamp()))
        return scored[:limit]

    def _by_embedding(
        self, conn: sa.Connection, query: str, limit: int, scopes: frozenset[str]
    ) -> list[MemoryRecord]:
        assert self.embedder is not None
        (qv,) = self.embedder.embed([query])
        # Scored from the ids and embeddings alone (an over-long embedding is not loaded);
        # only the best records are read whole.
        stored = MEMORIES.c.embedding
        kept = sa.case((sa.func.length(stored) <= MAX_RECORD_CHARS, stored), else_=sa.null())
        candidates = conn.execute(
            sa.select(MEMORIES.c.id, kept.label("embedding"))
            .where(self._readable(scopes), stored.is_not(None), self._partition())
            .order_by(*_NEWEST_FIRST)
            .limit(MAX_SCANNED)
        ).all()
        scores = {r.id: _cosine(qv, _vector(r.id, r.embedding, len(qv))) for r in candidates}
        best = sorted(scores, key=lambda i: -scores[i])[:limit]  # ties: the newer first
        rows = conn.execute(sa.select(*READ_COLUMNS).where(MEMORIES.c.id.in_(best))).all()
        found = {r.id: r for r in rows}
        return [record_of(found[i]._mapping, score=scores[i]) for i in best if i in found]


def _cut(content: str, cut: bool) -> str:
    """``content`` cut to the cap (`cut_to_cap`) when ``cut``, else as it is."""
    return cut_to_cap(content) if cut else content


def _turn_text(turn: Turn) -> str:
    author = turn.author or turn.role
    return f"{author}: {turn.content}"


def _vector(memory_id: object, text: object, dimensions: int) -> list[float]:
    """A record's stored embedding, checked: a JSON list of ``dimensions`` finite numbers.

    Raises:
        MalformedRecord: It is not (edited by hand, or written by another embedder).
    """
    try:
        vector = json.loads(text) if isinstance(text, str | bytes) else None
    except (ValueError, RecursionError):
        vector = None
    if not (
        isinstance(vector, list)
        and len(vector) == dimensions
        and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in vector
        )
    ):
        raise MalformedRecord(
            f"memory record {str(memory_id)[:64]!r} is malformed: its embedding is not a "
            f"list of {dimensions} numbers (the embedder's dimensions)"
        )
    return vector


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
