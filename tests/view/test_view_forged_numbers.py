"""The run page of a ledger whose numbers were edited: counts and times of the wrong type.

SQLite keeps whatever a row is given, whatever its column's type: a token count that is
text, a latency that is text or infinite, a time ten thousand years ahead. The ledger's
reads check the JSON columns' shapes and the times' text, but the page summed the token
counts and laid the latencies out as they came, so ``clearance view`` printed a traceback,
``serve`` answered a run's page with a ``TypeError``, one such run took the whole list of
runs down, and a run still going whose call lasted "1e300 seconds" could not be shown.
"""

from __future__ import annotations

import math
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from serving import fetch, serving
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._view import load_run_view, render_run_page
from clearance.cli import app

runner = CliRunner()


def forge(db: str, sql: str, *values: object) -> None:
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    conn.execute(sql, values)
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("prompt_tokens", "many", "its prompt_tokens is not a whole number >= 0"),
        ("completion_tokens", -3, "its completion_tokens is not a whole number >= 0"),
        ("prompt_tokens", 1.5, "its prompt_tokens is not a whole number >= 0"),
        ("latency_s", "slow", "its latency_s is not a finite number of seconds >= 0"),
        ("latency_s", math.inf, "its latency_s is not a finite number of seconds >= 0"),
        ("latency_s", -1.0, "its latency_s is not a finite number of seconds >= 0"),
    ],
)
async def test_a_call_whose_counts_are_not_numbers_is_one_line_naming_it(
    recorded, column, value, said
):
    forge(recorded.db, f"UPDATE calls SET {column} = ? WHERE subject = 'task:spec'", value)
    result = runner.invoke(
        app, ["view", recorded.run_id, "--db", recorded.db, "-o", str(recorded.path / "p.html")]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "call call_" in lines[0] and said in lines[0]
    assert not (recorded.path / "p.html").exists()
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, _, page = fetch(f"{server.url}run/{recorded.run_id}")
        listed, _, index = fetch(server.url)
    assert status == 500 and "the ledger holds a malformed record (call call_" in page
    assert said.replace(">", "&gt;") in page
    assert listed == 200 and recorded.run_id in index


async def test_a_run_whose_token_totals_are_not_numbers_does_not_take_down_the_list(
    recorded, record, tmp_path
):
    other = await record(tmp_path)
    forge(recorded.db, "UPDATE runs SET prompt_tokens = 'lots' WHERE run_id = ?", recorded.run_id)
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, _, index = fetch(server.url)
    assert status == 200, index
    assert recorded.run_id in index and other.run_id in index
    row = index[index.index(f"<code>{recorded.run_id}</code>") :]
    row = row[: row.index("</tr>")]
    assert '<td class="num">—</td>' in row  # no total is made up for it
    assert "lots" not in row


@pytest.mark.parametrize(
    ("sql", "values"),
    [
        ("UPDATE calls SET latency_s = ?", (1e300,)),
        ("UPDATE calls SET started_at = ?, latency_s = ?", ("9999-12-31 23:59:59", 86400.0)),
        ("UPDATE tasks SET started_at = ?", ("9999-12-31 23:59:59",)),
    ],
)
async def test_a_run_still_going_with_times_past_the_calendar_is_still_shown(recorded, sql, values):
    forge(recorded.db, "UPDATE runs SET finished_at = NULL")
    forge(recorded.db, sql, *values)
    with RunLedger(recorded.db) as ledger:
        view = load_run_view(ledger, recorded.run_id)
        assert view.live
        page = render_run_page(view, now=datetime.now(UTC) + timedelta(seconds=1))
    assert page.startswith("<!DOCTYPE html>") and 'id="timeline"' in page
    assert "nan%" not in page and "inf%" not in page
