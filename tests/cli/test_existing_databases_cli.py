"""Commands that read, or act on what a database holds, never create or write to one.

``approve``, ``deny``, ``resume`` (write access to an existing ledger), ``serve`` (read-only),
``store get|query`` (read-only) and ``store cleanup`` (an existing store), ``memory``
(read-only): a path that names no database, an empty file or another program's database is
refused in one line (exit 2), and nothing is created or written. Commands that create a
database create the folder of their default one (``.clearance/``) but never a folder given
in ``--db``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app

TEAM = {
    "name": "t",
    "agents": [
        {"name": "writer", "instructions": "You write.", "limits": {"max_output_tokens": 32}}
    ],
    "tasks": [{"id": "t1", "title": "T", "description": "Do it.", "assignee": "writer"}],
}


def cli(*args: str, input: str | None = None) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, list(args), input=input, env={"CLEARANCE_DB": None})
    lines = [line for line in result.output.splitlines() if line.strip()]
    return result.exit_code, lines


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (its SHA-256), to show nothing was created or written."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "folder"
        for p in sorted(folder.rglob("*"))
    }


def foreign_database(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    sqlite3.connect(path).close()
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["approve", "run_x", "apr_1"],
        ["deny", "run_x", "apr_1", "--reason", "no"],
        ["resume", "run_x"],
        ["serve", "--port", "0"],
    ],
)
def test_a_ledger_that_does_not_exist_is_refused_and_nothing_is_created(
    tmp_path: Path, command: list[str]
) -> None:
    db = tmp_path / "fresh" / "l.db"
    code, lines = cli(*command, "--db", f"sqlite:///{db}")
    assert code == 2
    assert lines == [f"error: no run ledger at sqlite:///{db}: the file does not exist"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["approve", "run_x", "apr_1"], ["resume", "run_x"]])
def test_an_empty_file_is_not_filled_with_a_ledger(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "e.db"
    db.touch()
    code, lines = cli(*command, "--db", f"sqlite:///{db}")
    assert code == 2
    assert lines == [
        f"error: no run ledger at sqlite:///{db}: the database has none of its tables "
        "(no schema_version table)"
    ]
    assert snapshot(tmp_path) == {"e.db": hashlib.sha256(b"").hexdigest()}


def test_resume_of_another_programs_database_writes_nothing_to_it(tmp_path: Path) -> None:
    db = foreign_database(tmp_path / "other.db")
    before = snapshot(tmp_path)
    code, lines = cli("resume", "run_x", "--db", f"sqlite:///{db}")
    assert code == 2 and len(lines) == 1 and "none of its tables" in lines[0]
    assert snapshot(tmp_path) == before  # not even switched to write-ahead logging


def test_approve_on_an_existing_ledger_still_finds_the_run(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(db) as ledger:
        ledger.start_run(run_id="run_abc", team="t", goal=None, graph=[])
    code, lines = cli("approve", "run_abc", "apr_1", "--db", db)
    assert code == 2
    assert len(lines) == 1 and "run_abc" in lines[0] and "apr_1" in lines[0], lines


@pytest.mark.parametrize(
    "command", [["store", "get", "ns", "k"], ["store", "query", "ns"], ["store", "cleanup"]]
)
def test_a_store_that_does_not_exist_is_refused_and_nothing_is_created(
    tmp_path: Path, command: list[str]
) -> None:
    db = tmp_path / "fresh" / "s.db"
    code, lines = cli(*command, "--db", f"sqlite:///{db}")
    assert code == 2
    assert lines == [f"error: no store at sqlite:///{db}: the file does not exist"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "command", [["store", "get", "ns", "k"], ["store", "query", "ns"], ["store", "cleanup"]]
)
def test_store_commands_refuse_another_database_and_write_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    db = foreign_database(tmp_path / "other.db")
    before = snapshot(tmp_path)
    code, lines = cli(*command, "--db", f"sqlite:///{db}")
    assert code == 2
    assert lines == [
        f"error: no store at sqlite:///{db}: the database has none of its tables "
        "(no store_schema_version table)"
    ]
    assert snapshot(tmp_path) == before


def test_store_query_refuses_the_run_ledger_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    RunLedger(f"sqlite:///{db}").close()
    before = snapshot(tmp_path)
    code, lines = cli("store", "query", "ns", "--db", f"sqlite:///{db}")
    assert code == 2 and len(lines) == 1 and "no store at" in lines[0]
    # The ledger is in write-ahead-log mode: a reader may leave SQLite's -wal and -shm.
    assert snapshot(tmp_path)["runs.db"] == before["runs.db"]
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "store_schema_version" not in tables and "context_entries" not in tables


def test_store_get_and_query_read_a_store_that_exists(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    assert cli("store", "set", "ns", "k", "v", "--db", db)[0] == 0
    assert cli("store", "get", "ns", "k", "--db", db) == (0, ["v"])
    code, lines = cli("store", "query", "ns", "--json", "--db", db)
    assert code == 0 and len(lines) == 1 and '"key": "k"' in lines[0]
    assert cli("store", "cleanup", "--db", db) == (0, ["removed 0 expired entries"])


def test_memory_listing_refuses_another_database_and_writes_nothing(tmp_path: Path) -> None:
    db = foreign_database(tmp_path / "other.db")
    before = snapshot(tmp_path)
    code, lines = cli("memory", "--memory", f"sqlite:///{db}")
    assert code == 2
    assert lines == [
        f"error: no memory store at sqlite:///{db}: the database has none of its tables "
        "(no memory_schema_version table)"
    ]
    assert snapshot(tmp_path) == before


def test_memory_listing_refuses_the_run_ledger(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    RunLedger(f"sqlite:///{db}").close()
    before = snapshot(tmp_path)
    code, lines = cli("memory", "--memory", f"sqlite:///{db}")
    assert code == 2 and len(lines) == 1 and "no memory store at" in lines[0]
    assert snapshot(tmp_path)["runs.db"] == before["runs.db"]
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert not {t for t in tables if "memor" in t}


def test_memory_listing_of_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "some"
    folder.mkdir()
    code, lines = cli("memory", "--memory", f"sqlite:///{folder}")
    assert code == 2
    assert lines == [
        f"error: cannot open the memory store at sqlite:///{folder}: it is a folder, not a file"
    ]
    assert list(folder.iterdir()) == []


def test_memory_listing_of_no_file_yet_still_says_so(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    assert cli("memory", "--memory", f"sqlite:///{db}") == (
        0,
        [f"no memory at sqlite:///{db} yet"],
    )
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "field"), [(["", "k", "v"], "namespace"), (["ns", "", "v"], "key")]
)
def test_store_set_refuses_an_empty_namespace_or_key(
    tmp_path: Path, args: list[str], field: str
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    code, lines = cli("store", "set", *args, "--db", db)
    assert code == 2
    assert lines == [f"error: {field}: must not be empty"]
    assert list(tmp_path.iterdir()) == []  # refused before the store was created


@pytest.mark.parametrize(
    "command",
    [
        ["run", "team.yaml", "--model", "fake:m"],
        ["store", "set", "ns", "k", "v"],
        ["chat", "team.yaml", "--agent", "writer", "--model", "fake:m", "--context-window", "4000"],
    ],
)
def test_a_database_in_a_folder_that_does_not_exist_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(TEAM))
    db = tmp_path / "no" / "such" / "x.db"
    code, lines = cli(*command, "--db", f"sqlite:///{db}", input="")
    assert code == 2
    assert lines == [f"error: --db: folder '{db.parent}' does not exist"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team.yaml"]


def test_run_creates_the_folder_of_the_default_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(TEAM))
    code, lines = cli("run", "team.yaml", "--model", "fake:m")
    assert code == 0, lines
    assert (tmp_path / ".clearance" / "runs.db").is_file()


def test_a_ledger_of_a_newer_schema_says_upgrade_clearance_to_read_commands(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    RunLedger(f"sqlite:///{db}").close()
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, '2030-01-01 00:00:00.000000')")
    sqlite3.connect(db).close()
    for command in (["runs"], ["inspect", "run_x"], ["view", "run_x"], ["approve", "r", "a"]):
        code, lines = cli(*command, "--db", f"sqlite:///{db}")
        assert code == 2, command
        assert len(lines) == 1, (command, lines)
        assert "has schema version 99, newer than this version of Clearance" in lines[0]
        assert lines[0].endswith("; upgrade Clearance"), lines
        assert "write access" not in lines[0]


def test_resume_of_a_chat_run_says_it_is_a_chat_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(TEAM))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    code, lines = cli(
        "chat", "team.yaml", "--agent", "writer", "--model", "fake:m", "--context-window",
        "4000", "--db", db, input="hello\n",
    )  # fmt: skip
    assert code == 0, lines
    with RunLedger(db, read_only=True) as ledger:
        (run,) = ledger.list_runs()
    code, lines = cli("resume", run.run_id, "--db", db)
    assert code == 2
    assert lines == [f"error: run {run.run_id} is a chat session; it cannot be resumed"]
