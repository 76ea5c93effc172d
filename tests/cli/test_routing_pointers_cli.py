"""Edge conditions whose JSON Pointers are odd, through ``clearance run`` on the fake model.

A pointer token into an array is an index only when it is ASCII digits (RFC 6901): Python
reads an Arabic-Indic one as 1 and fails on ``"²"``, which crashed the run with a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._core.routing import EdgeCondition
from clearance.cli._app import app

TEAM = """\
name: routed
model: fake:x
agents:
  - {name: alpha, instructions: "A."}
tasks:
  - id: a
    title: A
    description: Answer.
    assignee: alpha
    output_schema:
      type: object
      properties: {l: {type: array, items: {const: x}, minItems: 3}, "a/b~c": {const: 7}}
      required: [l, "a/b~c"]
  - id: b
    title: B
    description: Follow up.
    assignee: alpha
    depends_on: [{task: a, when: {"POINTER": VALUE}}]
"""


@pytest.mark.parametrize(
    ("pointer", "value", "status"),
    [
        ("/l/²", '"x"', "skipped"),
        ("/l/\u0661", '"x"', "skipped"),
        ("/l/1", '"x"', "completed"),
        ("/l/01", '"x"', "skipped"),
        ("/l/" + "9" * 900, '"x"', "skipped"),
        ("/a~1b~0c", "7", "completed"),
        ("/a~1b~0c", '"7"', "skipped"),
        ("/l", '["x", "x", "x"]', "completed"),
        ("/l", "3", "skipped"),
    ],
)
def test_a_pointer_routes_as_rfc_6901_reads_it(tmp_path: Path, monkeypatch, pointer, value, status):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.replace("POINTER", pointer).replace("VALUE", value))
    db = f"sqlite:///{tmp_path}/runs.db"
    result = CliRunner().invoke(app, ["run", str(path), "--db", db])
    assert result.exit_code == 0, result.output
    ledger = RunLedger(db)
    (run,) = ledger.list_runs()
    tasks = {t.task_id: t for t in ledger.tasks(run.run_id)}
    assert tasks["a"].status == "completed"
    assert tasks["b"].status == status
    if status == "skipped":
        assert (tasks["b"].error or "").startswith("skipped: condition not met: ")
    assert CliRunner().invoke(app, ["verify", run.run_id, "--db", db]).exit_code == 0


def test_an_index_of_thousands_of_digits_leads_nowhere():
    condition = EdgeCondition.of("a", {"/l/" + "1" * 5_000: "x"})
    assert "is absent" in (condition.unmet(json.dumps({"l": ["x"] * 3})) or "")
