"""``verify --store`` tells the version a run read from the live one by the entry's version.

It took "the same ``updated_at``" for "the same version". Two writes of one entry within
one tick of the store's clock (or a clock stepped back to the same instant) share an
``updated_at``: an honest read of the first write, checked against the second, was reported
as "the content is not the value in the store". Each read now records the entry's version
(its count of writes), and only a read of the live version (same version and
``updated_at``) is compared with the stored value.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from clearance import Agent, ContextStore, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.cli import app
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
STALE = "the content is not the value in the store"


def _frozen() -> datetime:
    return NOW


def _answer(request: ModelRequest) -> Any:
    if request.prompt.manifest.subject == "synthesis":
        return "SYNTHESIS"
    if "## Results of your tool calls" in request.prompt.messages[-1].content:
        return "done"
    return ToolCall(id="g", name="store_get", arguments={"namespace": "notes", "key": "plan"})


async def _run(tmp_path: Path, store: ContextStore) -> tuple[Path, str]:
    """A run whose agent reads notes/plan once (the store's clock never moves)."""
    team = Team(agents=(Agent(name="lead", instructions="You lead.", tools=("store_get",),
                              store_grants={"notes": "read"}),))  # fmt: skip
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            team, model=FunctionModel(_answer), ledger=ledger, store=store,
            options=RunOptions(workspace_root=tmp_path / "ws"),
        ).run_tasks([Task(id="t", title="T", description="Read.", assignee="lead")])  # fmt: skip
        assert result.status == "completed", result.error
    return db, result.run_id


def _reads(db: Path) -> list[dict[str, Any]]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        (run,) = ledger.list_runs()
        (call,) = ledger.tool_calls(run.run_id)
    return call.store_reads


def _findings(db: Path, run_id: str, store: ContextStore) -> list[str]:
    with RunLedger(f"sqlite:///{db}") as ledger:
        return [str(f) for f in verify_run(ledger, run_id, store=store.get_entry).findings]


def _cli_verify(db: Path, run_id: str, store: Path) -> tuple[int, str]:
    args = ["verify", run_id, "--db", f"sqlite:///{db}", "--store", f"sqlite:///{store}"]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


async def test_an_honest_read_of_an_entry_written_again_within_one_tick_verifies(tmp_path):
    path = tmp_path / "store.db"
    store = ContextStore(f"sqlite:///{path}", clock=_frozen)
    store.set("notes", "plan", "Ship on Friday.", "writer")
    db, run_id = await _run(tmp_path, store)
    (read,) = _reads(db)
    assert (read["version"], read["updated_at"]) == (1, NOW.isoformat())
    store.set("notes", "plan", "Ship on Monday.", "writer")  # the same tick: same updated_at
    live = store.get_entry("notes", "plan")
    assert live is not None and live.updated_at == NOW and live.version == 2
    assert _findings(db, run_id, store) == []  # written since the read: nothing to compare
    store.close()
    code, output = _cli_verify(db, run_id, path)
    assert code == 0, output
    assert "model calls verified" in output


async def test_an_honest_read_of_the_second_write_within_one_tick_verifies(tmp_path):
    path = tmp_path / "store.db"
    store = ContextStore(f"sqlite:///{path}", clock=_frozen)
    store.set("notes", "plan", "Ship on Friday.", "writer")
    store.set("notes", "plan", "Ship on Monday.", "writer")
    db, run_id = await _run(tmp_path, store)
    assert _reads(db)[0]["version"] == 2
    assert _findings(db, run_id, store) == []
    store.close()
    code, output = _cli_verify(db, run_id, path)
    assert code == 0, output


async def test_a_read_of_the_first_write_passed_off_as_the_live_version_is_a_finding(
    tmp_path, rechain
):
    """The recorded read holds the first write's value, but names the live (second) version."""
    path = tmp_path / "store.db"
    store = ContextStore(f"sqlite:///{path}", clock=_frozen)
    store.set("notes", "plan", "Ship on Friday.", "writer")
    db, run_id = await _run(tmp_path, store)
    store.set("notes", "plan", "Ship on Monday.", "writer")
    conn = sqlite3.connect(db)
    try:
        call_id, reads = conn.execute("SELECT tool_call_id, store_reads FROM tool_calls").fetchone()
        reads = [{**r, "version": 2} for r in json.loads(reads)]
        conn.execute("UPDATE tool_calls SET store_reads = ? WHERE tool_call_id = ?",
                     (json.dumps(reads), call_id))  # fmt: skip
        conn.commit()
    finally:
        conn.close()
    rechain(db, run_id)
    found = _findings(db, run_id, store)
    assert any(STALE in f for f in found), found
    store.close()
    code, output = _cli_verify(db, run_id, path)
    assert code == 1, output
    assert STALE in output


async def test_a_read_recorded_before_versions_is_still_compared_by_updated_at(tmp_path, rechain):
    """An older run's read names no version: the same ``updated_at`` still means compare."""
    path = tmp_path / "store.db"
    store = ContextStore(f"sqlite:///{path}", clock=_frozen)
    store.set("notes", "plan", "Ship on Friday.", "writer")
    db, run_id = await _run(tmp_path, store)
    conn = sqlite3.connect(db)
    try:
        call_id, reads = conn.execute("SELECT tool_call_id, store_reads FROM tool_calls").fetchone()
        reads = [{k: v for k, v in r.items() if k != "version"} for r in json.loads(reads)]
        conn.execute("UPDATE tool_calls SET store_reads = ? WHERE tool_call_id = ?",
                     (json.dumps(reads), call_id))  # fmt: skip
        conn.commit()
    finally:
        conn.close()
    rechain(db, run_id)
    assert _findings(db, run_id, store) == []
    store.set("notes", "plan", "Ship on Monday.", "writer")
    found = _findings(db, run_id, store)  # nothing tells the two writes apart: compared
    assert any(STALE in f for f in found), found
    store.close()
