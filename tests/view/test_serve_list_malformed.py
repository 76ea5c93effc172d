"""`clearance serve`'s list of runs when one run's row was edited into what no write puts there.

The list read every run with `RunLedger.list_runs`, which raises on the first malformed row:
one hand-edited run made the whole list a one-line ``500``, hiding every healthy run. Now it
reads `RunLedger.run_listing` (each run's record, or its `MalformedRecord`), like
``clearance runs``: the healthy runs are listed with their verdicts, and each broken one is
named in one line, escaped (its id is the ledger's text, not markup).
"""

from __future__ import annotations

import sqlite3

from serving import fetch, serving

from clearance import RunLedger

HOSTILE_ID = "<script>window.__pwned = 1</script>"


def _forge(db: str, sql: str, *values: object) -> None:
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    conn.execute(sql, values)
    conn.commit()
    conn.close()


async def test_a_malformed_run_is_named_and_the_healthy_runs_are_still_listed(
    recorded, record, tmp_path
):
    other = await record(tmp_path)  # a second, intact run in the same ledger
    _forge(
        recorded.db,
        "UPDATE runs SET run_id = ?, created_at = ? WHERE run_id = ?",
        HOSTILE_ID,
        "not a time",
        recorded.run_id,
    )
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, _, page = fetch(server.url)
    assert status == 200, page
    assert f'href="/run/{other.run_id}"' in page
    assert "model calls verified" in page  # the intact run was verified as before
    assert HOSTILE_ID not in page  # the broken run's id is shown as text, not markup
    assert "run &lt;script&gt;window.__pwned = 1&lt;/script&gt; is malformed: " in page
    assert "its created_at" in page
    assert "This ledger holds no runs yet" not in page


async def test_a_ledger_whose_only_run_is_malformed_says_so_not_that_it_is_empty(recorded):
    _forge(recorded.db, "UPDATE runs SET status = X'ff'")
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        status, _, page = fetch(server.url)
    assert status == 200, page
    assert f"run {recorded.run_id} is malformed: its status is not text" in page
    assert "This ledger holds no runs yet" not in page
