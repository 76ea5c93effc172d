"""Opening a store that must already exist: ``create=False`` and ``read_only`` create nothing.

`RunLedger`, `ContextStore` and the memory store's database refuse, in one line naming the
URL, a missing SQLite file, a folder, an empty file or another program's database, and
write nothing to it; a schema newer than this version knows says to upgrade Clearance,
read-only or not.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from clearance import ConfigError, ContextStore, RunLedger, StoreError
from clearance._core.vocabulary import EventKind
from clearance._state.memory_records import MemoryDatabase, list_memories, memory_lookup


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def foreign(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
    sqlite3.connect(path).close()
    return path


OPENERS = {
    "ledger": lambda url, **kw: RunLedger(url, **kw),
    "store": lambda url, **kw: ContextStore(url, **kw),
    "memory": lambda url, **kw: MemoryDatabase(url, **kw),
}
LABELS = {"ledger": "run ledger", "store": "store", "memory": "memory store"}


@pytest.mark.parametrize("kind", sorted(OPENERS))
@pytest.mark.parametrize("how", [{"create": False}, {"read_only": True}])
def test_a_missing_file_is_refused_and_no_folder_is_made(
    tmp_path: Path, kind: str, how: dict[str, bool]
) -> None:
    url = f"sqlite:///{tmp_path / 'no' / 'x.db'}"
    with pytest.raises(StoreError) as caught:
        OPENERS[kind](url, **how)
    assert str(caught.value) == f"no {LABELS[kind]} at {url}: the file does not exist"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", sorted(OPENERS))
@pytest.mark.parametrize("how", [{"create": False}, {"read_only": True}])
def test_an_empty_or_foreign_database_is_refused_and_left_unchanged(
    tmp_path: Path, kind: str, how: dict[str, bool]
) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    other = foreign(tmp_path / "other.db")
    for path in (empty, other):
        before = digest(path)
        with pytest.raises(StoreError, match="the database has none of its tables"):
            OPENERS[kind](f"sqlite:///{path}", **how)
        assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "other.db"]


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_folder_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    url = f"sqlite:///{tmp_path}"
    with pytest.raises(StoreError) as caught:
        OPENERS[kind](url)
    assert str(caught.value) == (
        f"cannot open the {LABELS[kind]} at {url}: it is a folder, not a file"
    )


def test_without_create_an_existing_ledger_is_opened_for_writing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    RunLedger(url).close()
    with RunLedger(url, create=False) as ledger:
        ledger.start_run(run_id="run_1", team="t", goal=None, graph=[])
        assert ledger.get_run("run_1").status == "running"


def test_by_default_the_folder_and_the_database_are_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a' / 'b' / 's.db'}"
    with ContextStore(url) as store:
        store.set("ns", "k", "v", "me")
    with ContextStore(url, read_only=True) as store:
        assert store.get("ns", "k") == "v"
        with pytest.raises(StoreError, match="cannot"):
            store.set("ns", "k", "w", "me")


def test_a_newer_schema_says_upgrade_clearance_even_read_only(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    RunLedger(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, '2030-01-01 00:00:00.000000')")
    sqlite3.connect(path).close()
    for how in ({}, {"read_only": True}, {"create": False}):
        with pytest.raises(StoreError) as caught:
            RunLedger(f"sqlite:///{path}", **how)
        message = str(caught.value)
        assert "has schema version 99, newer than this version of Clearance" in message
        assert message.endswith("; upgrade Clearance") and "write access" not in message


def test_memory_audits_create_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with pytest.raises(StoreError, match="the file does not exist"):
        list_memories(url)
    with pytest.raises(StoreError, match="the file does not exist"):
        memory_lookup(url)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("namespace", "key", "field"), [("", "k", "namespace"), ("ns", "", "key")])
def test_an_empty_namespace_or_key_is_refused(
    tmp_path: Path, namespace: str, key: str, field: str
) -> None:
    with ContextStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        for write in (store.set, store.set_with_extension):
            with pytest.raises(ConfigError) as caught:
                write(namespace, key, "v", "me")
            assert (
                caught.value.field == field and str(caught.value) == f"{field}: must not be empty"
            )
        assert store.query(namespace or "ns") == []


def test_a_failed_event_write_names_the_kind_by_its_value(tmp_path: Path) -> None:
    with (
        RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger,
        pytest.raises(StoreError) as caught,
    ):
        ledger.record_event("run_missing", EventKind.FILES, "task:a", {"files": {}})
    message = str(caught.value)
    assert "record a 'files' event of run 'run_missing'" in message
    assert "EventKind" not in message
