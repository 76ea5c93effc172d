"""What left the process is on record (a call in flight at SIGKILL), and one run, one owner."""

import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from clearance.cli import app

sys.path.insert(0, str(Path(__file__).parent))
from test_resume_cli import clearance, finish, team_file


def pending_calls(db: Path) -> list[tuple[str, int]]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT subject, pending FROM calls WHERE pending = 1").fetchall()
    except sqlite3.OperationalError:
        return []


def test_a_call_in_flight_at_sigkill_is_on_record_as_sent(tmp_path):
    team, db = team_file(tmp_path), tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    proc = clearance("run", str(team), "--model", "fake:m", "--db", url, latency_s=30, cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not pending_calls(db):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no request was recorded"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # the fake model takes 30 s: the calls are in flight
    proc.communicate()
    in_flight = pending_calls(db)
    assert in_flight and all(subject.startswith("task:") for subject, _ in in_flight)
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("SELECT run_id FROM runs").fetchone()
    shown = CliRunner().invoke(app, ["inspect", run_id, "--db", url, "--no-prompt"])
    assert shown.exit_code == 0, shown.output
    assert "sent, no outcome recorded" in shown.output
    checked = CliRunner().invoke(app, ["verify", run_id, "--db", url])
    assert checked.exit_code == 0, checked.output  # a pending call is a faithful record
    # A run left running is verified as far as it is recorded, and the line says so; its
    # process was killed, which the line says too (`process_gone`, as `clearance runs`).
    (line,) = checked.output.strip().splitlines()
    assert "verified" in line and line.endswith(
        "; the run is recorded as running (process gone): it stopped before it ended, so what "
        "it recorded is what was checked; verify it again if it is resumed"
    ), line


def test_two_resumes_at_once_one_is_refused_naming_the_owner(tmp_path):
    team, db = team_file(tmp_path), tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    first = clearance(
        "run", str(team), "--model", "fake:m", "--db", url, latency_s=30, cwd=tmp_path
    )
    deadline = time.monotonic() + 30
    while not pending_calls(db):
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("SELECT run_id FROM runs").fetchone()
    resumes = [
        clearance("resume", run_id, "--db", url, latency_s=1, cwd=tmp_path) for _ in range(2)
    ]
    results = [finish(p, timeout=120) for p in resumes]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    _, out, err = next(r for r in results if r[0] == 2)
    lines = [line for line in (out + err).splitlines() if line.strip()]
    # Refused by the lease (the race) or by the recorded process check (after it): one line,
    # naming the owning process.
    assert len(lines) == 1, lines
    assert run_id in lines[0] and (
        "is being run by process" in lines[0] or "is still running in process" in lines[0]
    ), lines
    with sqlite3.connect(db) as conn:
        calls = conn.execute(
            "SELECT subject, COUNT(*) FROM calls WHERE error IS NULL AND pending = 0 "
            "GROUP BY subject HAVING COUNT(*) > 1"
        ).fetchall()
    assert calls == [], "a task was answered twice"
