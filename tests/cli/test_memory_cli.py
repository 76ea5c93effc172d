"""Memory and store from the command line: recall across runs, verify, and resume after SIGKILL."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.render import Block
from clearance._core.prompt import sha256_text
from clearance.cli import app
from clearance.testing import assert_never_saw, assert_saw

EXAMPLES = Path(__file__).parents[2] / "examples"
MEMORY_EXAMPLE = EXAMPLES / "team_memory.yaml"
STORE_EXAMPLE = EXAMPLES / "store_and_delegation.yaml"


def cli(*args: str):
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def run_ids(db: Path) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [r.run_id for r in reversed(ledger.list_runs(limit=10))]


@pytest.fixture
def two_runs(tmp_path, monkeypatch):
    """The memory example run twice on the fake model, from ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"
    for _ in range(2):
        code, out = cli("run", str(MEMORY_EXAMPLE), "--model", "fake:m", "--db", f"sqlite:///{db}")
        assert code == 0, out
    first, second = run_ids(db)
    return db, first, second


def recorded_results(db: Path, run_id: str) -> dict[str, str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return {t.task_id: t.result or "" for t in ledger.tasks(run_id)}


def test_second_run_recalls_the_first_by_scope_and_verifies(two_runs, tmp_path):
    db, first, second = two_runs
    earlier = recorded_results(db, first)
    with RunLedger(f"sqlite:///{db}") as ledger:
        # The scout recorded into the group: both members recall it, the auditor never.
        assert_saw(ledger, "note", earlier["note"], run_id=second)
        assert_saw(ledger, "analyse", earlier["note"], run_id=second)
        assert_never_saw(ledger, "audit", earlier["note"], run_id=second)
        # The analyst's and the auditor's records stay private.
        assert_never_saw(ledger, "audit", earlier["analyse"], run_id=second)
        assert_never_saw(ledger, "note", earlier["audit"], run_id=second)
        assert_never_saw(ledger, "analyse", earlier["audit"], run_id=second)
        assert_saw(ledger, "audit", earlier["audit"], run_id=second)
        config = ledger.get_run(second).config
    memory_db = tmp_path / ".clearance" / "example-memory.db"
    assert config["memory"] == {"url": f"sqlite:///{memory_db}"}  # on_error: fail, the default
    code, out = cli("verify", second, "--db", f"sqlite:///{db}")
    assert code == 0, out


def forge_memory_item(rewrite_prompt, db: Path, run_id: str, subject: str) -> None:
    """Replace a memory item's text in a recorded prompt and recompute every digest."""
    forged = []

    def edit(block, item):
        if forged or not item["origin"].startswith("memory:"):
            return block
        forged.append("X" * len(block.content))
        item["sha256"] = sha256_text(forged[0])
        return Block(heading=block.heading, content=forged[0], on_fence=block.on_fence)

    conn = sqlite3.connect(db)
    try:
        (call_id,) = conn.execute(
            "SELECT call_id FROM calls WHERE run_id = ? AND subject = ?", (run_id, subject)
        ).fetchone()
        rewrite_prompt(conn, subject, edit, call_id=call_id)
        conn.commit()
    finally:
        conn.close()
    assert forged


def test_a_forged_memory_item_fails_verify_with_no_extra_flags(two_runs, rewrite_prompt):
    db, _, second = two_runs
    forge_memory_item(rewrite_prompt, db, second, "task:audit")
    code, out = cli("verify", second, "--db", f"sqlite:///{db}")
    assert code == 1, out
    assert "not the stored memory record" in out


def test_verify_says_when_the_memory_is_unreachable(two_runs, tmp_path):
    db, _, second = two_runs
    (tmp_path / ".clearance" / "example-memory.db").unlink()
    code, out = cli("verify", second, "--db", f"sqlite:///{db}")
    assert code == 2
    assert "memory" in out and "unreachable" in out and "--memory" in out


# -- SIGKILL, then resume ----------------------------------------------------------------------


def clearance(*args: str, cwd: Path, latency_s: float = 0.0) -> subprocess.Popen[str]:
    env = dict(os.environ, CLEARANCE_FAKE_LATENCY_S=str(latency_s))
    src = str(Path(__file__).parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "clearance", *args],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def statuses(db: Path) -> dict[str, str]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return dict(conn.execute("SELECT task_id, status FROM tasks").fetchall())
    except sqlite3.OperationalError:
        return {}


def kill_after_first_task(team: Path, tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "runs.db"
    proc = clearance(
        "run", str(team), "--model", "fake:m", "--db", f"sqlite:///{db}",
        cwd=tmp_path, latency_s=0.4,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the run finished before it could be killed"
            current = statuses(db)
            if "completed" in current.values() and "running" in current.values():
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"timed out; statuses {statuses(db)}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    (run_id,) = run_ids(db)
    return db, run_id


@pytest.mark.parametrize("team", [STORE_EXAMPLE, MEMORY_EXAMPLE], ids=["store", "memory"])
def test_sigkill_then_resume_succeeds_and_verifies(team, tmp_path):
    db, run_id = kill_after_first_task(team, tmp_path)
    resumed = clearance("resume", run_id, "--db", f"sqlite:///{db}", cwd=tmp_path)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out + err
    assert set(statuses(db).values()) == {"completed"}
    check = clearance("verify", run_id, "--db", f"sqlite:///{db}", cwd=tmp_path)
    out, err = check.communicate(timeout=60)
    assert check.returncode == 0, out + err
    with RunLedger(f"sqlite:///{db}") as ledger:
        config = ledger.get_run(run_id).config
    groups = {g["name"]: sorted(g["agents"]) for g in config.get("memory_groups", [])}
    assert groups == ({"research": ["analyst", "scout"]} if team == MEMORY_EXAMPLE else {})
