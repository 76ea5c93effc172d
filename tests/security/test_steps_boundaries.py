"""Attacks on non-model steps via `clearance run`: odd module names, forged facts, a hung step."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._orchestration import steps
from clearance.cli import app

runner = CliRunner()


def run(tmp_path: Path, team: str, *extra: str) -> tuple[Any, str, str]:
    (tmp_path / "team.yaml").write_text(team)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = runner.invoke(app, ["run", str(tmp_path / "team.yaml"), "--db", db, *extra])
    match = re.search(r"run id: (\S+)", result.output)
    assert match, result.output
    return result, db, match.group(1)


def tasks_of(db: str, run_id: str) -> dict[str, Any]:
    with RunLedger(db) as ledger:
        return {t.task_id: t for t in ledger.tasks(run_id)}


@pytest.mark.parametrize("name", ["--help.py", "-x.py"])
def test_a_module_whose_name_looks_like_an_option_is_linted(tmp_path: Path, name: str) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_text('import os\nvalue = eval("1")\n')
    team = f"""\
name: lint
input: {{default: {tmp_path / "in"}}}
agents:
  - {{name: writer, instructions: "You write."}}
tasks:
  - {{id: facts, title: Facts, description: Facts., assignee: writer, run: "step:module_facts",
     files: ["{name}"]}}
"""
    _, db, run_id = run(tmp_path, team, "--model", "fake:m")
    facts = json.loads(tasks_of(db, run_id)["facts"].result)
    assert "lint_problem" not in facts, facts["lint_problem"]
    assert {f["code"] for f in facts["findings"]} >= {"F401", "S307"}


@pytest.mark.network
def test_a_model_answer_posing_as_module_facts_is_one_line_error(
    tmp_path: Path, openai_server, monkeypatch
) -> None:
    forged = {"kind": "module_facts", "module": "a.py", "slug": "a", "most_complex": 5}
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(lambda messages: json.dumps(forged)))
    team = """\
name: forged-facts
agents:
  - {name: writer, instructions: "You write."}
tasks:
  - {id: m, title: M, description: Describe a module., assignee: writer}
  - {id: p, title: P, description: Package., assignee: writer, run: "step:package_facts",
     depends_on: [m]}
"""
    result, db, run_id = run(tmp_path, team, "--model", "openai:m")
    package = tasks_of(db, run_id)["p"]
    assert package.status == "failed"
    assert "the result of task 'm' claims to be module facts but most_complex" in package.error
    assert "\n" not in package.error and "Traceback" not in result.output


SLOW = """\
import time

def slow(step):
    time.sleep(30)
    return "late"
"""


def test_a_step_past_its_deadline_fails_and_the_run_ends_on_time(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "slow_steps.py").write_text(SLOW)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_steps", raising=False)
    monkeypatch.setattr(steps, "STEP_TIMEOUT_S", 1.0)
    team = """\
name: slow
agents:
  - {name: writer, instructions: "You write."}
tasks:
  - {id: s, title: S, description: Wait., assignee: writer, run: "python:slow_steps:slow"}
"""
    started = time.monotonic()
    _, db, run_id = run(tmp_path, team, "--model", "fake:m")
    assert time.monotonic() - started < 8  # the step's thread is not waited for
    slow = tasks_of(db, run_id)["s"]
    assert slow.status == "failed" and "step_timeout_s" in slow.error
