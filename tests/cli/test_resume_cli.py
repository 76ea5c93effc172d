"""A real `clearance run` killed mid-run (SIGKILL, or Ctrl-C) resumes to the same results."""

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
name: killable
agents:
  - {name: alpha, instructions: "You are Alpha."}
  - {name: beta, instructions: "You are Beta."}
messages:
  - {from: alpha, to: beta, content: "Beta, mind the edge cases."}
tasks:
"""


def team_file(folder: Path) -> Path:
    lines = [TEAM]
    for i in range(12):
        deps = [f"t{i - 1}"] if i % 4 else []
        if i >= 8:
            deps.append(f"t{i - 8}")
        assignee = "beta" if i % 2 else "alpha"
        lines.append(
            f"  - {{id: t{i}, title: Step {i}, description: Do step {i}., "
            f"assignee: {assignee}, depends_on: [{', '.join(deps)}]}}\n"
        )
    path = folder / "team.yaml"
    path.write_text("".join(lines))
    return path


# `python -m clearance` with Ctrl-C's default handler, as a terminal's foreground process has
# it: a shell without job control starts its background jobs with SIGINT ignored, and the
# child of a test run started that way would inherit the ignoring.
MAIN = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('clearance', run_name='__main__', alter_sys=True)"
)


def clearance(*args: str, latency_s: float, cwd: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, CLEARANCE_FAKE_LATENCY_S=str(latency_s))
    src = str(Path(__file__).parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", MAIN, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def statuses(db: Path) -> dict[str, str]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return dict(conn.execute("SELECT task_id, status FROM tasks").fetchall())
    except sqlite3.OperationalError:  # not created yet
        return {}


def wait_until(proc, db: Path, predicate, timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run finished before it could be interrupted"
        current = statuses(db)
        if predicate(current):
            return current
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting; last statuses {statuses(db)}")


def final_results(db: Path) -> tuple[dict[str, tuple[str, str | None]], str | None]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        run = ledger.list_runs(limit=1)[0]
        tasks = {t.task_id: (t.status, t.result) for t in ledger.tasks(run.run_id)}
        return tasks, run.synthesis


def reference(tmp_path: Path, team: Path) -> tuple[dict[str, tuple[str, str | None]], str | None]:
    db = tmp_path / "reference.db"
    code, out, err = finish(
        clearance("run", str(team), "--model", "fake:m", "--db", f"sqlite:///{db}",
                  latency_s=0, cwd=tmp_path)
    )  # fmt: skip
    assert code == 0, out + err
    return final_results(db)


def test_sigkill_mid_run_then_resume_gives_the_uninterrupted_results(tmp_path):
    team = team_file(tmp_path)
    expected_tasks, expected_synthesis = reference(tmp_path, team)
    assert all(status == "completed" for status, _ in expected_tasks.values())

    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    proc = clearance(
        "run", str(team), "--model", "fake:m", "--db", url, "--max-concurrency", "2",
        latency_s=0.25, cwd=tmp_path,
    )  # fmt: skip
    try:
        at_kill = wait_until(
            proc,
            db,
            lambda s: list(s.values()).count("completed") >= 4 and "running" in s.values(),
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    # The file of the killed run opens cleanly and holds every result committed before the kill.
    with RunLedger(url) as ledger:
        run = ledger.list_runs(limit=1)[0]
        assert run.status == "running"
        recorded = {t.task_id: t for t in ledger.tasks(run.run_id)}
        done_before = {k for k, t in recorded.items() if t.status == "completed"}
        assert done_before >= {k for k, v in at_kill.items() if v == "completed"}
        calls_before = {c.subject for c in ledger.calls(run.run_id)}
        assert {f"task:{k}" for k in done_before} <= calls_before
        count_before = len(ledger.calls(run.run_id))
        # A task killed while its request was in flight: sent again under its pending row.
        in_flight = {c.subject for c in ledger.calls(run.run_id) if c.pending}

    code, out, err = finish(clearance("resume", run.run_id, "--db", url, latency_s=0, cwd=tmp_path))
    assert code == 0, out + err
    assert f"run id: {run.run_id}  status: completed" in out
    tasks, synthesis = final_results(db)
    assert tasks == expected_tasks
    assert synthesis == expected_synthesis
    with RunLedger(url) as ledger:
        new_calls = ledger.calls(run.run_id)[count_before:]
        assert not any(c.pending for c in ledger.calls(run.run_id))
        replayed = {e.subject for e in ledger.events(run.run_id, "replayed")}
    resumed_subjects = [c.subject for c in new_calls]
    # No task that had completed was sent to the model again; every other task was sent
    # once: as a new call, or again under the row of its request left in flight; a task
    # whose answer was recorded before the kill is answered from its record (durable resume).
    assert not {f"task:{k}" for k in done_before} & set(resumed_subjects)
    assert not {f"task:{k}" for k in done_before} & replayed
    assert sorted([*resumed_subjects, *in_flight, *replayed]) == sorted(
        ["synthesis", *(f"task:{k}" for k in expected_tasks if k not in done_before)]
    )


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize(
    ("stop", "exit_code", "how"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["ctrl-c", "sigterm"],
)
def test_ctrl_c_marks_running_tasks_interrupted_and_says_how_to_resume(
    tmp_path, stop, exit_code, how
):
    # SIGTERM (a service manager, `docker stop`, a CI runner) stops a run as Ctrl-C does;
    # Python's default for it ended the process at once, the run left recorded `running`.
    team = team_file(tmp_path)
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    proc = clearance(
        "run", str(team), "--model", "fake:m", "--db", url, latency_s=0.3, cwd=tmp_path
    )
    try:
        wait_until(proc, db, lambda s: "completed" in s.values() and "running" in s.values())
    finally:
        proc.send_signal(stop)
    code, out, err = finish(proc)
    assert code == exit_code, out + err
    with RunLedger(url) as ledger:
        run = ledger.list_runs(limit=1)[0]
        assert run.status == "interrupted"
        recorded = [t.status for t in ledger.tasks(run.run_id)]
    assert "interrupted" in recorded and "running" not in recorded
    hint = [line for line in err.splitlines() if "clearance resume" in line]
    assert hint == [
        f"{how}: run {run.run_id} is resumable; continue it with: "
        f"clearance resume {run.run_id} --db {url}"
    ]
    assert "Traceback" not in err

    # A resume stopped the same way is resumable again.
    proc = clearance("resume", run.run_id, "--db", url, latency_s=0.3, cwd=tmp_path)
    try:
        wait_until(proc, db, lambda s: "running" in s.values())
    finally:
        proc.send_signal(stop)
    code, out, err = finish(proc)
    assert code == exit_code, out + err
    assert "Traceback" not in err
    with RunLedger(url) as ledger:
        assert ledger.get_run(run.run_id).status == "interrupted"

    code, out, err = finish(clearance("resume", run.run_id, "--db", url, latency_s=0, cwd=tmp_path))
    assert code == 0, out + err
    tasks, _ = final_results(db)
    assert tasks == reference(tmp_path, team)[0]


def test_resume_refuses_a_run_that_is_still_running(tmp_path):
    team = team_file(tmp_path)
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    proc = clearance(
        "run", str(team), "--model", "fake:m", "--db", url, "--max-concurrency", "1",
        latency_s=0.5, cwd=tmp_path,
    )  # fmt: skip
    try:
        wait_until(proc, db, lambda s: "running" in s.values())
        with RunLedger(url) as ledger:
            run_id = ledger.list_runs(limit=1)[0].run_id
        code, out, err = finish(clearance("resume", run_id, "--db", url, latency_s=0, cwd=tmp_path))
        assert code == 2
        assert f"still running in process {proc.pid} on this host" in out + err
        assert len((out + err).strip().splitlines()) == 1
        assert proc.poll() is None  # the live run went on
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    # Killed: the same command now resumes it.
    code, out, err = finish(clearance("resume", run_id, "--db", url, latency_s=0, cwd=tmp_path))
    assert code == 0, out + err
    assert f"run id: {run_id}  status: completed" in out
