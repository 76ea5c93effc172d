"""`clearance run` and `resume` stopped with SIGTERM stop as Ctrl-C does: recorded, resumable.

A service manager, a container runtime or a CI runner stops a process with SIGTERM, not
Ctrl-C. Python's default for it ends the process at once, without a ``finally``: the run
stayed recorded ``running`` with its tasks mid-flight, and what its MCP servers started was
left behind. Now the run stops as after Ctrl-C (tasks ``interrupted``, the run resumable,
the hint on how to resume), with exit code 143 (128 + SIGTERM).
"""

from __future__ import annotations

import signal
import sys

import pytest
from test_resume_cli import clearance, final_results, finish, reference, team_file, wait_until

from clearance import RunLedger

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def test_sigterm_stops_a_run_resumable_and_says_how_to_resume(tmp_path):
    team = team_file(tmp_path)
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    proc = clearance(
        "run", str(team), "--model", "fake:m", "--db", url, latency_s=0.3, cwd=tmp_path
    )
    try:
        wait_until(proc, db, lambda s: "completed" in s.values() and "running" in s.values())
    finally:
        proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 143, out + err
    with RunLedger(url) as ledger:
        run = ledger.list_runs(limit=1)[0]
        assert run.status == "interrupted"
        recorded = [t.status for t in ledger.tasks(run.run_id)]
    assert "interrupted" in recorded and "running" not in recorded
    hint = [line for line in err.splitlines() if "clearance resume" in line]
    assert hint == [
        f"terminated: run {run.run_id} is resumable; continue it with: "
        f"clearance resume {run.run_id} --db {url}"
    ]
    assert "Traceback" not in err

    # A resume stopped the same way is resumable again; the third one finishes the run.
    proc = clearance("resume", run.run_id, "--db", url, latency_s=0.3, cwd=tmp_path)
    try:
        wait_until(proc, db, lambda s: "running" in s.values())
    finally:
        proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 143, out + err
    assert "Traceback" not in err
    with RunLedger(url) as ledger:
        assert ledger.get_run(run.run_id).status == "interrupted"

    code, out, err = finish(clearance("resume", run.run_id, "--db", url, latency_s=0, cwd=tmp_path))
    assert code == 0, out + err
    tasks, _ = final_results(db)
    assert tasks == reference(tmp_path, team)[0]
