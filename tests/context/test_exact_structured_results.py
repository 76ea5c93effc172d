"""An ``output_schema`` result reaches its dependents with its numbers exactly as answered.

Driven through ``clearance run`` against a model server on 127.0.0.1: the dependent's request
holds the canonical JSON with every number as the model wrote it (high precision, a big
integer, exponent forms, negative zero), ``clearance verify`` passes, and one digit changed
in the recorded result is a finding. A run recorded before numbers were kept exactly
(``prompt_format`` 4: its results rounded through floats) still verifies; in a run of the
current format that rounding is a finding.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._orchestration import structured
from clearance.cli._app import app
from clearance.testing import FunctionModel

pytestmark = pytest.mark.network

SCHEMA = {
    "type": "object",
    "required": ["pi", "big", "ratio", "count"],
    "properties": {
        "pi": {"type": "number", "minimum": 3.14, "maximum": 3.15},
        "big": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number", "multipleOf": 0.01},  # 0.07: not through floats
        "count": {"type": "integer"},
    },
}
ANSWER = (
    '{"pi": 3.14159265358979323846, "big": 123456789012345678901234567890, '
    '"ratio": 0.07, "count": 1.0E2, "tiny": 2.5e-300, "huge": 1.7976931348623157E+308, '
    '"neg_zero": -0, "neg_zero_f": -0.0, "precise": 0.1000000000000000055511151231257827}'
)
CANONICAL = """{
  "big": 123456789012345678901234567890,
  "count": 1.0E2,
  "huge": 1.7976931348623157E+308,
  "neg_zero": -0,
  "neg_zero_f": -0.0,
  "pi": 3.14159265358979323846,
  "precise": 0.1000000000000000055511151231257827,
  "ratio": 0.07,
  "tiny": 2.5e-300
}"""
TEAM = {
    "name": "exact-numbers",
    "agents": [{"name": "alpha", "instructions": "You answer."}],
    "tasks": [
        {"id": "m", "title": "Measure", "description": "Measure it.", "assignee": "alpha",
         "output_schema": SCHEMA},
        {"id": "u", "title": "Use", "description": "Use the measures.", "assignee": "alpha",
         "depends_on": ["m"]},
    ],
}  # fmt: skip


def reply(messages: list[dict[str, Any]]) -> str:
    return ANSWER if "Measure it." in messages[-1]["content"] else "used"


def cli_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openai_server: Any) -> Any:
    (tmp_path / "team.yaml").write_text(json.dumps(TEAM))  # JSON is YAML
    url = openai_server(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    out = CliRunner().invoke(app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m",
                                   "--db", db])  # fmt: skip
    assert out.exit_code == 0, out.output
    match = re.search(r"run id: (\S+)", out.output)
    assert match is not None, out.output
    return url, db, match.group(1)


def test_the_dependent_receives_every_number_as_answered_and_verify_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openai_server: Any
) -> None:
    url, db, run_id = cli_run(tmp_path, monkeypatch, openai_server)
    (use,) = [b for b in url.bodies if "Use the measures." in b["messages"][-1]["content"]]
    content = use["messages"][-1]["content"]
    block = re.search(r"(?m)^(`{3,}|~{3,})[^\n]*\n" + re.escape(CANONICAL) + r"\n\1$", content)
    assert block is not None, content  # the whole result, fenced, byte for byte
    assert "3.141592653589793\n" not in content and '"neg_zero": 0' not in content
    with RunLedger(db) as ledger:
        results = {t.task_id: t.result for t in ledger.tasks(run_id)}
    assert results["m"] == CANONICAL
    verified = CliRunner().invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output


def test_one_digit_changed_in_the_recorded_result_fails_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openai_server: Any
) -> None:
    _, db, run_id = cli_run(tmp_path, monkeypatch, openai_server)
    with sqlite3.connect(tmp_path / "runs.db") as con:
        changed = CANONICAL.replace("3.14159265358979323846", "3.14159265358979323847")
        con.execute("UPDATE tasks SET result = ? WHERE task_id = 'm'", (changed,))
    verified = CliRunner().invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 1, verified.output
    assert "the task's recorded result is not the response of its last call" in verified.output


async def run_recorded_as(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fmt: int) -> Any:
    """A run whose structured result was kept as the code before exact numbers kept it."""

    def legacy(body: str, schema: dict[str, Any]) -> str:
        value = json.loads(body)  # through floats
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, allow_nan=False)

    monkeypatch.setattr(structured, "_validated_json_value", legacy)
    monkeypatch.setattr("clearance._orchestration.resume.PROMPT_FORMAT", fmt)
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    model = FunctionModel(lambda r: ANSWER if "Measure it." in r.prompt.text else "used")
    team = Team(agents=(Agent(name="alpha", instructions="You answer."),))
    tasks = [
        Task(id="m", title="Measure", description="Measure it.", assignee="alpha",
             output_schema={"type": "object"}),
        Task(id="u", title="Use", description="Use the measures.", assignee="alpha",
             depends_on=("m",)),
    ]  # fmt: skip
    result = await Orchestrator(team, model=model, ledger=ledger).run_tasks(tasks)
    assert result.status == "completed"
    assert '"pi": 3.141592653589793,' in (result.result("m") or "")  # rounded, as before
    assert ledger.get_run(result.run_id).config["prompt_format"] == fmt
    return verify_run(ledger, result.run_id)


async def test_a_run_recorded_before_exact_numbers_still_verifies(monkeypatch, tmp_path):
    report = await run_recorded_as(monkeypatch, tmp_path, 4)
    assert report.ok, report.findings


async def test_a_result_rounded_through_floats_is_a_finding_in_a_current_run(monkeypatch, tmp_path):
    report = await run_recorded_as(monkeypatch, tmp_path, 5)
    assert not report.ok
    reasons = [f.reason for f in report.findings]
    assert reasons == ["the task's recorded result is not the response of its last call"]
