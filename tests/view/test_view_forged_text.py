"""The run page of a ledger whose text columns hold bytes (a BLOB), edited by hand.

SQLite keeps a BLOB in a column declared as text, and reads it back as ``bytes``. The page
put a task id into its graph's JSON (``TypeError: Object of type bytes is not JSON
serializable``), joined statuses and split subjects as text: ``clearance view`` printed a
traceback. Now any text field of a run, task, call, tool call or event that is not text is a
`MalformedRecord` naming the record and the field: one line (exit 2), or a one-line ``500``.
"""

from __future__ import annotations

import sqlite3

import pytest
from serving import fetch, serving
from typer.testing import CliRunner

from clearance import RunLedger
from clearance.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("UPDATE tasks SET task_id = X'ff' WHERE task_id = 'spec'", "its task_id is not text"),
        ("UPDATE tasks SET status = X'ff' WHERE task_id = 'spec'", "its status is not text"),
        ("UPDATE tasks SET result = X'ff' WHERE task_id = 'spec'", "its result is not text"),
        ("UPDATE calls SET subject = X'ff' WHERE subject = 'task:spec'", "its subject is not text"),
        (
            "UPDATE calls SET response = X'00' WHERE subject = 'task:spec'",
            "its response is not text",
        ),
        ("UPDATE runs SET status = X'ff'", "its status is not text"),
    ],
)
async def test_bytes_where_text_belongs_are_one_line_naming_the_record(recorded, sql, said):
    conn = sqlite3.connect(recorded.path / "runs.db")
    conn.execute(sql)
    conn.commit()
    conn.close()
    target = recorded.path / "p.html"
    result = runner.invoke(app, ["view", recorded.run_id, "--db", recorded.db, "-o", str(target)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "is malformed: " in lines[0] and said in lines[0]
    assert not target.exists()
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, _, page = fetch(f"{server.url}run/{recorded.run_id}")
    assert status == 500 and "the ledger holds a malformed record (" in page and said in page
