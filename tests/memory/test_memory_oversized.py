"""A memory record too long for any prompt is refused, never read whole.

The store refuses to record more than `MAX_RECORD_CHARS` characters; a longer record found
in the database (inserted by hand, here 50 MB) is a `MalformedRecord` naming it and the cap
on every read (recall, recent, lookup by id, ``clearance memory``), and its text is never
loaded: the read stays far below 50 MB of memory and takes well under a second or two.
"""

from __future__ import annotations

import sqlite3
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import Agent, Task
from clearance._core.errors import MalformedRecord, StoreError
from clearance._core.memory_spec import AgentMemory
from clearance._orchestration.run_memory import RunMemory
from clearance._state.memory import PersistentMemory, list_memories
from clearance._state.memory_records import MAX_RECORD_CHARS, memory_lookup
from clearance._state.null_ledger import NullLedger
from clearance.cli import app

HUGE = 50 * 1024 * 1024
REFUSED = (
    f"memory record 'mem_huge' is malformed: its content is {HUGE + 7:,} characters, "
    f"over the {MAX_RECORD_CHARS:,} a record may hold"
)


def with_huge_record(tmp_path: Path) -> str:
    """A store of ``alice`` with one fact, and a 50 MB fact inserted by hand (indexed too)."""
    path = tmp_path / "memory.db"
    url = f"sqlite:///{path}"
    memory = PersistentMemory(url, agent="alice", provider="openai")
    memory.record("the launch code is blue")
    memory.close()
    content = "launch " + "x" * HUGE
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO clearance_memories (id, scope, author, kind, content, created_at, "
            "provider) VALUES ('mem_huge', 'agent:alice', 'alice', 'fact', ?, "
            "'2030-01-01 00:00:00.000000', 'openai')",
            (content,),
        )
        conn.execute(
            "INSERT INTO clearance_memories_fts (id, content) VALUES ('mem_huge', ?)", (content,)
        )
    return url


def test_every_read_refuses_the_huge_record_without_loading_it(tmp_path):
    url = with_huge_record(tmp_path)
    memory = PersistentMemory(url, agent="alice", provider="openai")
    try:
        for read in (
            lambda: memory.retrieve("launch code"),
            lambda: memory.recent(5),
            lambda: memory.get("mem_huge"),
            lambda: memory_lookup(url)("mem_huge"),
            lambda: list_memories(url),
        ):
            tracemalloc.start()
            started = time.monotonic()
            try:
                with pytest.raises(MalformedRecord) as caught:
                    read()
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert time.monotonic() - started < 3
            assert peak < 8 * 1024 * 1024  # not the 50 MB record
            assert str(caught.value) == REFUSED
    finally:
        memory.close()


def test_a_short_record_beside_it_is_still_read(tmp_path):
    url = with_huge_record(tmp_path)
    with sqlite3.connect(tmp_path / "memory.db") as conn:
        (short_id,) = conn.execute(
            "SELECT id FROM clearance_memories WHERE id != 'mem_huge'"
        ).fetchone()
    memory = PersistentMemory(url, agent="alice", provider="openai")
    try:
        found = memory.get(short_id)
        assert found is not None and found.content == "the launch code is blue"
    finally:
        memory.close()


async def test_a_run_recalls_nothing_of_it_and_goes_on_or_fails_in_one_line(tmp_path):
    url = with_huge_record(tmp_path)
    agent = Agent(name="alice", instructions="You are Alice.", memory=AgentMemory(recall=3))
    task = Task(id="t1", title="launch code", description="What is the code?", assignee="alice")
    for on_error in ("continue", "fail"):
        memory = RunMemory(url, on_error=on_error)
        try:
            recall = memory.recall(
                run_id="run_1", task=task, agent=agent, model_id="openai:gpt",
                groups={}, ledger=NullLedger(),
            )  # fmt: skip
            if on_error == "fail":
                with pytest.raises(StoreError) as caught:
                    await recall
                assert "mem_huge" in str(caught.value) and "\n" not in str(caught.value)
            else:
                assert await recall == ()
        finally:
            memory.close()


def test_clearance_memory_refuses_it_in_one_line(tmp_path):
    result = CliRunner().invoke(app, ["memory", "--memory", with_huge_record(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: {REFUSED}"


def test_recording_more_than_a_record_may_hold_is_refused_and_stores_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    memory = PersistentMemory(url, agent="alice")
    try:
        with pytest.raises(StoreError) as caught:
            memory.record(["a short fact", "y" * (MAX_RECORD_CHARS + 1)])
        assert str(caught.value) == (
            f"memory record 2 of 2 is {MAX_RECORD_CHARS + 1:,} characters, over the "
            f"{MAX_RECORD_CHARS:,} a record may hold: nothing recorded"
        )
        assert memory.recent(10) == []
        (kept,) = memory.record("z" * MAX_RECORD_CHARS)  # the cap itself is kept whole
        assert memory.get(kept.id) == kept
    finally:
        memory.close()
