"""Case 4: `ContextStore` set / get / query_by_prefix throughput against raw ``sqlite3``.

Each side runs in a fresh process (so peak RSS is its own; the raw side never imports
SQLAlchemy or Clearance): ``python -m bench.store '{"side": "store", ...}'`` prints one JSON
line. ``python -m bench.store '{"side": "verify"}'`` checks that both sides send SQLite the
same statements, byte for byte, with the same parameters and transaction pattern, and the
same pragmas; `bench.run` refuses to report a ratio when they differ.

The raw side is what a careful hand-written ``sqlite3`` store with the same API would do:
one connection with the store's pragmas (WAL, ``synchronous=NORMAL``, busy timeout, foreign
keys) and SQLAlchemy's own table and indexes; ``BEGIN IMMEDIATE`` … ``COMMIT`` around each
write and each read a lone ``SELECT`` in autocommit; the store's SQL text with the same
parameters (aware UTC timestamps stored as naive-UTC text, TTL filter on every read); rows
turned back into frozen entries with aware datetimes. Only the connection pool,
SQLAlchemy's statement construction and execution machinery, and its result processing
are absent.
"""

from __future__ import annotations

import gc
import json
import platform
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

BUSY_TIMEOUT_MS = 10_000  # clearance._state.db.BUSY_TIMEOUT_MS (checked by "verify")
PRAGMAS = (
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
)
# The DDL SQLAlchemy emits for the store's table (so both sides query the same schema).
DDL = (
    "CREATE TABLE IF NOT EXISTS store_entries (\n\tnamespace VARCHAR(255) NOT NULL, \n"
    '\t"key" VARCHAR(1024) NOT NULL, \n\tvalue TEXT NOT NULL, \n\tagent VARCHAR(255) NOT NULL, \n'
    "\tcreated_at DATETIME NOT NULL, \n\tupdated_at DATETIME NOT NULL, \n"
    '\texpires_at DATETIME, \n\tPRIMARY KEY (namespace, "key")\n)',
    "CREATE INDEX IF NOT EXISTS ix_store_entries_expires_at ON store_entries (expires_at)",
    "CREATE INDEX IF NOT EXISTS ix_store_entries_namespace ON store_entries (namespace)",
    # The store's schema-version table (written when a store opens; not timed).
    "CREATE TABLE IF NOT EXISTS store_schema_version (\n\tversion INTEGER NOT NULL, \n"
    "\tapplied_at DATETIME NOT NULL, \n\tPRIMARY KEY (version)\n)",
)
# The statements ContextStore sends SQLite (its compiled SQL; "verify" compares them).
UPSERT = (
    'INSERT INTO store_entries (namespace, "key", value, agent, created_at, updated_at, '
    'expires_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, "key") DO UPDATE SET '
    "value = excluded.value, agent = excluded.agent, created_at = CASE WHEN "
    "(store_entries.expires_at IS NOT NULL AND store_entries.expires_at <= excluded.updated_at) "
    "THEN "
    "excluded.created_at ELSE store_entries.created_at END, updated_at = excluded.updated_at, "
    "expires_at = excluded.expires_at"
)
_COLUMNS = (
    'SELECT store_entries.namespace, store_entries."key", store_entries.value, '
    "store_entries.agent, store_entries.created_at, store_entries.updated_at, "
    "store_entries.expires_at \nFROM store_entries \n"
)
_LIVE = "(store_entries.expires_at IS NULL OR store_entries.expires_at > ?)"
GET = (
    "SELECT store_entries.value \nFROM store_entries \nWHERE store_entries.namespace = ? AND "
    f'store_entries."key" = ? AND {_LIVE}'
)
BY_PREFIX = (
    f'{_COLUMNS}WHERE store_entries.namespace = ? AND store_entries."key" LIKE ? '
    "ESCAPE '\\' AND substr(store_entries.\"key\", ?, ?) = ? AND "
    f'{_LIVE} ORDER BY store_entries.updated_at DESC, store_entries."key"\n LIMIT ? OFFSET ?'
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    """What the raw side returns per row: the shape of `clearance.StoreEntry`."""

    namespace: str
    key: str
    value: str
    agent: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None


def _db_time(value: datetime | None) -> str | None:
    """An aware datetime as SQLAlchemy's SQLite DATETIME text (naive UTC, microseconds)."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


def _py_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value).replace(tzinfo=UTC)


def _escape_like(text: str, escape: str = "\\") -> str:
    return "".join(escape + ch if ch in ("%", "_", escape) else ch for ch in text)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class RawStore:
    """``sqlite3`` doing what `ContextStore.set`, ``get`` and ``query_by_prefix`` do."""

    def __init__(self, path: str, clock: Callable[[], datetime] = _utc_now) -> None:
        self._clock = clock
        self._conn = sqlite3.connect(path, isolation_level=None)
        for pragma in PRAGMAS:
            self._conn.execute(pragma)
        self._conn.execute("BEGIN IMMEDIATE")
        for ddl in DDL:
            self._conn.execute(ddl)
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(sql, params)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _read(self, sql: str, params: tuple[Any, ...], one: bool) -> list[Any]:
        # One SELECT in autocommit: a consistent snapshot without BEGIN … ROLLBACK.
        cur = self._conn.execute(sql, params)
        rows = [cur.fetchone()] if one else cur.fetchall()
        cur.close()
        return [r for r in rows if r is not None]

    @staticmethod
    def _entry(row: Any) -> Entry:
        namespace, key, value, agent, created_at, updated_at, expires_at = row
        return Entry(namespace=namespace, key=key, value=value, agent=agent,
                     created_at=datetime.fromisoformat(created_at).replace(tzinfo=UTC),
                     updated_at=datetime.fromisoformat(updated_at).replace(tzinfo=UTC),
                     expires_at=_py_time(expires_at))  # fmt: skip

    def set(
        self, namespace: str, key: str, value: str, agent: str, ttl_s: float | None = None
    ) -> None:
        if ttl_s is not None and not ttl_s > 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s!r}")
        if not isinstance(value, str):
            raise TypeError("a store value must be text")
        now = self._clock()
        expires = None if ttl_s is None else now + timedelta(seconds=ttl_s)
        at = _db_time(now)
        self._write(UPSERT, (namespace, key, value, agent, at, at, _db_time(expires)))

    def get(self, namespace: str, key: str) -> str | None:
        rows = self._read(GET, (namespace, key, _db_time(self._clock())), one=True)
        return rows[0][0] if rows else None

    def query_by_prefix(self, namespace: str, prefix: str, limit: int = 20) -> list[Entry]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        params = (namespace, _escape_like(prefix) + "%", 1, len(prefix), prefix,
                  _db_time(self._clock()), limit, 0)  # fmt: skip
        return [self._entry(r) for r in self._read(BY_PREFIX, params, one=False)]


class _Store(Protocol):
    def set(
        self, namespace: str, key: str, value: str, agent: str, ttl_s: float | None = None
    ) -> None: ...
    def get(self, namespace: str, key: str) -> str | None: ...
    def query_by_prefix(self, namespace: str, prefix: str, limit: int = 20) -> list[Any]: ...
    def close(self) -> None: ...


def _open(side: str, path: Path, clock: Callable[[], datetime] = _utc_now) -> _Store:
    if side == "raw":
        return RawStore(str(path), clock)
    from clearance import ContextStore

    return ContextStore(f"sqlite:///{path}", clock=clock)


KEYS = 2000
"""Keys written, then read, per measured run (one `set` and one `get` call each)."""
GROUP = 20
"""Keys per prefix: each ``query_by_prefix`` call returns this many entries (its limit)."""


def workload(keys: int) -> tuple[list[tuple[str, str, float | None]], list[str]]:
    """``keys`` (key, value, ttl) triples (every other one with a TTL) and the prefixes."""
    items = [(f"doc/{i // GROUP:04d}/{i:06d}", f"note {i}: " + "lorem ipsum " * 16,
              3600.0 if i % 2 else None) for i in range(keys)]  # fmt: skip
    prefixes = [f"doc/{j:04d}/" for j in range(keys // GROUP)]
    return items, prefixes


def run_side(side: str, keys: int, repeats: int, warmup: int) -> dict[str, Any]:
    items, prefixes = workload(keys)
    times: dict[str, list[float]] = {"set": [], "get": [], "query_by_prefix": []}
    with tempfile.TemporaryDirectory(prefix="clearance-bench-store-") as tmp:
        for i in range(warmup + repeats):
            store = _open(side, Path(tmp) / f"{side}-{i}.db")
            try:
                gc.collect()
                t0 = time.perf_counter()
                for key, value, ttl in items:
                    store.set("bench", key, value, "agent", ttl_s=ttl)
                t1 = time.perf_counter()
                for key, value, _ in items:
                    if store.get("bench", key) != value:
                        raise SystemExit(f"{side}: wrong value for {key}")
                t2 = time.perf_counter()
                for prefix in prefixes:
                    if len(store.query_by_prefix("bench", prefix, limit=GROUP)) != GROUP:
                        raise SystemExit(f"{side}: wrong result for prefix {prefix}")
                t3 = time.perf_counter()
            finally:
                store.close()
            if i >= warmup:
                times["set"].append(t1 - t0)
                times["get"].append(t2 - t1)
                times["query_by_prefix"].append(t3 - t2)
    return {
        "side": side,
        "keys": keys,
        "prefixes": len(prefixes),
        "rows_per_prefix": GROUP,
        "repeats": repeats,
        "warmup": warmup,
        "ops": {"set": keys, "get": keys, "query_by_prefix": len(prefixes)},
        "times_s": times,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy_loaded": "sqlalchemy" in sys.modules,
    }


TARGET = 0.5
"""Issue 7's target: store throughput at least half of raw sqlite3, on every operation."""


def combine(runs: dict[str, list[dict[str, Any]]], check: dict[str, Any]) -> dict[str, Any]:
    """One result from alternating runs of both sides (one measured repeat each, or more).

    Per operation: median ops/s of each side with its range, the ratio of the medians, and
    the range of the per-round ratios (round i of the store over round i of raw).
    """
    first = runs["store"][0]
    sides: dict[str, Any] = {}
    for side, rs in runs.items():
        times = {op: [t for r in rs for t in r["times_s"][op]] for op in first["ops"]}
        sides[side] = {"times_s": times, "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
                       "sqlalchemy_loaded": any(r["sqlalchemy_loaded"] for r in rs)}  # fmt: skip
    summary: dict[str, Any] = {}
    for op, n in first["ops"].items():
        rate = {side: [n / t for t in sides[side]["times_s"][op]] for side in sides}
        paired = [s / r for s, r in zip(rate["store"], rate["raw"], strict=True)]
        med = {side: statistics.median(v) for side, v in rate.items()}
        summary[op] = {
            "calls": n,
            "store_ops_s": med["store"],
            "store_range": [min(rate["store"]), max(rate["store"])],
            "raw_ops_s": med["raw"],
            "raw_range": [min(rate["raw"]), max(rate["raw"])],
            "ratio": med["store"] / med["raw"],
            "ratio_range": [min(paired), max(paired)],
        }
    same = bool(check.get("same_sql"))
    return {
        "skipped": False,
        "keys": first["keys"],
        "prefixes": first["prefixes"],
        "rows_per_prefix": first["rows_per_prefix"],
        "sqlite": first["sqlite"],
        "same_sql": same,
        "verify": check,
        "sides": sides,
        "summary": summary,
        "target": TARGET,
        "target_met": same and all(row["ratio"] >= TARGET for row in summary.values()),
    }


def _traced(side: str, path: Path) -> tuple[list[str], dict[str, Any]]:
    """The SQL one set, get and query_by_prefix send SQLite (expanded), and the pragmas."""
    fixed = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    store = _open(side, path, clock=lambda: fixed)
    statements: list[str] = []
    conn: Any
    if isinstance(store, RawStore):
        conn = store._conn
        conn.set_trace_callback(statements.append)
    else:
        # The connection this thread holds for every operation below.
        conn = store._held.connection().connection.dbapi_connection  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
    try:
        store.set("ns", "a_b%", "v1", "agent", ttl_s=60)
        store.set("ns", "a_b%", "v2", "agent")
        store.get("ns", "a_b%")
        store.query_by_prefix("ns", "a_b", limit=5)
        conn.set_trace_callback(None)
        names = ("busy_timeout", "journal_mode", "synchronous", "foreign_keys")
        pragmas = {p: conn.execute(f"PRAGMA {p}").fetchone()[0] for p in names}
        schema = conn.execute(
            "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
    finally:
        store.close()
    return statements, {"pragmas": pragmas, "schema": [list(r) for r in schema]}


def verify() -> dict[str, Any]:
    """Whether both sides send SQLite identical statements, pragmas and schema."""
    with tempfile.TemporaryDirectory(prefix="clearance-bench-store-") as tmp:
        store_sql, store_db = _traced("store", Path(tmp) / "store.db")
        raw_sql, raw_db = _traced("raw", Path(tmp) / "raw.db")
    same = store_sql == raw_sql and store_db == raw_db
    out: dict[str, Any] = {"same_sql": same, "statements": store_sql, **store_db}
    if not same:
        out["raw_statements"], out["raw_db"] = raw_sql, raw_db
    return out


def main() -> None:
    case: dict[str, Any] = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"side": "verify"}
    if case["side"] == "verify":
        print(json.dumps(verify()))
        return
    result = run_side(case["side"], case.get("keys", KEYS), case.get("repeats", 5),
                      case.get("warmup", 1))  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
