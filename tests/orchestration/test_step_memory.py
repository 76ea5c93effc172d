"""A ``run:`` step is not its assignee: it neither recalls nor records the agent's memory.

A step's assignee is only a label: the step is the team file's own Python code, not the
agent's model. Its output must not enter the agent's long-term memory (where a later run
would recall it as something the agent wrote with its model), nothing is recalled for it
(it is given no memories), and a step assigned to a name that is no agent runs the same
with memory as without.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.verify import verify_run
from clearance.cli import app

STEPS = """\
def facts(step):
    return "STEP-OUTPUT-NOT-A-MEMORY"
"""


def test_a_step_neither_recalls_nor_records_its_assignees_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "memory_steps.py").write_text(STEPS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "memory_steps", raising=False)
    (tmp_path / "team.yaml").write_text(f"""\
name: step-memory
memory: {{url: "sqlite:///{tmp_path / "memory.db"}", on_error: fail}}
agents:
  - {{name: lead, instructions: "You lead.", memory: {{recall: 3, record: result}}}}
tasks:
  - {{id: s, title: S, description: Facts., assignee: lead, run: "python:memory_steps:facts"}}
  - {{id: g, title: G, description: Facts., assignee: label, run: "python:memory_steps:facts"}}
  - {{id: m, title: M, description: Think., assignee: lead}}
""")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:m", "--db", db])
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    with RunLedger(db) as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        notes = sorted((c.subject, c.name) for c in ledger.tool_calls(run_id))
        assert verify_run(ledger, run_id).ok
    assert {t: r.status for t, r in tasks.items()} == {
        "s": "completed", "g": "completed", "m": "completed",
    }, {t: r.error for t, r in tasks.items()}  # fmt: skip
    assert notes == [("task:m", "memory_recall"), ("task:m", "memory_record")]
    conn = sqlite3.connect(tmp_path / "memory.db")
    contents = [row[0] for row in conn.execute("SELECT content FROM clearance_memories")]
    conn.close()
    assert len(contents) == 1
    assert "STEP-OUTPUT-NOT-A-MEMORY" not in contents[0]
