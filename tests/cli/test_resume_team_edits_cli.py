"""`clearance resume --team` with a team file edited after the run was stopped.

A resumed run runs as recorded: an edit of a task (added, removed, its description or its
dependencies changed) or of an agent (added, its instructions or limits changed) would have
no effect, so resume refuses it with one line naming what changed (exit 2), and the ledger
is left as the killed run left it. The unedited file resumes.
"""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

TEAM = """\
name: editable
agents:
  - {name: alpha, instructions: "You are Alpha."}
  - {name: beta, instructions: "You are Beta."}
tasks:
  - {id: t0, title: Step 0, description: Do step 0., assignee: alpha}
  - {id: t1, title: Step 1, description: Do step 1., assignee: beta, depends_on: [t0]}
  - {id: t2, title: Step 2, description: Do step 2., assignee: alpha, depends_on: [t1]}
  - {id: t3, title: Step 3, description: Do step 3., assignee: beta, depends_on: [t2]}
"""


def clearance(*args: str, cwd: Path, latency_s: float = 0) -> subprocess.Popen[str]:
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
    )


def rows(db: Path) -> tuple[list[tuple[str, str, str | None]], int, str]:
    """The tasks (id, status, result), the number of calls and the run's status."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        tasks = conn.execute("SELECT task_id, status, result FROM tasks ORDER BY task_id")
        calls = conn.execute("SELECT count(*) FROM calls").fetchone()[0]
        status = conn.execute("SELECT status FROM runs").fetchone()[0]
        return tasks.fetchall(), calls, status


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> tuple[Path, str]:
    """A ledger of a run SIGKILLed once t0 completed, and the run's id."""
    folder = tmp_path_factory.mktemp("killed")
    (folder / "team.yaml").write_text(TEAM)
    db = folder / "runs.db"
    proc = clearance(
        "run", "team.yaml", "--model", "fake:m", "--db", f"sqlite:///{db}",
        cwd=folder, latency_s=0.5,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run finished before it could be killed"
        try:
            if ("t0", "completed") in [(t, s) for t, s, _ in rows(db)[0]]:
                break
        except (sqlite3.OperationalError, TypeError):
            pass  # not created yet
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    with sqlite3.connect(db) as conn:
        return db, conn.execute("SELECT run_id FROM runs").fetchone()[0]


BETA = '  - {name: beta, instructions: "You are Beta."}\n'
GAMMA = '  - {name: gamma, instructions: "You are Gamma."}\n'
T3 = "  - {id: t3, title: Step 3, description: Do step 3., assignee: beta, depends_on: [t2]}\n"
T9 = "  - {id: t9, title: New, description: New., assignee: alpha}\n"
EDITS = {
    "description": (("Do step 2.", "Do step TWO."), "tasks.t2.description"),
    "dependency": (("depends_on: [t1]}", "depends_on: []}"), "tasks.t2.depends_on"),
    "task added": ((T3, T3 + T9), "tasks.t9"),
    "task removed": ((T3, ""), "tasks.t3"),
    "instructions": (("You are Alpha.", "You are Evil."), "agents.alpha.instructions"),
    "limits": (("{name: beta,", "{name: beta, limits: {retries: 1},"), "agents.beta.limits"),
    "agent added": ((BETA, BETA + GAMMA), "agents.gamma"),
}


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_team_file_is_refused_naming_the_change(killed, tmp_path, edit) -> None:
    db = tmp_path / "runs.db"
    shutil.copy(killed[0], db)
    (old, new), field = EDITS[edit]
    assert old in TEAM
    (tmp_path / "team.yaml").write_text(TEAM.replace(old, new))
    before = rows(db)
    started = time.monotonic()
    proc = clearance("resume", killed[1], "--team", "team.yaml", "--db", f"sqlite:///{db}",
                     cwd=tmp_path)  # fmt: skip
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 10
    assert proc.returncode == 2, out + err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {field}: "), err
    assert "start a new run" in err
    assert rows(db) == before  # nothing ran, nothing was lost


def test_the_unedited_team_file_resumes_to_completion(killed, tmp_path) -> None:
    db = tmp_path / "runs.db"
    shutil.copy(killed[0], db)
    (tmp_path / "team.yaml").write_text(TEAM)
    kept = {t: r for t, s, r in rows(db)[0] if s == "completed"}
    proc = clearance("resume", killed[1], "--team", "team.yaml", "--db", f"sqlite:///{db}",
                     cwd=tmp_path)  # fmt: skip
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    tasks, _, status = rows(db)
    assert status == "completed"
    assert {t: r for t, _, r in tasks if t in kept} == kept  # kept byte for byte
    verify = clearance("verify", killed[1], "--db", f"sqlite:///{db}", cwd=tmp_path)
    assert verify.communicate(timeout=60)[0] and verify.returncode == 0
