"""`verify_run` reads each table of a run once and holds one prompt at a time.

It read the model calls twice (the calls, then every row again for the hash chain) and kept
every call's prompt in memory at once, twice: 20,000 tasks took 11 s and 545 MB. These tests
count the statements verify sends for each table, and measure its peak memory with
tracemalloc (not wall time, so they hold on a loaded machine), on real runs in a real SQLite
file made with a scripted model.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from clearance import Agent, Orchestrator, RunLedger, Task, Team, verify_run
from clearance._core.errors import MalformedRecord
from clearance.testing import FunctionModel

PROMPT = 200_000
"""Characters of instructions in every call's system message: the prompts dominate."""

TABLES = ("runs", "tasks", "task_reasons", "messages", "tool_calls", "events", "ledger_entries")


def made_run(db: str, tasks: int) -> str:
    team = Team(agents=(Agent(name="w", instructions="Work. " + "x" * PROMPT),))

    async def run() -> str:
        with RunLedger(db) as ledger:
            result = await Orchestrator(
                team, model=FunctionModel(lambda request: "ok"), ledger=ledger
            ).run_tasks(
                [
                    Task(id=f"t{i}", title=f"T{i}", description="d", assignee="w")
                    for i in range(tasks)
                ]
            )
        return result.run_id

    return asyncio.run(run())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, str]]:
    """Runs of 40 and 160 tasks: size to (ledger URL, run id)."""
    folder = tmp_path_factory.mktemp("big")
    made = {}
    for size in (40, 160):
        db = f"sqlite:///{folder / f'runs{size}.db'}"
        made[size] = (db, made_run(db, size))
    return made


def statements(db: str, run_id: str) -> tuple[Counter[str], int, Any]:
    """Verify's statements per table read, how many of them select the prompts, the report."""
    read: Counter[str] = Counter()
    prompts = 0

    def count(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        nonlocal prompts
        if not sql.lstrip().upper().startswith("SELECT"):
            return
        if re.search(r"\bmax\(", sql, re.IGNORECASE):
            read["chain head"] += 1  # the one-row query that the chain did not move
            return
        for table in re.findall(r"\bFROM\s+\"?(\w+)", sql, re.IGNORECASE):
            read[table] += 1
            if table == "calls" and re.search(
                r"\bcalls\.messages\b|\bmessages\b\s*(AS|,|\n| FROM)", sql
            ):
                prompts += 1

    with RunLedger(db) as ledger:
        event.listen(ledger._engine, "before_cursor_execute", count)
        report = verify_run(ledger, run_id)
        event.remove(ledger._engine, "before_cursor_execute", count)
    return read, prompts, report


def test_verify_reads_each_table_once(runs) -> None:
    db, run_id = runs[40]

    read, prompts, report = statements(db, run_id)

    assert report.ok, report.findings
    assert report.calls_checked == 41  # 40 tasks and the synthesis
    for table in TABLES:
        assert read[table] <= (2 if table == "runs" else 1), (table, read)  # runs: get_run, rows
    # The calls: their columns but the prompts, then the prompts alone (they were read twice).
    assert read["calls"] == 2, read
    assert read["chain head"] == 1, read
    assert prompts == 1, read


def peak(db: str, run_id: str) -> tuple[int, Any]:
    with RunLedger(db) as ledger:
        ledger.get_run(run_id)  # opened and migrated before the measure
        tracemalloc.start()
        try:
            report = verify_run(ledger, run_id)
            return tracemalloc.get_traced_memory()[1], report
        finally:
            tracemalloc.stop()


def test_verify_memory_grows_with_the_largest_call_not_the_run(runs) -> None:
    small, small_report = peak(*runs[40])
    large, large_report = peak(*runs[160])

    assert small_report.ok and large_report.ok, (small_report, large_report)
    more_calls = large_report.calls_checked - small_report.calls_checked
    assert more_calls == 120
    # Before: each more call kept its prompt twice (2 x 200 KB more per call, 48 MB here).
    # Now a call's prompt is let go once it is checked: what stays of a call is small.
    assert large - small < more_calls * PROMPT / 5, (small, large)
    assert large < 8 * PROMPT * 10, large  # a few prompts' worth, whatever the run's size


def test_a_prompt_edited_in_the_ledger_is_still_found(runs, tmp_path: Path) -> None:
    # The prompts read one at a time are still checked: digest, chain, layout.
    db, run_id = runs[40]
    path = db.removeprefix("sqlite:///")
    copy = tmp_path / "edited.db"
    with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    with sqlite3.connect(copy) as conn:
        (call_id, messages), *_ = conn.execute(
            "SELECT call_id, messages FROM calls WHERE run_id = ? AND subject = 'task:t7'",
            (run_id,),
        ).fetchall()
        conn.execute(
            "UPDATE calls SET messages = ? WHERE call_id = ?",
            (messages.replace("Work. ", "Leak. ", 1), call_id),
        )
    with RunLedger(f"sqlite:///{copy}") as ledger:
        report = verify_run(ledger, run_id)
    reasons = {(f.call_id, f.reason) for f in report.findings}
    assert (call_id, "the recorded prompt or manifest was altered after the call") in reasons
    assert (call_id, "the record differs from its entry in the hash chain: altered") in reasons
    assert report.calls_checked == 41


def test_a_prompt_that_is_not_json_is_refused_in_one_line(runs, tmp_path: Path) -> None:
    db, run_id = runs[40]
    copy = tmp_path / "broken.db"
    with sqlite3.connect(db.removeprefix("sqlite:///")) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    with sqlite3.connect(copy) as conn:
        conn.execute(
            "UPDATE calls SET messages = 'not json' WHERE run_id = ? AND subject = 'task:t3'",
            (run_id,),
        )
    with RunLedger(f"sqlite:///{copy}") as ledger, pytest.raises(MalformedRecord) as raised:
        verify_run(ledger, run_id)
    assert "its messages" in str(raised.value)
    assert "\n" not in str(raised.value)
