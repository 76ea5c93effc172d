"""A listing's row limit is checked before any query: 1 to MAX_ROWS, an integer.

A limit past the driver's integer type (SQLite: 64 bits) used to reach the driver, and
``clearance runs --limit 100000000000000000000`` ended in an ``OverflowError`` traceback.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from clearance import ConfigError, ContextStore, RunLedger
from clearance.cli import app
from clearance.runs import MAX_ROWS

BAD = [0, -1, MAX_ROWS + 1, 10**20, True, 2.0, "5"]


@pytest.mark.parametrize("limit", BAD)
def test_the_ledger_refuses_a_bad_limit(tmp_path, limit) -> None:
    with RunLedger(f"sqlite:///{tmp_path}/runs.db") as ledger:
        with pytest.raises(ConfigError, match=f"limit: must be an integer from 1 to {MAX_ROWS}"):
            ledger.list_runs(limit)
        assert ledger.list_runs(MAX_ROWS) == []


@pytest.mark.parametrize("limit", BAD)
def test_the_store_refuses_a_bad_limit(tmp_path, limit) -> None:
    with ContextStore(f"sqlite:///{tmp_path}/store.db") as store:
        store.set("ns", "k", "v", "operator")
        for read in (
            lambda: store.query("ns", limit),
            lambda: store.query_by_prefix("ns", "k", limit),
            lambda: store.search(["ns"], "v", limit),
        ):
            with pytest.raises(ConfigError, match=f"must be an integer from 1 to {MAX_ROWS}"):
                read()
        assert [e.key for e in store.query("ns", MAX_ROWS)] == ["k"]


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "--db", "sqlite:///{tmp}/runs.db"],
        ["store", "query", "ns", "--db", "sqlite:///{tmp}/store.db"],
    ],
)
def test_the_command_line_refuses_a_limit_past_max_rows(tmp_path, command) -> None:
    args = [a.format(tmp=tmp_path) for a in command]
    result = CliRunner().invoke(app, [*args, "--limit", str(10**20)])
    assert result.exit_code == 2
    assert f"less than or equal to {MAX_ROWS}" in result.output
    assert "Traceback" not in result.output
