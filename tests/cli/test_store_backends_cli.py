"""The store and memory a command is given: verified read-only, and never in a made-up folder.

``verify --store`` (and ``--memory``) only reads: a path that holds no store (an empty
file, another program's database, a run ledger, an empty PostgreSQL database) is refused in
one line (exit 2) and left byte for byte as it was. ``run`` and ``resume`` refuse a
``--store`` or ``--memory`` whose SQLite file would be in a folder that does not exist,
before anything runs, as they refuse such a ``--db``; the default ``.clearance/`` folder is
still created.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app

TEAM = {
    "name": "t",
    "agents": [
        {
            "name": "reader",
            "instructions": "You read.",
            "tools": ["store_get"],
            "store_grants": {"facts": "read"},
            "memory": {"recall": 3, "record": "result"},
        }
    ],
    "tasks": [{"id": "t1", "title": "T", "description": "Do it.", "assignee": "reader"}],
}


def cli(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(
        app, list(args), env={"CLEARANCE_DB": None, "CLEARANCE_STORE_DB": None}
    )
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` (a file's SHA-256), to show nothing was created or written."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "folder"
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def recorded_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A run of a team with a store, on the fake model: (ledger URL, run id)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    team = dict(TEAM, store=f"sqlite:///{work / 'store.db'}")
    (work / "team.yaml").write_text(yaml.safe_dump(team))
    db = f"sqlite:///{work / 'runs.db'}"
    code, lines = cli("run", "team.yaml", "--model", "fake:m", "--db", db)
    assert code == 0, lines
    with RunLedger(db, read_only=True) as ledger:
        (run,) = ledger.list_runs()
    return db, run.run_id


def other_program(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    sqlite3.connect(path).close()
    return path


@pytest.mark.parametrize("option", ["--store", "--memory"])
@pytest.mark.parametrize("kind", ["empty", "foreign", "ledger"])
def test_verify_with_a_store_that_is_none_refuses_it_and_changes_nothing(
    tmp_path: Path, recorded_run: tuple[str, str], kind: str, option: str
) -> None:
    db, run_id = recorded_run
    target = tmp_path / "target"
    target.mkdir()
    path = target / "s.db"
    if kind == "empty":
        path.touch()
    elif kind == "foreign":
        other_program(path)
    else:
        RunLedger(f"sqlite:///{path}").close()
        for extra in target.glob("s.db-*"):  # a closed ledger may leave SQLite's -shm
            extra.unlink()
    before = snapshot(target)
    code, lines = cli("verify", run_id, "--db", db, option, f"sqlite:///{path}")
    assert code == 2, lines
    assert len(lines) == 1, lines
    what = {"--store": "store", "--memory": "memory"}[option]
    assert lines[0].startswith(f"error: the run's {what} is unreachable: no {what} "), lines
    assert lines[0].endswith(f"; give it with {option} URL"), lines
    after = snapshot(target)
    if kind == "ledger":  # in write-ahead-log mode: a reader may leave SQLite's -wal and -shm
        after = {name: sha for name, sha in after.items() if name == "s.db"}
    assert after == before  # no table written, not switched to write-ahead logging
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert not {t for t in tables if t.startswith(("store", "memor"))}


def test_verify_with_a_store_in_no_folder_creates_no_folder(
    tmp_path: Path, recorded_run: tuple[str, str]
) -> None:
    db, run_id = recorded_run
    missing = tmp_path / "nowhere" / "s.db"
    code, lines = cli("verify", run_id, "--db", db, "--store", f"sqlite:///{missing}")
    assert code == 2
    assert len(lines) == 1 and "unreachable" in lines[0] and "--store" in lines[0], lines
    assert not (tmp_path / "nowhere").exists()


def test_verify_with_the_runs_own_store_still_verifies(recorded_run: tuple[str, str]) -> None:
    db, run_id = recorded_run
    store = Path.cwd() / "store.db"
    code, lines = cli("verify", run_id, "--db", db, "--store", f"sqlite:///{store}")
    assert code == 0, lines
    assert "model calls verified" in lines[-1]


@pytest.fixture
def empty_postgres(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL database of its own, with no table at all."""
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("DROP DATABASE IF EXISTS verify_empty"))
        conn.execute(text("CREATE DATABASE verify_empty"))
    url = postgres_url.rsplit("/", 1)[0] + "/verify_empty"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text("DROP DATABASE IF EXISTS verify_empty WITH (FORCE)"))
        admin.dispose()


def test_verify_with_an_empty_postgresql_database_creates_no_table(
    recorded_run: tuple[str, str], empty_postgres: str
) -> None:
    db, run_id = recorded_run
    code, lines = cli("verify", run_id, "--db", db, "--store", empty_postgres)
    assert code == 2
    assert len(lines) == 1 and "no store at" in lines[0], lines
    engine = create_engine(empty_postgres)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


# -- run and resume: --store and --memory in a folder that does not exist ----------------------


@pytest.mark.parametrize("option", ["--store", "--memory"])
def test_run_refuses_a_store_or_memory_in_a_folder_that_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(dict(TEAM, store="sqlite:///s.db")))
    missing = tmp_path / "no" / "such" / "x.db"
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    code, lines = cli(
        "run", "team.yaml", "--model", "fake:m", "--db", db, option, f"sqlite:///{missing}"
    )
    assert code == 2
    assert lines == [f"error: {option}: folder '{missing.parent}' does not exist"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team.yaml"]  # no ledger, no run


@pytest.mark.parametrize("option", ["--store", "--memory"])
def test_run_refuses_a_relative_store_or_memory_in_a_missing_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(dict(TEAM, store="sqlite:///s.db")))
    code, lines = cli("run", "team.yaml", "--model", "fake:m", option, "sqlite:///typo/x.db")
    assert code == 2
    assert lines == [f"error: {option}: folder 'typo' does not exist"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team.yaml"]


def test_run_with_the_default_folder_still_creates_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(dict(TEAM, store="sqlite:///s.db")))
    code, lines = cli(
        "run", "team.yaml", "--model", "fake:m", "--store", "sqlite:///.clearance/store.db"
    )
    assert code == 0, lines
    assert (tmp_path / ".clearance" / "store.db").is_file()
    assert (tmp_path / ".clearance" / "runs.db").is_file()


@pytest.mark.parametrize("option", ["--store", "--memory"])
def test_resume_refuses_a_store_or_memory_in_a_folder_that_does_not_exist(
    tmp_path: Path, recorded_run: tuple[str, str], option: str
) -> None:
    db, run_id = recorded_run
    missing = tmp_path / "no" / "such" / "x.db"
    code, lines = cli("resume", run_id, "--db", db, option, f"sqlite:///{missing}")
    assert code == 2
    assert lines == [f"error: {option}: folder '{missing.parent}' does not exist"]
    assert not (tmp_path / "no").exists()


# -- store settings of a team file, refused when it is loaded ---------------------------------


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (
            {"store_grants": {"a*b": "read"}},
            "agents.reader.store_grants.a*b: a grant is a namespace, or a namespace prefix "
            "followed by '*'",
        ),
        (
            {"store_grants": {"": "read"}},
            "agents.reader.store_grants.: a grant is a namespace, or a namespace prefix "
            "followed by '*'",
        ),
        (
            {"store_read_extends_ttl_s": 5e9},
            "agents.reader.store_read_extends_ttl_s: must be a positive number of seconds "
            "from 1e-06 up to 3153600000 (100 years; none for never), got 5000000000.0",
        ),
        (
            {"store_read_extends_ttl_s": 1e-7},
            "agents.reader.store_read_extends_ttl_s: must be a positive number of seconds "
            "from 1e-06 up to 3153600000 (100 years; none for never), got 1e-07",
        ),
    ],
)
@pytest.mark.parametrize("command", ["graph", "run"])
def test_a_store_setting_no_run_could_use_is_refused_when_the_file_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: dict[str, object], message: str,
    command: str,
) -> None:  # fmt: skip
    # It was refused only once the task ran (the run failed), or every read then failed.
    monkeypatch.chdir(tmp_path)
    reader = {**TEAM["agents"][0], **agent}  # type: ignore[index]
    (tmp_path / "team.yaml").write_text(
        yaml.safe_dump(dict(TEAM, store="sqlite:///s.db", agents=[reader]))
    )
    args = ["--model", "fake:m"] if command == "run" else []
    code, lines = cli(command, "team.yaml", *args)
    assert code == 2
    assert lines == [f"error: team.yaml: {message}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team.yaml"]


# -- store set: what it is given is checked before the store is opened (or created) ------------


@pytest.mark.parametrize(
    ("ttl", "says"),
    [
        ("inf", "must be a finite number, got inf"),
        ("nan", "must be a finite number, got nan"),  # not "less than or equal to ..."
        ("1e20", "must be from 0.001 to 3,153,600,000, got 1e+20"),
        ("3153600001", "must be from 0.001 to 3,153,600,000, got 3,153,600,001"),
        ("0", "must be from 0.001 to 3,153,600,000, got 0"),
        ("-1", "must be from 0.001 to 3,153,600,000, got -1"),
        ("abc", "a valid number"),
    ],
)
def test_store_set_refuses_a_ttl_before_it_creates_the_store(
    tmp_path: Path, ttl: str, says: str
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    code, lines = cli("store", "set", "ns", "k", "v", "--ttl-s", ttl, "--db", db)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for '--ttl-s'"), lines
    assert says in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_store_set_keeps_a_ttl_of_a_hundred_years(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    assert cli("store", "set", "ns", "k", "v", "--ttl-s", "3153600000", "--db", db) == (
        0,
        ["stored ns/k"],
    )
    assert cli("store", "get", "ns", "k", "--db", db) == (0, ["v"])


@pytest.mark.parametrize("db", ["sqlite://", "sqlite:///", "sqlite:///:memory:"])
def test_store_set_refuses_a_database_that_keeps_nothing(db: str) -> None:
    # It printed "stored ns/k" and the entry was gone when the command ended.
    code, lines = cli("store", "set", "ns", "k", "v", "--db", db)
    assert code == 2
    assert lines == [
        "error: --db: an in-memory SQLite database keeps nothing once the command ends; "
        "give a file (sqlite:///path)"
    ]


def test_store_get_of_a_missing_sqlite_uri_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for command in (["store", "get", "ns", "k"], ["store", "query", "ns"], ["store", "cleanup"]):
        code, lines = cli(*command, "--db", "sqlite:///file:new.db?uri=true")
        assert code == 2
        assert len(lines) == 1 and lines[0].endswith(": the file does not exist"), lines
    assert list(tmp_path.iterdir()) == []


def test_store_set_refuses_an_argument_sqlite_would_ignore(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    code, lines = cli("store", "set", "ns", "k", "v", "--db", f"sqlite:///{path}?mode=ro")
    assert code == 2
    assert len(lines) == 1 and "no query argument 'mode' without uri=true" in lines[0], lines
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--agent", "a" * 300), "agent"),
        (("--ttl-s", "nan"), "ttl"),
        ((), "namespace"),  # an empty namespace, below
    ],
)
def test_a_store_write_refused_leaves_no_store_file_behind(
    tmp_path: Path, args: tuple[str, ...], field: str
) -> None:
    # `store set --agent` with a name over 255 characters created an empty store first.
    db = tmp_path / "store.db"
    namespace = "" if field == "namespace" else "ns"
    code, lines = cli("store", "set", namespace, "k", "v", *args, "--db", f"sqlite:///{db}")
    assert code == 2, lines
    assert len(lines) == 1 and field in lines[0], lines
    assert not db.exists(), "a refused write created the store"
