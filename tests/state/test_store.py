"""The same ContextStore suite against SQLite (a WAL file) and a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from clearance import AccessDenied, ConfigError, ContextStore, StoreError


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[ContextStore]:
    with ContextStore(store_url, clock=clock) as s:
        yield s


def test_sqlite_file_uses_wal(tmp_path: Path) -> None:
    with ContextStore(f"sqlite:///{tmp_path / 'sub' / 's.db'}") as s:
        s.set("ns", "k", "v", "a")
    engine = create_engine(f"sqlite:///{tmp_path / 'sub' / 's.db'}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    engine.dispose()


def test_set_get_upsert_keeps_created_at(store: ContextStore, clock: FakeClock) -> None:
    assert store.get("ns", "k") is None
    store.set("ns", "k", "one", "alice")
    created = clock.now
    clock.advance(10)
    store.set("ns", "k", "two", "bob")
    entry = store.get_entry("ns", "k")
    assert entry is not None
    assert (entry.value, entry.agent) == ("two", "bob")
    assert entry.created_at == created
    assert entry.updated_at == clock.now
    assert entry.updated_at.tzinfo is not None
    assert entry.expires_at is None
    assert len(store.query("ns")) == 1


def test_ttl_filtered_on_read_not_deleted(store: ContextStore, clock: FakeClock) -> None:
    store.set("ns", "short", "x", "a", ttl_s=60)
    store.set("ns", "forever", "y", "a")
    clock.advance(59)
    assert store.get("ns", "short") == "x"
    clock.advance(1)
    assert store.get("ns", "short") is None
    assert [e.key for e in store.query("ns")] == ["forever"]
    assert store.query_by_prefix("ns", "sh") == []
    # Still there until cleanup, which counts what it removed.
    assert store.cleanup() == 1
    assert store.cleanup() == 0
    assert store.get("ns", "forever") == "y"


def test_cleanup_counts_only_expired(store: ContextStore, clock: FakeClock) -> None:
    for i in range(5):
        store.set("ns", f"k{i}", "v", "a", ttl_s=10 * (i + 1))
    store.set("other", "k", "v", "a", ttl_s=5)
    clock.advance(25)
    assert store.cleanup() == 3  # k0, k1 and other/k
    assert sorted(e.key for e in store.query("ns")) == ["k2", "k3", "k4"]


def test_set_over_an_expired_entry_restarts_it(store: ContextStore, clock: FakeClock) -> None:
    store.set("ns", "k", "old", "a", ttl_s=1)
    clock.advance(5)
    store.set("ns", "k", "new", "b")
    entry = store.get_entry("ns", "k")
    assert entry is not None and entry.value == "new" and entry.created_at == clock.now


def test_expiring_exactly_now_counts_as_expired(store: ContextStore, clock: FakeClock) -> None:
    store.set("ns", "k", "old", "a", ttl_s=10)
    first = clock.now
    clock.advance(9)
    store.set("ns", "k", "kept", "a", ttl_s=1)  # live: created_at is kept
    entry = store.get_entry("ns", "k")
    assert entry is not None and entry.created_at == first
    clock.advance(1)  # expires_at == now: gone for reads, and for the next write
    assert store.get("ns", "k") is None
    assert store.get_entry("ns", "k") is None
    store.set("ns", "k", "new", "b")
    entry = store.get_entry("ns", "k")
    assert entry is not None and entry.created_at == clock.now == entry.updated_at


class TickingClock(FakeClock):
    """Moves one millisecond forward on every reading."""

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def test_expiry_counts_from_the_time_written(store_url: str) -> None:
    clock = TickingClock()
    with ContextStore(store_url, clock=clock) as s:
        s.set("ns", "k", "v", "a", ttl_s=30)
        s.set_with_extension("ns", "k2", "v", "a", ttl_s=60)
        for key, ttl in (("k", 30), ("k2", 60)):
            entry = s.get_entry("ns", key)
            assert entry is not None
            assert entry.created_at == entry.updated_at
            assert entry.expires_at == entry.updated_at + timedelta(seconds=ttl)


def test_get_agrees_with_get_entry(store: ContextStore, clock: FakeClock) -> None:
    store.set("ns", "live", "a", "x")
    store.set("ns", "short", "b", "x", ttl_s=5)
    store.set("other", "live", "c", "x")
    clock.advance(5)
    for ns, key in [("ns", "live"), ("ns", "short"), ("ns", "absent"), ("other", "live")]:
        entry = store.get_entry(ns, key)
        assert store.get(ns, key) == (entry.value if entry is not None else None)
    assert store.get("ns", "live") == "a" and store.get("ns", "short") is None


def test_stores_on_two_files_keep_apart(tmp_path: Path) -> None:
    # Statements are built once and shared; each store still writes only its own database.
    with (
        ContextStore(f"sqlite:///{tmp_path / 'a.db'}") as a,
        ContextStore(f"sqlite:///{tmp_path / 'b.db'}") as b,
    ):
        a.set("ns", "k", "in a", "x")
        b.set("ns", "k", "in b", "x")
        assert (a.get("ns", "k"), b.get("ns", "k")) == ("in a", "in b")
        assert [e.value for e in a.query_by_prefix("ns", "k")] == ["in a"]
        assert b.delete("ns", "k") and a.get("ns", "k") == "in a"


def test_set_with_extension_and_touch(store: ContextStore, clock: FakeClock) -> None:
    store.set_with_extension("ns", "k", "v", "a")
    entry = store.get_entry("ns", "k")
    assert entry is not None and entry.expires_at == clock.now + timedelta(days=90)
    # Expiry only moves forward: a shorter extension keeps the later expiry.
    store.set_with_extension("ns", "k", "v2", "a", ttl_s=100)
    entry = store.get_entry("ns", "k")
    assert entry is not None and entry.value == "v2"
    assert entry.expires_at == clock.now + timedelta(days=90)
    store.set("ns", "k", "v2", "a", ttl_s=100)  # a plain write sets the expiry it is given
    entry = store.get_entry("ns", "k")
    assert entry is not None and entry.expires_at == clock.now + timedelta(seconds=100)

    clock.advance(90)
    assert store.touch("ns", "k", ttl_s=100) is True
    entry = store.get_entry("ns", "k")
    assert entry is not None
    assert entry.value == "v2" and entry.expires_at == clock.now + timedelta(seconds=100)
    assert entry.updated_at == clock.now - timedelta(seconds=90)  # not rewritten
    # Expiry never moves backwards.
    assert store.touch("ns", "k", ttl_s=1) is True
    assert store.get_entry("ns", "k").expires_at == clock.now + timedelta(seconds=100)  # type: ignore[union-attr]
    # Used knowledge survives, unused knowledge ages out.
    clock.advance(99)
    assert store.touch("ns", "k") is True  # default: 90 days
    clock.advance(24 * 3600)
    assert store.get("ns", "k") == "v2"
    assert store.touch("ns", "absent") is False
    store.set("ns", "gone", "x", "a", ttl_s=1)
    clock.advance(2)
    assert store.touch("ns", "gone") is False  # not revived
    assert store.get("ns", "gone") is None
    # An entry without expiry keeps none.
    store.set("ns", "forever", "x", "a")
    assert store.touch("ns", "forever") is True
    assert store.get_entry("ns", "forever").expires_at is None  # type: ignore[union-attr]


def test_set_with_extension_never_pulls_expiry_earlier(
    store: ContextStore, clock: FakeClock
) -> None:
    year = timedelta(days=365)
    store.set("ns", "long", "v", "a", ttl_s=year.total_seconds())
    store.set_with_extension("ns", "long", "v2", "a")  # default 90 days
    entry = store.get_entry("ns", "long")
    assert entry is not None and entry.value == "v2" and entry.expires_at == clock.now + year
    assert store.touch("ns", "long", ttl_s=10) is True
    assert store.get_entry("ns", "long").expires_at == clock.now + year  # type: ignore[union-attr]
    # A never-expiring entry gains no expiry.
    store.set("ns", "forever", "x", "a")
    store.set_with_extension("ns", "forever", "y", "a", ttl_s=5)
    entry = store.get_entry("ns", "forever")
    assert entry is not None and entry.value == "y" and entry.expires_at is None
    # A later expiry is taken; an expired entry restarts as new.
    store.set("ns", "short", "x", "a", ttl_s=10)
    store.set_with_extension("ns", "short", "x", "a", ttl_s=1000)
    assert store.get_entry("ns", "short").expires_at == clock.now + timedelta(seconds=1000)  # type: ignore[union-attr]
    store.set("ns", "old", "x", "a", ttl_s=1)
    clock.advance(5)
    store.set_with_extension("ns", "old", "new", "a", ttl_s=50)
    entry = store.get_entry("ns", "old")
    assert entry is not None and entry.expires_at == clock.now + timedelta(seconds=50)
    assert entry.created_at == clock.now


def test_query_order_and_limit(store: ContextStore, clock: FakeClock) -> None:
    for i in range(15):
        store.set("ns", f"k{i:02d}", str(i), "a")
        clock.advance(1)
    store.set("ns", "k03", "again", "a")
    keys = [e.key for e in store.query("ns")]
    assert len(keys) == 10
    assert keys[:3] == ["k03", "k14", "k13"]
    assert len(store.query("ns", limit=100)) == 15
    with pytest.raises(ConfigError):
        store.query("ns", limit=0)


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("100%", ["100%", "100%_done"]),
        ("a_b", ["a_b", "a_b\\c"]),
        ("a\\", ["a\\b"]),
        ("a_b\\", ["a_b\\c"]),
        ("x/", ["x/%y"]),
        ("A", ["ABC"]),
        ("", ["100%", "1000", "100%_done", "ABC", "a\\b", "a_b", "a_b\\c", "aXb", "abc", "x/%y"]),
    ],
)
def test_prefix_matches_literally(store: ContextStore, prefix: str, expected: list[str]) -> None:
    for key in ["100%", "1000", "100%_done", "a_b", "aXb", "a_b\\c", "a\\b", "abc", "ABC", "x/%y"]:
        store.set("ns", key, "v", "a")
    store.set("ns2", "100%", "other namespace", "a")
    found = sorted(e.key for e in store.query_by_prefix("ns", prefix, limit=50))
    assert found == sorted(expected)


def test_structured_reads(store: ContextStore) -> None:
    store.set("ns", "doc", json.dumps({"a": [1, 2], "b": None}), "a")
    assert store.get_structured("ns", "doc") == {"a": [1, 2], "b": None}
    assert store.get_structured("ns", "absent") is None
    store.set("ns", "bad", "{not json", "a")
    with pytest.raises(StoreError, match=r"ns/bad .*not valid JSON"):
        store.get_structured("ns", "bad")


def test_sql_metacharacters_in_keys_and_values(store: ContextStore) -> None:
    nasty = [
        "'; DROP TABLE store_entries; --",
        'a"b',
        "x' OR '1'='1",
        "semi;colon",
        "unicodé ✓ \u2028",
        "back\\slash",
        "%_%",
    ]
    for i, key in enumerate(nasty):
        store.set("ns'; --", key, key + "|" + str(i), "agent'\"")
    for i, key in enumerate(nasty):
        assert store.get("ns'; --", key) == key + "|" + str(i)
    assert len(store.query("ns'; --", limit=50)) == len(nasty)
    assert store.get("ns'; --", "x") is None
    assert store.delete("ns'; --", nasty[0]) is True
    assert store.delete("ns'; --", nasty[0]) is False


def test_bad_arguments(store: ContextStore) -> None:
    with pytest.raises(ConfigError, match="ttl_s"):
        store.set("ns", "k", "v", "a", ttl_s=0)
    with pytest.raises(ConfigError, match="text"):
        store.set("ns", "k", {"a": 1}, "a")  # type: ignore[arg-type]


def test_closed_store_and_bad_url(tmp_path: Path) -> None:
    s = ContextStore(f"sqlite:///{tmp_path / 's.db'}")
    s.close()
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.get("ns", "k")
    with pytest.raises(StoreError, match=r"unsupported|cannot open"):
        ContextStore("mysql://u:secret@localhost/db")


_WRITER = """
import sys
from clearance import ContextStore
url, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with ContextStore(url) as s:
    for i in range(n):
        s.set("shared", "hot", f"{who}:{i}", who)
        s.set("own", f"{who}:{i}", "x", who)
print("ok")
"""


def test_concurrent_writers_from_several_processes(store_url: str) -> None:
    ContextStore(store_url).close()  # create the table before the race
    writers, n = 4, 25
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, store_url, f"w{w}", str(n)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.strip() == "ok"
    with ContextStore(store_url) as s:
        hot = s.query("shared", limit=10)
        assert len(hot) == 1  # one row, whoever won
        assert hot[0].value.endswith(f":{n - 1}")  # the winner's last write
        # Each write added one to the version the one before it left: none lost to a race.
        assert hot[0].version == writers * n
        assert hot[0].value.split(":")[0] == hot[0].agent
        assert len(s.query("own", limit=1000)) == writers * n  # no lost row
        # And the last write, made now, wins.
        marker = uuid.uuid4().hex
        s.set("shared", "hot", marker, "main")
        assert s.get("shared", "hot") == marker


# -- grants ----------------------------------------------------------------------------


def test_view_default_deny(store: ContextStore) -> None:
    store.set("secret", "k", "v", "admin")
    view = store.view("alice", {})
    with pytest.raises(AccessDenied) as info:
        view.get("secret", "k")
    assert (info.value.agent, info.value.operation) == ("alice", "read")
    assert "secret" in info.value.resource and "alice" in str(info.value)
    with pytest.raises(AccessDenied) as info:
        view.set("secret", "k", "v2")
    assert info.value.operation == "write"
    assert store.get("secret", "k") == "v"


def test_view_levels_and_prefixes(store: ContextStore) -> None:
    view = store.view("alice", {"notes": "read", "team/*": "read_write", "log": "write"})
    view.set("team/a", "k", "v")
    assert store.get_entry("team/a", "k").agent == "alice"  # type: ignore[union-attr]
    assert view.get("team/a", "k") == "v"
    assert [e.key for e in view.query_by_prefix("team/a", "")] == ["k"]
    assert view.get("notes", "k") is None
    with pytest.raises(AccessDenied, match="write"):
        view.set("notes", "k", "v")
    view.set("log", "k", "v")
    with pytest.raises(AccessDenied, match="read"):
        view.get("log", "k")
    with pytest.raises(AccessDenied):
        view.get("team", "k")  # 'team/*' does not cover 'team'
    with pytest.raises(AccessDenied):
        view.get("notes2", "k")  # exact grants are exact
    with pytest.raises(AccessDenied):
        view.delete("notes", "k")
    with pytest.raises(AccessDenied):
        view.touch("notes", "k")


def test_bad_grants(store: ContextStore) -> None:
    with pytest.raises(ConfigError, match=r"store_grants\.notes"):
        store.view("a", {"notes": "admin"})
    with pytest.raises(ConfigError, match="prefix"):
        store.view("a", {"a*b": "read"})


# -- schema versions ----------------------------------------------------------------------


def _store_versions(path: Path) -> list[int]:
    import sqlite3

    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("SELECT version FROM store_schema_version ORDER BY 1")
        return [v for (v,) in rows]
    finally:
        connection.close()


def test_a_new_store_records_its_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with ContextStore(f"sqlite:///{path}"):
        pass
    assert _store_versions(path) == [1, 2]
    with ContextStore(f"sqlite:///{path}"):  # opening again applies nothing
        pass
    assert _store_versions(path) == [1, 2]


def test_a_store_made_before_versioning_opens_with_its_entries(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "store.db"
    with ContextStore(f"sqlite:///{path}") as store:
        store.set("ns", "k", "kept", agent="a")
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("DROP TABLE store_schema_version")  # as an older Clearance left it
    connection.close()
    with ContextStore(f"sqlite:///{path}") as store:
        assert store.get("ns", "k") == "kept"
    assert _store_versions(path) == [1, 2]


def test_a_newer_store_schema_is_refused(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "store.db"
    with ContextStore(f"sqlite:///{path}"):
        pass
    connection = sqlite3.connect(path)
    with connection:
        connection.execute(
            "INSERT INTO store_schema_version (version, applied_at) VALUES (3, '2030-01-01')"
        )
    connection.close()
    with pytest.raises(StoreError, match=r"store at .* has schema version 3, newer than"):
        ContextStore(f"sqlite:///{path}")


def test_a_store_and_a_run_ledger_share_one_database(tmp_path: Path) -> None:
    from clearance import RunLedger

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with RunLedger(url) as ledger, ContextStore(url) as store:
        store.set("ns", "k", "v", agent="a")
        ledger.start_run(run_id="run_1", team="t", goal=None, graph=None)
        assert store.get("ns", "k") == "v"
        assert ledger.get_run("run_1").team == "t"
    with RunLedger(url), ContextStore(url):  # each finds its own version table
        pass


def test_stores_opened_at_once_on_a_new_database_all_open(store_url: str) -> None:
    import threading

    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def open_store() -> None:
        barrier.wait()
        try:
            with ContextStore(store_url) as opened:
                opened.set("ns", f"k{threading.get_ident()}", "v", agent="a")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with ContextStore(store_url) as store:
        assert len(store.query_by_prefix("ns", "k", limit=100)) == 6


# -- connections and transactions --------------------------------------------------------


def test_sqlite_times_are_written_and_read_as_before(tmp_path: Path) -> None:
    """On SQLite, `UTCDateTime` converts in one call, as its decorator chain would."""
    from sqlalchemy import DateTime
    from sqlalchemy.dialects import sqlite

    from clearance._state.db import UTCDateTime

    dialect = sqlite.dialect()
    decorator = UTCDateTime()
    fast = decorator.dialect_impl(dialect)
    fast_bind, fast_read = fast.bind_processor(dialect), fast.result_processor(dialect, None)
    plain = DateTime(timezone=True).dialect_impl(dialect)  # SQLAlchemy's own DATETIME text
    plain_bind, plain_read = plain.bind_processor(dialect), plain.result_processor(dialect, None)
    assert plain_bind and plain_read

    def slow_bind(value):
        return plain_bind(decorator.process_bind_param(value, dialect))

    def slow_read(text_):
        return decorator.process_result_value(plain_read(text_), dialect)

    assert fast_bind and fast_read
    plus2 = timezone(timedelta(hours=2))
    for value in (
        datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=plus2),
        datetime(999, 3, 4, 5, 6, 7, 8),  # naive: taken as UTC
        None,
    ):
        text_ = fast_bind(value)
        assert text_ == slow_bind(value)
        assert fast_read(text_) == slow_read(text_)
    for stored in ("2026-01-01 12:00:00", "2030-01-01", "2026-01-01 12:00:00+02:00"):
        assert fast_read(stored) == slow_read(stored)
        assert fast_read(stored).tzinfo is UTC


def _traced(store: ContextStore) -> list[str]:
    statements: list[str] = []
    assert store._held is not None
    store._held.connection().connection.dbapi_connection.set_trace_callback(statements.append)
    return statements


def test_sqlite_reads_send_no_begin_and_writes_begin_immediate(
    tmp_path: Path, clock: FakeClock
) -> None:
    with ContextStore(f"sqlite:///{tmp_path / 's.db'}", clock=clock) as store:
        sent = _traced(store)
        store.set("ns", "k", "v", "a")
        assert store.get("ns", "k") == "v"
        assert [e.key for e in store.query_by_prefix("ns", "k")] == ["k"]
        assert store.delete("ns", "k") is True
    kinds = [s.split()[0] for s in sent]
    assert kinds == ["BEGIN", "INSERT", "COMMIT", "SELECT", "SELECT", "BEGIN", "DELETE", "COMMIT"]
    assert sent[0] == sent[5] == "BEGIN IMMEDIATE"


def test_driver_statements_send_what_sqlalchemy_would(tmp_path: Path, clock: FakeClock) -> None:
    """`set` and `get` on an SQLite file skip SQLAlchemy's execution, not its SQL: the
    statements and parameters SQLite receives are the ones SQLAlchemy's execution sends."""
    from clearance._state.store.schema import statements as _statements

    url = f"sqlite:///{tmp_path / 's.db'}"
    with ContextStore(url, clock=clock) as store:
        fast = _traced(store)
        store.set("ns", "a_b%", "v1", "agent", ttl_s=60)
        store.set("ns", "a_b%", "v2", "agent")
        assert store.get("ns", "a_b%") == "v2"
        assert store.get("ns", "missing") is None
    engine = create_engine(url)
    sql = _statements("sqlite")
    slow: list[str] = []
    now = clock()
    with engine.connect() as conn:
        conn.connection.dbapi_connection.set_trace_callback(slow.append)  # type: ignore[union-attr]
        for ttl_s, value in ((60, "v1"), (None, "v2")):
            expires = None if ttl_s is None else now + timedelta(seconds=ttl_s)
            conn.execute(sql.upsert, {"namespace": "ns", "key": "a_b%", "value": value,
                                      "agent": "agent", "created_at": now, "updated_at": now,
                                      "expires_at": expires})  # fmt: skip
        for key in ("a_b%", "missing"):
            conn.execute(sql.get_value, {"ns": "ns", "k": key, "now": now})
        conn.rollback()
    engine.dispose()
    statements = [s for s in fast if s.split()[0] in ("INSERT", "SELECT")]
    assert statements == [s for s in slow if s.split()[0] in ("INSERT", "SELECT")]
    assert len(statements) == 4
    assert "'2026-01-01 12:01:00.000000'" in statements[0]  # the expiry, bind-processed


def test_a_driver_statement_binds_like_sqlalchemy() -> None:
    from sqlalchemy import Integer, bindparam, literal, select
    from sqlalchemy.dialects import postgresql, sqlite

    from clearance._state.db import DriverStatement, UTCDateTime

    when = datetime(2026, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    stmt = select(
        literal(7, Integer) + bindparam("x", type_=Integer), bindparam("t", type_=UTCDateTime)
    )
    driver = DriverStatement(stmt, sqlite.dialect())
    assert driver.sql.count("?") == 3
    # The literal keeps the value it was bound with; the time is converted to naive UTC text.
    assert driver.parameters({"x": 2, "t": when}) == (7, 2, "2026-01-01 12:00:00.000000")
    assert driver.parameters({"x": 2, "t": None}) == (7, 2, None)
    with pytest.raises(ValueError, match="not positional"):
        DriverStatement(stmt, postgresql.psycopg.dialect())
    expanding = select(literal(1)).where(literal(1).in_(bindparam("xs", expanding=True)))
    with pytest.raises(ValueError, match="rendered at execution time"):
        DriverStatement(expanding, sqlite.dialect())


def test_each_thread_holds_one_connection_until_close(tmp_path: Path) -> None:
    import threading

    store = ContextStore(f"sqlite:///{tmp_path / 's.db'}")
    assert store._held is not None
    threads = 20  # more than the pool's size and overflow: none may wait for another
    barrier = threading.Barrier(threads)
    connections: dict[int, object] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            store.set("ns", f"k{i}", str(i), "a")
            assert store._held is not None
            first = store._held.connection()
            barrier.wait(timeout=30)  # every thread holds its connection at once
            assert store.get("ns", f"k{(i + 1) % threads}") == str((i + 1) % threads)
            assert store._held.connection() is first  # the same one for every operation
            connections[i] = first
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []
    assert len({id(c) for c in connections.values()}) == threads
    store.close()
    assert all(c.closed for c in connections.values())  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="closed"):
        store.get("ns", "k0")


def test_an_ended_threads_connection_is_returned(tmp_path: Path) -> None:
    import threading

    with ContextStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert store._held is not None
        held = store._held
        seen: list[object] = []

        def use() -> None:
            store.set("ns", "k", "v", "a")
            seen.append(held.connection())

        first = threading.Thread(target=use)
        first.start()
        first.join()
        assert not seen[0].closed  # type: ignore[attr-defined]
        second = threading.Thread(target=use)
        second.start()
        second.join()
        assert seen[0].closed  # type: ignore[attr-defined]
        assert not seen[1].closed  # type: ignore[attr-defined]
        assert store.get("ns", "k") == "v"


def test_reads_in_another_thread_see_this_threads_writes(store: ContextStore) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        for i in range(5):
            store.set("ns", "k", f"v{i}", "a")
            assert pool.submit(store.get, "ns", "k").result() == f"v{i}"
            pool.submit(store.set, "ns", "k", f"w{i}", "b").result()
            assert store.get("ns", "k") == f"w{i}"


_SET_ONE = """
import sys
from clearance import ContextStore
with ContextStore(sys.argv[1]) as s:
    s.set("ns", "k", sys.argv[2], "other")
"""


def test_a_read_sees_a_write_from_another_process(store_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with ContextStore(store_url) as store:
        store.set("ns", "k", "mine", "a")
        assert store.get("ns", "k") == "mine"
        for value in ("theirs", "theirs again"):
            subprocess.run(
                [sys.executable, "-c", _SET_ONE, store_url, value], env=env, check=True, timeout=120
            )
            assert store.get("ns", "k") == value
            assert store.get_entry("ns", "k").agent == "other"  # type: ignore[union-attr]


def test_a_failed_write_gives_up_the_connection_and_the_next_works(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with ContextStore(url) as store:
        assert store._held is not None
        store.set("ns", "k", "v", "a")
        before = store._held.connection()
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE store_entries RENAME TO moved"))
        with pytest.raises(StoreError, match=r"cannot write ns/k2 in the store at .*no such table"):
            store.set("ns", "k2", "v", "a")
        with pytest.raises(StoreError, match=r"cannot read ns/k from the store at .*no such table"):
            store.get("ns", "k")
        assert before.closed  # type: ignore[attr-defined]
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE moved RENAME TO store_entries"))
        engine.dispose()
        store.set("ns", "k2", "v2", "a")
        assert store.get("ns", "k2") == "v2"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    import warnings

    with ContextStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert store._held is not None
        store.set("ns", "k", "parent", "a")
        parents = store._held.connection()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
            pid = os.fork()
        if pid == 0:  # the child: exit code 0 only if everything holds
            code = 1
            try:
                assert store._held.connection() is not parents
                assert store.get("ns", "k") == "parent"
                store.set("ns", "k", "child", "b")
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store._held.connection() is parents
        assert store.get("ns", "k") == "child"
        store.set("ns", "k", "parent again", "a")
        assert store.get("ns", "k") == "parent again"


def test_switching_to_wal_is_retried_while_the_database_is_locked() -> None:
    # Connections opening a new database at once may get "database is locked" at once from
    # the switch to WAL (not after the busy timeout): the switch is retried.
    import sqlite3

    from clearance._state.db.sqlite import enable_wal as _enable_wal

    class Cursor:
        def __init__(self, failures: list[BaseException]) -> None:
            self.failures = failures
            self.calls = 0

        def execute(self, sql: str) -> None:
            assert sql == "PRAGMA journal_mode = WAL"
            self.calls += 1
            if self.failures:
                raise self.failures.pop(0)

    locked = Cursor([sqlite3.OperationalError("database is locked")] * 2)
    _enable_wal(locked)
    assert locked.calls == 3

    broken = Cursor([sqlite3.OperationalError("disk I/O error")])
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        _enable_wal(broken)
    assert broken.calls == 1
