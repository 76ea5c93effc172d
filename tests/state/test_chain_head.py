"""A run's chain head as the writer reads it: its last entry, and the key check."""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance._core.errors import LedgerError
from clearance._state.chain import LEDGER_KEY_ENV, key_id
from clearance._state.ledger import RunLedger
from clearance._state.ledger.chaining import ChainWriter

KEY = "k" * 32


def _writer(url: str, key: bytes | None) -> ChainWriter:
    return ChainWriter(key, key_id(key) if key is not None else None, url, "sqlite")


def test_the_head_is_the_runs_last_entry(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ledger = RunLedger(url)
    try:
        ledger.start_run(run_id="run_a", team="t", goal=None, graph=None)
        ledger.start_run(run_id="run_b", team="t", goal=None, graph=None)
        ledger.set_graph("run_a", [])
        with ledger._engine.begin() as conn:
            last = conn.exec_driver_sql(
                "SELECT seq, chain_sha256 FROM ledger_entries WHERE run_id = 'run_a' "
                "ORDER BY seq DESC LIMIT 1"
            ).one()
            assert last[0] == 2
            assert _writer(url, None)._head(conn, "run_a") == (2, last[1], None)
            with pytest.raises(LedgerError, match="unknown run 'run_c'"):
                _writer(url, None)._head(conn, "run_c")
            conn.exec_driver_sql("DELETE FROM ledger_entries WHERE run_id = 'run_b'")
            assert _writer(url, None)._head(conn, "run_b") == (0, "", None)
            conn.rollback()
    finally:
        ledger.close()


def test_a_run_is_continued_only_with_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ledger = RunLedger(url)
    try:
        ledger.start_run(run_id="run_plain", team="t", goal=None, graph=None)
    finally:
        ledger.close()
    monkeypatch.setenv(LEDGER_KEY_ENV, KEY)
    keyed = RunLedger(url)
    try:
        keyed.start_run(run_id="run_keyed", team="t", goal=None, graph=None)
        with keyed._engine.begin() as conn:
            with pytest.raises(LedgerError, match="recorded without a ledger key"):
                _writer(url, KEY.encode())._head(conn, "run_plain")
            with pytest.raises(
                LedgerError, match=f"chained with ledger key {key_id(KEY.encode())}"
            ):
                _writer(url, b"another key of 16+ bytes")._head(conn, "run_keyed")
            with pytest.raises(LedgerError, match="chained with ledger key"):
                _writer(url, None)._head(conn, "run_keyed")
            seq, _, key = _writer(url, KEY.encode())._head(conn, "run_keyed")
            assert (seq, key) == (1, KEY.encode())
            conn.rollback()
    finally:
        keyed.close()
