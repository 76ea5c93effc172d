"""A run ``verify`` could not check is not shown as checked, call by call.

When ``verify`` could not run (a record of a shape it does not expect: here a config whose
``agents`` is a number), the run's verdict said so, but every call's section still said
"verify: every item was cleared and the prompt is exactly its manifest", a claim nothing
had checked. Each call now says it was not checked.
"""

from __future__ import annotations

import json
import sqlite3

from clearance import RunLedger
from clearance._view import load_run_view, render_run_page

CHECKED = "verify: every item was cleared and the prompt is exactly its manifest"


async def test_no_call_claims_a_check_that_did_not_run(recorded):
    conn = sqlite3.connect(recorded.path / "runs.db")
    (config,) = conn.execute("SELECT config FROM runs").fetchone()
    conn.execute("UPDATE runs SET config = ?", (json.dumps({**json.loads(config), "agents": 5}),))
    conn.commit()
    conn.close()
    with RunLedger(recorded.db) as ledger:
        view = load_run_view(ledger, recorded.run_id)
    assert view.verify_error is not None and view.calls
    page = render_run_page(view)
    assert "verify could not check this run:" in page
    assert CHECKED not in page
    assert page.count("not checked: verify could not check this run") == len(view.calls)


async def test_a_checked_call_still_says_so(recorded):
    with RunLedger(recorded.db) as ledger:
        view = load_run_view(ledger, recorded.run_id)
    assert view.verified
    assert render_run_page(view).count(CHECKED) == len(view.calls)
