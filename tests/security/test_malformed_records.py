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
    assert lines == [f"run {run_id}: not verified: a record holds text that is not JSON "
                     "(Expecting value: line 1 column 1 (char 0))"]  # fmt: skip
    for command in (
        ["inspect", run_id, "--no-pager"],
        ["view", run_id, "-o", str(db.parent / "p.html")],
    ):
        code, lines = cli(*command, "--db", f"sqlite:///{db}")
        assert code == 2, lines
        assert len(lines) == 1 and "a record holds text that is not JSON" in lines[0]


def test_a_record_nested_past_the_stack_is_malformed_too(recorded) -> None:
    db, run_id = recorded
    forge(db, "manifest", "[" * 100_000 + "]" * 100_000)
    code, lines = cli("verify", run_id, "--db", f"sqlite:///{db}")
    assert code == 1, lines
    assert "not verified: a record holds text that is not JSON (nested too deeply)" in lines[-1]
