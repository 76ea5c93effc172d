"""``clearance inspect --json`` writes standard JSON (RFC 8259), whatever the ledger holds.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``-Infinity`` from a JSON column (the
ledger's own writer stores a NaN that way when orjson cannot) and wrote them back out as
is: a document ``jq``, JavaScript's ``JSON.parse`` or any strict parser refuses whole. Now a
number that is not finite is written ``null``, as ``JSON.stringify`` does; every other value
is unchanged.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance.cli import app
from clearance.testing import FunctionModel

runner = CliRunner()


def _strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"not standard JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


async def _record(tmp_path: Path) -> tuple[str, str]:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    team = Team(agents=(Agent(name="w", instructions="You write."),), name="nan")
    tasks = [Task(id="a", title="A", description="Answer.", assignee="w")]
    with RunLedger(db) as ledger:
        orchestrator = Orchestrator(team, model=FunctionModel(lambda r: "fine"), ledger=ledger)
        result = await orchestrator.run_tasks(tasks)
    return db, result.run_id


def _forge_json(db: str, table: str, column: str, key: str, value: float, run_id: str) -> str:
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    rowid, text = conn.execute(
        f"SELECT rowid, {column} FROM {table} WHERE run_id = ? LIMIT 1", (run_id,)
    ).fetchone()
    data = json.loads(text) if text is not None else {}
    data[key] = value
    data[f"{key}_list"] = [1.5, value, "kept"]
    stored = json.dumps(data)  # Python's json writes NaN / -Infinity, as the ledger may
    conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (stored, rowid))
    conn.commit()
    conn.close()
    return stored


async def test_inspect_json_writes_non_finite_numbers_as_null(tmp_path):
    db, run_id = await _record(tmp_path)
    assert "NaN" in _forge_json(db, "runs", "config", "forged_nan", float("nan"), run_id)
    assert "-Infinity" in _forge_json(
        db, "calls", "parameters", "forged_inf", float("-inf"), run_id
    )

    shown = runner.invoke(app, ["inspect", run_id, "--db", db, "--json"])
    assert shown.exit_code == 0, shown.output
    document = _strict(shown.stdout)  # raised on NaN / -Infinity before
    assert isinstance(document, dict)
    config = document["run"]["config"]
    assert config["forged_nan"] is None and config["forged_nan_list"] == [1.5, None, "kept"]
    (call,) = [c for c in document["calls"] if "forged_inf" in (c["parameters"] or {})]
    assert call["parameters"]["forged_inf"] is None
    assert call["parameters"]["forged_inf_list"] == [1.5, None, "kept"]
    assert document["run"]["run_id"] == run_id  # the rest is as it was
    assert document["tasks"][0]["result"] == "fine"
