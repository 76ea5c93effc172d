"""A ledger row edited into something the ledger never writes: one line, never a traceback.

An SQLite ``JSON`` column holds any text. A hand-edited manifest that is not JSON, or JSON
of the wrong shape, made ``verify``, ``inspect`` and ``view`` end in a Python traceback;
``verify`` must report it as a failed verification (exit 1), the others in one line.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._core.vocabulary import EventKind
from clearance.cli import app

TEAM = """\
name: ok
agents:
  - {name: a, instructions: A.}
tasks:
  - {id: t1, title: T, description: D., assignee: a}
  - {id: t2, title: T2, description: D2., assignee: a, depends_on: [t1]}
"""


def cli(*args: str):
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "team.yaml").write_text(TEAM)
    db = tmp_path / "runs.db"
    code, lines = cli(
        "run", str(tmp_path / "team.yaml"), "--model", "fake:x", "--db", f"sqlite:///{db}"
    )
    assert code == 0, lines
    run_id = next(line.split()[2] for line in lines if line.startswith("run id:"))
    return db, run_id


def forge(db: Path, column: str, value: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute(
            f"UPDATE calls SET {column} = ? WHERE ordinal = (SELECT min(ordinal) FROM calls)",
            (value,),
        )


@pytest.mark.parametrize("column", ["manifest", "messages"])
def test_a_record_that_is_not_json_fails_verification_in_one_line(recorded, column) -> None:
    db, run_id = recorded
    forge(db, column, "not json {")
    code, lines = cli("verify", run_id, "--db", f"sqlite:///{db}")
    assert code == 1, lines
    assert len(lines) == 1 and lines[0].startswith(f"run {run_id}: not verified: call call_")
    assert lines[0].endswith(
        f" is malformed: its {column} is not JSON (Expecting value: line 1 column 1 (char 0))"
    )
    for command in (
        ["inspect", run_id, "--no-pager"],
        ["view", run_id, "-o", str(db.parent / "p.html")],
    ):
        code, lines = cli(*command, "--db", f"sqlite:///{db}")
        assert code == 2, lines
        assert len(lines) == 1 and f"is malformed: its {column} is not JSON (" in lines[0]


def test_a_record_nested_past_the_stack_is_malformed_too(recorded) -> None:
    db, run_id = recorded
    forge(db, "manifest", "[" * 100_000 + "]" * 100_000)
    code, lines = cli("verify", run_id, "--db", f"sqlite:///{db}")
    assert code == 1, lines
    assert "is malformed: its manifest is not JSON (nested too deeply)" in lines[-1]
    assert lines[-1].startswith(f"run {run_id}: not verified: call call_")


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("manifest", '{"items": [1, 2]}', "its manifest's items are not a list of"),
        ("manifest", "[1, 2]", "its manifest is not an object"),
        ("manifest", '{"items": [{"origin": 5}]}', "its manifest's items are not a list of"),
        ("manifest", '{"items": [], "clearance": "x"}', "its manifest's clearance is not"),
        ("manifest", '{"items": [], "total_tokens": true}', "its manifest's total_tokens is not"),
        ("messages", '[{"role": "user", "content": 3}]', "its messages are not a list of"),
        ("messages", '{"role": "user"}', "its messages are not a list of"),
    ],
)
def test_a_record_of_the_wrong_shape_fails_verification_in_one_line(
    recorded, column, value, why
) -> None:
    # Each raised TypeError, AttributeError or KeyError out of verify and inspect.
    db, run_id = recorded
    forge(db, column, value)
    code, lines = cli("verify", run_id, "--db", f"sqlite:///{db}")
    assert code == 1, lines
    assert len(lines) == 1 and lines[0].startswith(f"run {run_id}: not verified: call call_")
    assert why in lines[0]
    code, lines = cli("inspect", run_id, "--no-pager", "--db", f"sqlite:///{db}")
    assert code == 2 and len(lines) == 1 and why in lines[0], lines


def test_an_event_of_the_wrong_shape_is_malformed(recorded) -> None:
    db, run_id = recorded
    with RunLedger(f"sqlite:///{db}") as ledger:
        data = {"record": "call", "original": "call_x", "sha256": "0" * 64}
        ledger.record_event(run_id, EventKind.REPLAYED, "task:t1", data)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE events SET data = '[1]'")
    code, lines = cli("inspect", run_id, "--no-pager", "--db", f"sqlite:///{db}")
    assert code == 2 and len(lines) == 1, lines
    assert "is malformed: its data is not an object" in lines[0]


def forge_sql(db: Path, sql: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute(sql)


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("UPDATE runs SET config = '[1]'", "its config is not an object"),
        ("UPDATE runs SET graph = '\"x\"'", "its graph is not a list of tasks"),
        ("UPDATE tasks SET depends_on = '5'", "its depends_on is not a list of task ids"),
    ],
)
def test_a_run_or_task_row_of_the_wrong_shape_is_malformed(recorded, sql, why) -> None:
    db, run_id = recorded
    forge_sql(db, sql)
    code, lines = cli("verify", run_id, "--db", f"sqlite:///{db}")
    assert code == 1 and len(lines) == 1 and why in lines[0], lines
    code, lines = cli("inspect", run_id, "--no-pager", "--db", f"sqlite:///{db}")
    assert code == 2 and len(lines) == 1 and why in lines[0], lines


def test_a_config_value_of_the_wrong_type_fails_verification_not_with_a_traceback(
    recorded,
) -> None:
    # A key of the run's config that verify reads, of another type: a TypeError in verify.
    db, run_id = recorded
    forge_sql(db, """UPDATE runs SET config = '{"agents": 5}'""")
    code, lines = cli("verify", run_id, "--db", f"sqlite:///{db}")
    assert code == 1, lines
    assert len(lines) == 1
    assert f"not verified: run {run_id}: a record is not of the shape the ledger writes" in lines[0]
