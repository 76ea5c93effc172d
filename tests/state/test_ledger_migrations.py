"""Ledger files written by earlier code open, upgrade in place and keep their hash chains.

``fixtures/ledger_v6.db`` was written by the code of schema version 6 (one record of every
kind: run, tasks, a task reason, a message, a call, a request and its outcome, a tool call,
an event; chained without a key). ``fixtures/ledger_v1.db`` holds only migration 1 of that
code's schema, with one run and one call inserted as version 1 stored them.
"""

import shutil
import sqlite3
from pathlib import Path

import pytest

from clearance._context.verify_chain import check_chain
from clearance._core.errors import StoreError
from clearance._state.ledger import SCHEMA_VERSION, RunLedger
from clearance.models import Usage

FIXTURES = Path(__file__).parent / "fixtures"


def copy_of(name: str, tmp_path: Path) -> Path:
    path = tmp_path / name
    shutil.copyfile(FIXTURES / name, path)
    return path


def columns(path: Path) -> dict[str, list[tuple[str, str, int, str | None]]]:
    """Each table's columns as ``(name, declared type, not null, default)``, in order."""
    with sqlite3.connect(path) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'sqlite_sequence'"
            )
        ]
        return {
            table: [
                (row[1], row[2].upper(), row[3], row[4])
                for row in conn.execute(f"PRAGMA table_info({table})")
            ]
            for table in sorted(tables)
        }


def indexes(path: Path) -> set[str]:
    """The names of the file's indexes (SQLite's own for unique constraints included)."""
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}


def record_new_run(ledger: RunLedger) -> None:
    ledger.start_run(run_id="run_new", team="t", goal="g", graph=None)
    ledger.record_event(
        "run_new", "answer_marked", "plan", {"truncated": False, "repetitive": True}
    )
    ledger.finish_run("run_new", status="completed", synthesis="ok", usage=Usage(), error=None)


def test_a_ledger_of_schema_version_6_opens_reads_and_verifies(tmp_path):
    path = copy_of("ledger_v6.db", tmp_path)
    with RunLedger(f"sqlite:///{path}") as ledger:
        run = ledger.get_run("run_v6")
        assert (run.status, run.error, run.usage.prompt_tokens) == ("failed", "task b failed", 40)
        assert [t.status for t in ledger.tasks("run_v6")] == ["completed", "failed"]
        assert ledger.task_reasons("run_v6") == {"b": ["ModelError: boom"]}
        calls = ledger.calls("run_v6")
        assert [(c.subject, c.pending, c.error) for c in calls] == [
            ("task:a", False, None),
            ("task:b", False, "ModelError: boom"),
        ]
        assert calls[0].record_sha256 is not None
        assert [t.name for t in ledger.tool_calls("run_v6")] == ["store_get"]
        assert [e.kind for e in ledger.events("run_v6")] == ["step"]
        assert [m["content"] for m in ledger.messages("run_v6")] == ["Keep it short."]
        report = check_chain(ledger, "run_v6", None)
        assert report.entries == 13 and report.problems == ()
        record_new_run(ledger)
        assert check_chain(ledger, "run_new", None).problems == ()
        assert check_chain(ledger, "run_v6", None).head == report.head


def test_a_tampered_version_6_ledger_is_still_caught(tmp_path):
    path = copy_of("ledger_v6.db", tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE calls SET response = 'Forged.' WHERE response = 'Facts.'")
    with RunLedger(f"sqlite:///{path}") as ledger:
        problems = check_chain(ledger, "run_v6", None).problems
    assert problems and any(subject == "task:a" for subject, _, _ in problems)


def test_a_ledger_of_schema_version_1_is_upgraded_to_the_current_schema(tmp_path):
    old = copy_of("ledger_v1.db", tmp_path)
    with RunLedger(f"sqlite:///{old}") as ledger:
        run = ledger.get_run("run_v1")
        assert (run.team, run.synthesis, run.usage.completion_tokens) == ("old", "Done.", 2)
        (call,) = ledger.calls("run_v1")
        assert (call.call_id, call.record_sha256, call.pending) == ("call_old", None, False)
        assert ledger.chain_entries("run_v1") == []
        record_new_run(ledger)
        assert check_chain(ledger, "run_new", None).problems == ()
    with sqlite3.connect(old) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    fresh = tmp_path / "fresh.db"
    RunLedger(f"sqlite:///{fresh}").close()
    current = copy_of("ledger_v6.db", tmp_path)
    RunLedger(f"sqlite:///{current}").close()
    # An upgraded file, a file written at version 6 and a new file have the same tables.
    assert columns(old) == columns(fresh) == columns(current)
    assert indexes(old) == indexes(fresh) == indexes(current)
    assert "ix_tasks_run_id" not in indexes(fresh)


def test_a_runs_tasks_are_read_through_the_unique_index_of_run_and_task(tmp_path):
    """``ix_tasks_run_id`` is gone (version 11): ``(run_id, task_id)``'s index serves."""
    path = tmp_path / "runs.db"
    RunLedger(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        plan = " ".join(
            row[3]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM tasks WHERE run_id = ? ORDER BY ordinal", ("r",)
            )
        )
    assert "USING INDEX sqlite_autoindex_tasks_1 (run_id=?)" in plan


def test_a_ledger_of_schema_version_1_opened_read_only_is_refused(tmp_path):
    old = copy_of("ledger_v1.db", tmp_path)
    with pytest.raises(StoreError, match="opened read-only, has schema version 1, not"):
        RunLedger(f"sqlite:///{old}", read_only=True)
