"""Statements compiled once per process, and the memos the ledger keeps per value.

SQLAlchemy caches compiled SQL per engine, so every ledger opened compiled its statements
again. `compiled_statement` keeps them for the process, keyed by what the compilation
depends on. A context item digests its content once; times are converted to text once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.schema import CreateTable

from clearance import RunLedger, verify_run
from clearance._core.clock import _ISO_TEXTS, utc_iso_text
from clearance._core.prompt import ContextItem, sha256_text
from clearance._state.db import compiled_statement
from clearance._state.db.engine import open_engine
from clearance._state.db.fastpath import _COMPILED
from clearance._state.db.types import _utc_sqlite_text
from clearance._state.ledger.statements import statement
from clearance.models import Usage

_T = Table("t", MetaData(), Column("a", Integer, primary_key=True), Column("b", String))


def test_two_engines_share_one_compiled_statement(tmp_path: Path) -> None:
    one = open_engine(f"sqlite:///{tmp_path}/one.db")
    two = open_engine(f"sqlite:///{tmp_path}/two.db")
    try:
        query = statement("task", "sqlite")
        first = compiled_statement(query, one.dialect, ("run_id", "task_id"))
        assert first is not None
        assert compiled_statement(query, two.dialect, ("run_id", "task_id")) is first
        # Other columns given: another compilation, with other SQL.
        other = compiled_statement(query, two.dialect, ("run_id", "task_id", "status"))
        assert other is not None and other is not first
        assert other.sql != first.sql
    finally:
        one.dispose()
        two.dispose()


def test_the_compiled_sql_is_sqlalchemys_own() -> None:
    engine = create_engine("sqlite://")
    query = insert(_T)
    compiled = compiled_statement(query, engine.dialect, ("a", "b"))
    assert compiled is not None
    assert compiled.sql == str(query.compile(dialect=engine.dialect, column_keys=["a", "b"]))
    assert compiled.parameters({"a": 1, "b": "x"}) == (1, "x")


def test_a_statement_that_cannot_run_as_driver_sql_is_none_and_stays_none() -> None:
    engine = create_engine("sqlite://")
    ddl = CreateTable(_T)
    assert compiled_statement(ddl, engine.dialect) is None
    assert compiled_statement(ddl, engine.dialect) is None


def test_a_statement_is_never_given_the_sql_of_another_that_had_its_id() -> None:
    """The cache is keyed by the statement's ``id`` and keeps the statement: an entry left by
    another statement under the same ``id`` (possible once that one is gone) is not used."""
    engine = create_engine("sqlite://")
    other = select(_T.c.a)
    stale = compiled_statement(other, engine.dialect)
    assert stale is not None and "t.a" in stale.sql
    mine = select(_T.c.b)
    # The entry `other` would have if `mine` now had its id.
    for key, entry in list(_COMPILED.items()):
        if entry[0] is other:
            _COMPILED[(id(mine), *key[1:])] = entry
    found = compiled_statement(mine, engine.dialect)
    assert found is not None
    assert "t.b" in found.sql and "t.a" not in found.sql


def test_ledgers_opened_one_after_another_record_and_verify(tmp_path: Path) -> None:
    """The shared compilations serve every ledger: each run is recorded and verifies."""
    url = f"sqlite:///{tmp_path}/runs.db"
    for n in range(3):
        ledger = RunLedger(url)
        try:
            ledger.start_run(run_id=f"run_{n}", team="t", goal="g", graph=None, config={})
            ledger.finish_run(
                f"run_{n}", status="completed", synthesis=f"s{n}", usage=Usage(), error=None
            )
            assert ledger.get_run(f"run_{n}").synthesis == f"s{n}"
        finally:
            ledger.close()
    ledger = RunLedger(url)
    try:
        for n in range(3):
            # Each run's records and chain verify; its synthesis, written here with no
            # synthesis call behind it, is the one finding (as a forged one would be).
            report = verify_run(ledger, f"run_{n}")
            assert report.entries_checked >= 2 and report.chain_head, report
            assert [(f.subject, f.reason) for f in report.findings] == [
                ("run", "the run's synthesis is not the answer of a synthesis call of the run")
            ]
    finally:
        ledger.close()


def test_a_context_item_digests_its_content_once_and_compares_by_value() -> None:
    item = ContextItem(origin="task_result:a", title="A", content="result text", tokens=3)
    assert item.sha256 == sha256_text("result text")
    assert item.to_dict()["sha256"] == sha256_text("result text")
    assert item.sha256 is item.sha256  # kept, not computed again
    twin = ContextItem(origin="task_result:a", title="A", content="result text", tokens=3)
    assert twin == item and hash(twin) == hash(item)  # the digest kept is no field
    assert "_sha256" not in repr(item)


def test_time_texts_are_memoized_within_a_bound() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    edges = [datetime(5, 1, 2, 3, 4, 5, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)]
    for moment in [*edges, *(start + timedelta(microseconds=n) for n in range(5000))]:
        assert utc_iso_text(moment) == moment.isoformat(timespec="microseconds")
        # The column's text is cut from the ISO text: the same as formatting it again.
        assert _utc_sqlite_text(moment) == moment.replace(tzinfo=None).isoformat(
            " ", "microseconds"
        )
    assert 0 < len(_ISO_TEXTS) <= 4096
