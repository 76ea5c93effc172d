"""The write-ahead log of a ledger is cut back once a reader that held it open lets go.

While a reader holds a snapshot (``clearance serve``, a long ``verify``), SQLite cannot
checkpoint past it and the log grows; afterwards the log is reused at that size, and the
file kept it on disk for as long as a connection was open. ``journal_size_limit``
(`WAL_SIZE_LIMIT_BYTES`) cuts it back at the next reset.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from clearance import RunLedger
from clearance._core.vocabulary import EventKind
from clearance._state.db import sqlite as sqlite_pragmas

LIMIT = 1 << 20
ITEMS = {"items": [{"ref": f"r{j}", "title": "t" * 60, "sha256": "0" * 64} for j in range(1000)]}
"""An event of about 150 KB."""


def test_the_log_shrinks_to_its_limit_after_a_reader_let_it_grow(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sqlite_pragmas, "WAL_SIZE_LIMIT_BYTES", LIMIT)
    db = tmp_path / "runs.db"
    wal = Path(f"{db}-wal")
    with RunLedger(f"sqlite:///{db}") as ledger:
        ledger.start_run(run_id="run_wal", team="t", goal=None, graph=None)
        ledger.flush()
        reader = sqlite3.connect(db)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM runs").fetchone()  # holds its snapshot
        for i in range(40):  # about 6 MB of records while the snapshot is held
            ledger.record_event("run_wal", EventKind.HOOK_CONTEXT, f"task:{i}", ITEMS)
            ledger.flush()
        grown = os.path.getsize(wal)
        assert grown > 4 * LIMIT
        reader.rollback()
        reader.close()
        for _ in range(3):  # a checkpoint can now empty the log; the next commit resets it
            ledger._checkpoint_wal()
            ledger.record_event("run_wal", EventKind.HOOK_CONTEXT, "task:last", {"items": []})
            ledger.flush()
        assert os.path.getsize(wal) <= LIMIT + 64 * 1024, (grown, os.path.getsize(wal))
        assert len(ledger.events("run_wal")) == 43  # every record kept
