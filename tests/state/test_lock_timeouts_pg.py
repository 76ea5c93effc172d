"""On PostgreSQL, a ledger or memory write waits for another session's lock only so long.

The store had a ``lock_timeout``; the ledger and memory waited forever for a lock another
session held (a stuck migration, an administrator's ``LOCK TABLE``, a crashed client's open
transaction), as an SQLite writer never does (its busy timeout). Each test shortens the
deadline to half a second, holds a lock from another session, and checks that the write
fails in time with the database named, then succeeds once the lock is gone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text

from clearance import ClearanceError, RunLedger
from clearance._orchestration import run_memory
from clearance._orchestration.run_memory import RunMemory
from clearance._state.db.engine import DatabaseBase
from clearance._state.memory import PersistentMemory
from clearance._state.memory_records import MemoryDatabase

pytestmark = pytest.mark.network


@contextmanager
def table_locked(url: str, table: str) -> Iterator[None]:
    """Another session holds ``table`` in EXCLUSIVE mode (reads go on, writes wait)."""
    engine = create_engine(url)
    holder = engine.connect()
    transaction = holder.begin()
    try:
        holder.execute(text(f"LOCK TABLE {table} IN EXCLUSIVE MODE"))
        yield
    finally:
        transaction.rollback()  # lets a writer that waits with no deadline go on
        holder.close()
        engine.dispose()


def fails_in_time(write: Callable[[], object]) -> BaseException:
    """Run ``write`` in a thread; it must fail within 10 s. Its error."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            write()
        except BaseException as exc:
            failures.append(exc)

    writer = threading.Thread(target=run, daemon=True)
    writer.start()
    writer.join(10)
    assert not writer.is_alive(), "the write waited for the lock with no deadline"
    assert len(failures) == 1, "the write went through a table another session locked"
    return failures[0]


def test_every_database_waits_for_a_lock_as_long_as_sqlite_does():
    from clearance._state.db import BUSY_TIMEOUT_MS

    assert DatabaseBase._LOCK_TIMEOUT_MS == BUSY_TIMEOUT_MS
    assert RunLedger._LOCK_TIMEOUT_MS == MemoryDatabase._LOCK_TIMEOUT_MS == BUSY_TIMEOUT_MS


def test_a_ledger_write_waits_for_a_lock_only_so_long(postgres_url, monkeypatch):
    monkeypatch.setattr(RunLedger, "_LOCK_TIMEOUT_MS", 500)
    with RunLedger(postgres_url) as ledger:
        ledger.start_run(run_id="run_lock_1", team="t", goal=None, graph=None, config={})
        ledger.flush()
        with table_locked(postgres_url, "runs"):

            def write() -> None:
                ledger.start_run(run_id="run_lock_2", team="t", goal=None, graph=None, config={})
                ledger.flush()

            error = fails_in_time(write)
        assert isinstance(error, ClearanceError), repr(error)
        assert "lock timeout" in str(error) or "lock_timeout" in str(error), str(error)


def test_a_memory_write_waits_for_a_lock_only_so_long(postgres_url, monkeypatch):
    monkeypatch.setattr(MemoryDatabase, "_LOCK_TIMEOUT_MS", 500)
    memory = PersistentMemory(postgres_url, agent="locked")
    try:
        memory.record("before the lock")
        with table_locked(postgres_url, "clearance_memories"):
            error = fails_in_time(lambda: memory.record("during the lock"))
        assert "lock timeout" in str(error), str(error)
        memory.record("after the lock")
        assert {r.content for r in memory.recent(5)} >= {"before the lock", "after the lock"}
    finally:
        memory.close()


def test_a_runs_memory_write_waits_for_a_lock_only_so_long(postgres_url, monkeypatch):
    # A run's memories share one engine, opened by `RunMemory`: it sets the deadline too.
    monkeypatch.setattr(run_memory, "BUSY_TIMEOUT_MS", 500)
    memories = RunMemory(postgres_url)
    try:
        memory = memories.memory_of("locked_run", {}, model_id="test:model")
        memory.record("before the lock")
        with table_locked(postgres_url, "clearance_memories"):
            error = fails_in_time(lambda: memory.record("during the lock"))
        assert "lock timeout" in str(error), str(error)
    finally:
        memories.close()
