"""Every store entry carries a version: its count of writes, which no two writes share.

``updated_at`` cannot tell two writes within one tick of the clock apart (nor a clock that
stepped back to the same instant), so ``clearance verify --store`` took an honest read of
an entry written again within that tick for a changed value. The version is counted by the
upsert itself (``version = store_entries.version + 1``): 1 when created or written over an
expired entry, never the same for two writers racing on one key. A store made before
entries had a version gains the column (every entry at 1), and read-only it is read as it
is.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import ContextStore
from clearance._core.errors import MalformedRecord
from clearance.cli import app

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class FrozenClock:
    """A clock that only moves when told: two writes in a row share one tick."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def store(store_url: str, clock: FrozenClock) -> Iterator[ContextStore]:
    with ContextStore(store_url, clock=clock) as s:
        yield s


def _version(store: ContextStore, key: str = "k") -> int:
    entry = store.get_entry("ns", key)
    assert entry is not None
    return entry.version


def test_two_writes_within_one_tick_share_updated_at_but_not_the_version(
    store: ContextStore,
) -> None:
    store.set("ns", "k", "first", "a")
    first = store.get_entry("ns", "k")
    store.set("ns", "k", "second", "a")
    second = store.get_entry("ns", "k")
    assert first is not None and second is not None
    assert first.updated_at == second.updated_at  # the clock did not move
    assert (first.version, second.version) == (1, 2)
    assert second.to_dict()["version"] == 2


def test_every_write_counts_and_touch_does_not(store: ContextStore, clock: FrozenClock) -> None:
    store.set("ns", "k", "v", "a", ttl_s=100)
    assert _version(store) == 1
    store.set_with_extension("ns", "k", "v2", "a")
    assert _version(store) == 2
    store.set("ns", "k", "v2", "a")  # the same value written again is a write
    assert _version(store) == 3
    assert store.touch("ns", "k", ttl_s=1000) is True
    assert _version(store) == 3
    assert [e.version for e in store.query("ns")] == [3]
    assert [e.version for e in store.query_by_prefix("ns", "k")] == [3]
    assert [e.version for e in store.search(["ns"], "v2")] == [3]


def test_a_write_over_an_expired_entry_starts_again_at_one(
    store: ContextStore, clock: FrozenClock
) -> None:
    for write in (store.set, store.set_with_extension):
        store.set("ns", "k", "old", "a", ttl_s=1)
        store.set("ns", "k", "old", "a", ttl_s=1)
        clock.now += timedelta(seconds=2)
        write("ns", "k", "new", "a", 60)
        entry = store.get_entry("ns", "k")
        assert entry is not None and (entry.value, entry.version) == ("new", 1)
        assert store.delete("ns", "k") is True
    store.set("ns", "k", "again", "a")  # deleted, then created: 1
    assert _version(store) == 1


def test_writers_in_threads_with_their_own_stores_count_every_write(
    tmp_path: Path, clock: FrozenClock
) -> None:
    """Threads each on a store (and connection) of its own, all in one clock tick."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    ContextStore(url).close()
    writers, n = 4, 30
    barrier = threading.Barrier(writers)
    seen: list[list[int]] = [[] for _ in range(writers)]
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            with ContextStore(url, clock=clock) as mine:
                barrier.wait()
                for i in range(n):
                    mine.set("shared", "hot", f"w{w}:{i}", f"w{w}")
                    entry = mine.get_entry("shared", "hot")
                    assert entry is not None
                    seen[w].append(entry.version)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    with ContextStore(url) as s:
        hot = s.get_entry("shared", "hot")
        assert hot is not None and hot.version == writers * n
        assert hot.updated_at == T0  # one tick for every write: only the version tells them
    for versions in seen:  # each writer saw the count only go up
        assert versions == sorted(versions) and len(set(versions)) == n


# -- a store made before entries had a version ---------------------------------------------

_V1_TABLE = """
CREATE TABLE store_entries (
    namespace VARCHAR(255) NOT NULL, key VARCHAR(1024) NOT NULL, value TEXT NOT NULL,
    agent VARCHAR(255) NOT NULL, created_at DATETIME NOT NULL, updated_at DATETIME NOT NULL,
    expires_at DATETIME, PRIMARY KEY (namespace, key))
"""


def _old_store(path: Path, *, versioned_schema: bool = True) -> None:
    """A store as the release before versions left it (schema version 1, no ``version``).

    ``versioned_schema`` false: as a release before schema versions left it (no table of them).
    """
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(_V1_TABLE)
        if versioned_schema:
            conn.execute("CREATE TABLE store_schema_version (version INTEGER PRIMARY KEY, "
                         "applied_at DATETIME NOT NULL)")  # fmt: skip
            conn.execute("INSERT INTO store_schema_version VALUES (1, '2026-01-01 00:00:00')")
        conn.execute(
            "INSERT INTO store_entries VALUES ('ns', 'k', 'kept', 'a', "
            "'2026-01-01 00:00:00.000000', '2026-01-01 00:00:00.000000', NULL)"
        )
    conn.close()


def _columns_and_versions(path: Path) -> tuple[list[str], list[int]]:
    conn = sqlite3.connect(path)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(store_entries)")]
        versions = [r[0] for r in conn.execute("SELECT version FROM store_schema_version")]
    finally:
        conn.close()
    return columns, sorted(versions)


def test_an_old_store_is_read_read_only_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    _old_store(path)
    url = f"sqlite:///{path}"
    with ContextStore(url, read_only=True) as old:
        entry = old.get_entry("ns", "k")
        assert entry is not None and (entry.value, entry.version) == ("kept", 1)
        assert [e.version for e in old.query("ns")] == [1]
        assert [e.version for e in old.search(["ns"], "kept")] == [1]
    for args in (["get", "ns", "k"], ["query", "ns"], ["query", "ns", "--json"]):
        result = CliRunner().invoke(app, ["store", *args, "--db", url])
        assert result.exit_code == 0, result.output
        assert "kept" in result.output
    assert _columns_and_versions(path) == (
        ["namespace", "key", "value", "agent", "created_at", "updated_at", "expires_at"],
        [1],
    )  # nothing migrated


@pytest.mark.parametrize("versioned_schema", [True, False])
def test_an_old_store_gains_the_column_and_counts_on(
    tmp_path: Path, versioned_schema: bool
) -> None:
    path = tmp_path / "store.db"
    _old_store(path, versioned_schema=versioned_schema)
    with ContextStore(f"sqlite:///{path}") as store:
        entry = store.get_entry("ns", "k")
        assert entry is not None and (entry.value, entry.version) == ("kept", 1)
        store.set("ns", "k", "new", "b")
        assert _version(store) == 2
        store.set("ns", "fresh", "v", "b")
        assert _version(store, "fresh") == 1
    columns, versions = _columns_and_versions(path)
    assert columns[-1] == "version" and versions == [1, 2]
    result = CliRunner().invoke(
        app, ["store", "query", "ns", "--json", "--db", f"sqlite:///{path}"]
    )
    assert result.exit_code == 0, result.output
    assert '"key": "k"' in result.output and '"version": 2' in result.output


@pytest.mark.parametrize("held", ["'two'", "0", "-3", "1.5", "X'01'"])
def test_a_version_edited_by_hand_is_a_malformed_record(tmp_path: Path, held: str) -> None:
    path = tmp_path / "store.db"
    with ContextStore(f"sqlite:///{path}") as store:
        store.set("ns", "k", "v", "a")
        conn = sqlite3.connect(path)
        with conn:
            conn.execute(f"UPDATE store_entries SET version = {held}")
        conn.close()
        for read in (lambda: store.get_entry("ns", "k"), lambda: store.query("ns")):
            with pytest.raises(MalformedRecord, match=r"'ns/k'.* its version .* whole number"):
                read()
        assert store.get("ns", "k") == "v"  # the value alone is still what was written
