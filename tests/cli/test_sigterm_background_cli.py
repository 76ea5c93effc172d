"""SIGTERM stops a run started with SIGINT ignored, as a script's background job is.

A shell without job control (a script, a CI step: ``clearance run team.yaml & ... kill $!``)
starts its background jobs with SIGINT ignored. SIGTERM must still stop the run cleanly:
exit 143, the run recorded ``interrupted`` and resumable, then resumed to completion.
"""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clearance import RunLedger

TEAM = """\
name: background
agents:
  - {name: alpha, instructions: "You are Alpha."}
tasks:
  - {id: t0, title: Step 0, description: Do step 0., assignee: alpha}
  - {id: t1, title: Step 1, description: Do step 1., assignee: alpha, depends_on: [t0]}
  - {id: t2, title: Step 2, description: Do step 2., assignee: alpha, depends_on: [t1]}
  - {id: t3, title: Step 3, description: Do step 3., assignee: alpha, depends_on: [t2]}
"""


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def clearance(*args: str, cwd: Path, latency_s: float) -> subprocess.Popen[str]:
    env = dict(os.environ, CLEARANCE_FAKE_LATENCY_S=str(latency_s))
    src = str(Path(__file__).parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "clearance", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore_sigint,
    )


def statuses(db: Path) -> dict[str, str]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return dict(conn.execute("SELECT task_id, status FROM tasks").fetchall())
    except sqlite3.OperationalError:  # not created yet
        return {}


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_stops_a_run_whose_sigint_is_ignored(tmp_path) -> None:
    (tmp_path / "team.yaml").write_text(TEAM)
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    proc = clearance("run", "team.yaml", "--model", "fake:m", "--db", url, cwd=tmp_path,
                     latency_s=1)  # fmt: skip
    deadline = time.monotonic() + 30
    while statuses(db).get("t0") != "completed":
        assert proc.poll() is None and time.monotonic() < deadline, "t0 never completed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, out + err
    assert time.monotonic() - stopped < 2.5  # not after the remaining tasks ran
    with RunLedger(url) as ledger:
        run = ledger.list_runs(limit=1)[0]
        assert run.status == "interrupted"
        kept = {t.task_id: t.result for t in ledger.tasks(run.run_id) if t.status == "completed"}
    assert "t0" in kept and "t3" not in kept
    assert f"terminated: run {run.run_id} is resumable" in err

    resumed = clearance("resume", run.run_id, "--db", url, cwd=tmp_path, latency_s=0)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, out + err
    with RunLedger(url) as ledger:
        assert ledger.get_run(run.run_id).status == "completed"
        after = {t.task_id: t.result for t in ledger.tasks(run.run_id)}
    assert {k: after[k] for k in kept} == kept
