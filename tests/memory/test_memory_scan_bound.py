"""A search ranked in Python (by embedding) scores only the newest `MAX_SCANNED` records.

Full-text search ranks in the database's index; an embedding search scores each candidate
in Python, so it reads the ids and embeddings of at most `MAX_SCANNED` records (the newest
of the scopes it reads) and loads only the best ones whole. An embedding inserted by hand
too long for any embedder is refused without being loaded.
"""

from __future__ import annotations

import sqlite3
import time
import tracemalloc

import pytest

from clearance._core.errors import MalformedRecord
from clearance._state import memory as memory_module
from clearance._state.memory import PersistentMemory


class AxisEmbedder:
    """A text mentioning ``north`` points north, anything else east."""

    dimensions = 2

    def embed(self, texts):
        return [[1.0, 0.0] if "north" in t else [0.0, 1.0] for t in texts]


def test_only_the_newest_records_are_scored_and_only_the_best_are_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_module, "MAX_SCANNED", 5)
    memory = PersistentMemory(f"sqlite:///{tmp_path / 'm.db'}", agent="alice",
                              embedder=AxisEmbedder())  # fmt: skip
    loaded: list[int] = []
    real = memory_module.record_of

    def counted(row, **kw):
        loaded.append(1)
        return real(row, **kw)

    monkeypatch.setattr(memory_module, "record_of", counted)
    try:
        memory.record("the oldest note: north")  # outside the newest five
        for n in range(8):
            memory.record(f"note {n}: east" if n != 6 else "note 6: north")
        found = memory.retrieve("north", limit=2)
        assert [r.content for r in found] == ["note 6: north", "note 7: east"]
        assert found[0].score == pytest.approx(1.0) and found[1].score == pytest.approx(0.0)
        assert len(loaded) == 2  # the two returned, not the five scored
    finally:
        memory.close()


def test_a_huge_hand_inserted_embedding_is_refused_without_being_loaded(tmp_path):
    path = tmp_path / "m.db"
    memory = PersistentMemory(f"sqlite:///{path}", agent="alice", embedder=AxisEmbedder())
    try:
        memory.record("a north note")
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE clearance_memories SET embedding = ?", ("[" + "0," * 20_000_000 + "1]",)
            )
        tracemalloc.start()
        started = time.perf_counter()
        try:
            with pytest.raises(MalformedRecord, match="embedding is not a list of 2 numbers"):
                memory.retrieve("north")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 8 * 1024 * 1024
        assert time.perf_counter() - started < 5
    finally:
        memory.close()
