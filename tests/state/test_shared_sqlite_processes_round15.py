"""Several processes on one SQLite ledger file: one holding the write lock beyond the busy
timeout costs a run one wait for the lock, not one wait per queued write."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import clearance._state.db.sqlite as sqlite_module
from clearance import RunLedger, verify_run
from clearance._core.errors import StoreError
from clearance._core.vocabulary import EventKind

LIMIT = {"limit": "max_steps", "value": 3, "maximum": 2, "error": "too many steps"}
SRC = Path(__file__).resolve().parents[2] / "src"

# Another process takes the file's write lock (an open write transaction) and keeps it.
HOLDER = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    """
)


def hold_write_lock(db: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for holder in started:
        stop(holder)


def stop(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait(timeout=10)
    assert holder.stdout is not None
    holder.stdout.close()


def test_queued_writes_meeting_a_held_lock_fail_after_one_wait_not_one_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holders: list[subprocess.Popen[str]]
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 300)  # read as connections open
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        ledger.start_run(run_id="run_a", team="t", goal=None, graph=[])
        holders.append(hold_write_lock(db, 60))
        started = time.monotonic()
        with ledger.write_behind():
            for i in range(30):
                ledger.record_event("run_a", EventKind.LIMIT_EXCEEDED, f"task:t{i}", LIMIT)
            with pytest.raises(StoreError) as raised:
                ledger.flush()
        elapsed = time.monotonic() - started
        # Each write alone waiting the timeout again took 30 x 0.3 s; now at most two waits
        # (the writer may have taken the first write alone before the others were queued).
        assert elapsed < 3.0, elapsed
        message = str(raised.value)
        assert f"run ledger at sqlite:///{db}" in message
        assert "database is locked" in message
        assert "\n" not in message
        stop(holders.pop())  # the lock is free again: the ledger writes and verifies
        ledger.record_event("run_a", EventKind.LIMIT_EXCEEDED, "task:after", LIMIT)
        assert [e.subject for e in ledger.events("run_a")] == ["task:after"]
        assert verify_run(ledger, "run_a").ok


TEAM = "name: shared\nagents:\n  - {name: alpha, instructions: You are Alpha.}\ntasks:\n" + "".join(
    f"  - {{id: t{i}, title: Step {i}, description: Do step {i}., assignee: alpha}}\n"
    for i in range(30)
)


def test_a_run_refuses_within_two_lock_timeouts_while_another_process_holds_the_file(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    db = tmp_path / "runs.db"
    RunLedger(f"sqlite:///{db}").close()
    holders.append(hold_write_lock(db, 90))
    env = dict(os.environ, CLEARANCE_FAKE_LATENCY_S="0.05", PYTHONPATH=str(SRC))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "clearance", "run", str(team), "--model", "fake:m",
         "--max-concurrency", "8", "--db", f"sqlite:///{db}"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=45,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert f"run ledger at sqlite:///{db}" in errors[0]
    assert errors[0].endswith("database is locked")
    # One busy timeout for the writes, at most one more to record the run as interrupted
    # (before: one per queued write, until the other process let go, 90 s here).
    limit_s = 2 * sqlite_module.BUSY_TIMEOUT_MS / 1000 + 15
    assert elapsed < limit_s, elapsed
