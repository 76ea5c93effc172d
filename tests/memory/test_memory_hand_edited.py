"""A memory database edited by hand is refused in one line, never a traceback or a pass.

SQLite holds any value in any column: a record's kind, time, text or embedding may be
something the store never writes. Reading it (recall, ``clearance memory``, a run's
``on_error``) is a `MalformedRecord` naming the record, and every number from outside (how
many records to recall or list) is checked. A query's words are matched once each, so a
message repeating a word costs linear time, not quadratic.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import Agent, ConfigError, Task
from clearance._core.errors import MalformedRecord, StoreError
from clearance._core.memory_spec import AgentMemory
from clearance._orchestration.run_memory import RunMemory
from clearance._state.memory import PersistentMemory, list_memories
from clearance._state.null_ledger import NullLedger
from clearance.cli import app
from cpu_time import cpu_timer

EDITS = {
    "kind": "UPDATE clearance_memories SET kind = 'bogus'",
    "created_at text": "UPDATE clearance_memories SET created_at = 'not a time'",
    "created_at number": "UPDATE clearance_memories SET created_at = 12345",
    "content blob": "UPDATE clearance_memories SET content = x'00ff41'",
    "author blob": "UPDATE clearance_memories SET author = x'01'",
    "provider blob": "UPDATE clearance_memories SET provider = x'02'",
}


def edited(tmp_path: Path, edit: str) -> str:
    """A memory store of agent ``alice`` holding one fact, then edited with ``edit``."""
    path = tmp_path / "memory.db"
    url = f"sqlite:///{path}"
    memory = PersistentMemory(url, agent="alice", provider="openai")
    memory.record("the launch code is blue")
    memory.close()
    with sqlite3.connect(path) as conn:
        conn.execute(edit)
    return url


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_an_agent_reading_a_hand_edited_record_gets_one_malformed_record_error(tmp_path, edit):
    memory = PersistentMemory(edited(tmp_path, edit), agent="alice", provider="openai")
    try:
        for read in (
            lambda: memory.retrieve("launch code"),
            lambda: memory.recent(5),
            lambda: list_memories(memory.url),
        ):
            with pytest.raises(MalformedRecord, match="malformed") as caught:
                read()
            assert "\n" not in str(caught.value)
    finally:
        memory.close()


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_clearance_memory_refuses_a_hand_edited_record_in_one_line(tmp_path, edit):
    url = edited(tmp_path, edit)
    result = CliRunner().invoke(app, ["memory", "--memory", url])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "malformed" in lines[0]


async def test_a_run_on_error_continue_goes_on_past_a_hand_edited_record(tmp_path):
    url = edited(tmp_path, EDITS["kind"])
    agent = Agent(name="alice", instructions="You are Alice.", memory=AgentMemory(recall=3))
    task = Task(id="t1", title="launch code", description="What is the code?", assignee="alice")
    for on_error, raises in (("continue", False), ("fail", True)):
        memory = RunMemory(url, on_error=on_error)
        try:
            recall = memory.recall(
                run_id="run_1", task=task, agent=agent, model_id="openai:gpt",
                groups={}, ledger=NullLedger(),
            )  # fmt: skip
            if raises:
                with pytest.raises(StoreError, match="malformed"):
                    await recall
            else:
                assert await recall == ()
        finally:
            memory.close()


class Embedder:
    dimensions = 3

    def embed(self, texts):
        return [[1.0, 0.0, 0.0] for _ in texts]


@pytest.mark.parametrize(
    "embedding", ["{not json", "[1, 2]", '["a", "b", "c"]', "[1e999, 0, 0]", "7"]
)
def test_a_hand_edited_embedding_is_a_malformed_record(tmp_path, embedding):
    path = tmp_path / "memory.db"
    url = f"sqlite:///{path}"
    memory = PersistentMemory(url, agent="alice", embedder=Embedder())
    try:
        memory.record("the launch code is blue")
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE clearance_memories SET embedding = ?", (embedding,))
        with pytest.raises(MalformedRecord, match="embedding"):
            memory.retrieve("launch")
    finally:
        memory.close()


@pytest.mark.parametrize("limit", [-1, True, 2.5, 10**30, "5"])
def test_how_many_records_to_read_is_a_checked_count(tmp_path, limit):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    memory = PersistentMemory(url, agent="alice")
    try:
        memory.record(["one fact", "another fact"])
        with pytest.raises(ConfigError, match="limit"):
            memory.retrieve("fact", limit=limit)
        with pytest.raises(ConfigError, match="limit"):
            memory.recent(limit)
        with pytest.raises(ConfigError, match="limit"):
            list_memories(url, limit=limit)
    finally:
        memory.close()


def test_a_query_repeating_one_word_is_matched_in_linear_time(tmp_path):
    memory = PersistentMemory(f"sqlite:///{tmp_path / 'memory.db'}", agent="alice")
    try:
        memory.record(["the launch code is blue", "lunch is at noon"])
        with cpu_timer() as cpu:
            found = memory.retrieve("launch " * 60_000)
    finally:
        memory.close()
    assert [r.content for r in found] == ["the launch code is blue"]
    assert cpu.seconds < 1.5, f"{cpu.seconds:.2f} s of CPU for one repeated word"
