"""`clearance verify`, `inspect` and `runs` on a ledger whose file and folder are read-only.

Reading a run must not need write access: no schema migration, no switch to write-ahead
logging, no ``-shm`` file created next to the database. The suite runs as root, for whom
permission bits are not enforced, so the file and its folder are made immutable
(``chattr +i``), which binds root too; as another user ``chmod`` does the same.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clearance import RunLedger, StoreError


def clearance(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, *sys.path])}
    return subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        capture_output=True, text=True, timeout=60, env=env, cwd=cwd,
    )  # fmt: skip


def _lock(paths: list[Path]) -> None:
    if os.geteuid() != 0:
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
        return
    if shutil.which("chattr") is None:
        pytest.skip("chattr is needed to make a file read-only for root")
    for path in paths:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not supported here: {done.stderr.strip()}")


def _unlock(paths: list[Path]) -> None:
    for path in paths:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)
        path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.fixture
def read_only_ledger(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A ledger with one completed run, then its file and folder made read-only."""
    folder = tmp_path / "ledger"
    folder.mkdir()  # a --db folder is never created by `clearance run`
    db = folder / "runs.db"
    team = tmp_path / "team.yaml"
    team.write_text(
        "name: t\nagents: [{name: a, instructions: Do it.}]\n"
        "tasks:\n  - {id: t1, title: T, description: Do it., assignee: a}\n"
    )
    url = f"sqlite:///{db}"
    done = clearance("run", str(team), "--model", "fake:m", "--db", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    with RunLedger(url) as ledger:
        (run,) = ledger.list_runs()
    assert sorted(p.name for p in folder.iterdir()) == ["runs.db"]
    locked = [db, folder]
    _lock(locked)
    try:
        probe = folder / "probe"
        with pytest.raises(OSError):
            probe.write_text("x")  # the lock holds, for root too
        yield url, run.run_id
        assert sorted(p.name for p in folder.iterdir()) == ["runs.db"]  # nothing created
    finally:
        _unlock(locked)


@pytest.mark.parametrize("command", ["verify", "inspect", "runs"])
def test_read_commands_work_on_a_read_only_ledger(
    read_only_ledger: tuple[str, str], command: str, tmp_path: Path
) -> None:
    url, run_id = read_only_ledger
    args = ["runs", "--db", url] if command == "runs" else [command, run_id, "--db", url]
    done = clearance(*args, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    assert run_id in done.stdout
    if command == "verify":
        assert "verified" in done.stdout


def test_writing_to_a_read_only_ledger_is_a_store_error(
    read_only_ledger: tuple[str, str],
) -> None:
    url, run_id = read_only_ledger
    with RunLedger(url, read_only=True) as ledger:
        assert ledger.get_run(run_id).status == "completed"
        with pytest.raises(StoreError, match="cannot"):
            ledger.start_run(run_id="run_new", team="t", goal=None, graph=None)


def test_a_missing_ledger_opened_read_only_is_one_line(tmp_path: Path) -> None:
    done = clearance("verify", "run_x", "--db", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize(
    "command", [["inspect", "run_x"], ["verify", "run_x"], ["runs"], ["view", "run_x"]]
)
def test_reading_a_ledger_that_does_not_exist_says_so_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    # SQLite said only "unable to open database file"; and `view` created an empty ledger.
    db = tmp_path / "typo.db"
    done = clearance(*command, "--db", f"sqlite:///{db}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert lines == [f"error: no run ledger at sqlite:///{db}: the file does not exist"]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StoreError, match=r"no run ledger at .*: the file does not exist"):
        RunLedger(f"sqlite:///{db}", read_only=True)


def test_reading_another_programs_database_says_it_holds_no_ledger(tmp_path: Path) -> None:
    # It said the database "has no tables"; this one has one, just not the ledger's.
    import sqlite3

    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE runs (x)")
    done = clearance("runs", "--db", f"sqlite:///{path}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert lines == [
        f"error: no run ledger at sqlite:///{path}: the database has none of its tables "
        "(no schema_version table)"
    ]
