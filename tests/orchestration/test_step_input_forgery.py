"""A step's recorded input is checked against its clearance, as a model task's prompt is.

A ``run:`` step gets the results its clearance admits; its ``step`` event records the
function, its files and each result it was given (by hash). ``clearance verify`` passes an
honest run (an ``after_failure: proceed`` step after failed dependencies included) and
fails, hash chain rebuilt, on an event that names a task outside the step's clearance, a
result other than that task's recorded one, another function or other files.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.verify import verify_run
from clearance._core.prompt import sha256_text
from clearance.cli import app

STEPS = """\
import json


def show(step):
    return json.dumps({"results": sorted(step.results), "failed": sorted(step.failed)})


def boom(step):
    raise RuntimeError("no luck")
"""

TEAM = """\
name: step-inputs
agents:
  - {name: lead, instructions: "You lead."}
tasks:
  - {id: secret, title: Secret, description: Keep it., assignee: lead}
  - {id: pub, title: Pub, description: Share it., assignee: lead}
  - {id: bad, title: Bad, description: Fail., assignee: lead, run: "python:forge_steps:boom"}
  - {id: s, title: S, description: Show., assignee: lead, depends_on: [pub, bad],
     after_failure: proceed, run: "python:forge_steps:show"}
"""


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    (tmp_path / "forge_steps.py").write_text(STEPS)
    (tmp_path / "team.yaml").write_text(TEAM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "forge_steps", raising=False)
    db = tmp_path / "runs.db"
    result = CliRunner().invoke(
        app, ["run", "team.yaml", "--model", "fake:m", "--db", f"sqlite:///{db}"]
    )
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    with RunLedger(f"sqlite:///{db}") as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        assert tasks["bad"].status == "failed"
        assert json.loads(tasks["s"].result or "") == {"results": ["pub"], "failed": ["bad"]}
        report = verify_run(ledger, run_id)
        assert report.ok, report.findings
    return db, run_id


def _forge(
    db: Path, run_id: str, rechain: Any, edit: Callable[[dict[str, Any]], None]
) -> list[str]:
    conn = sqlite3.connect(db)
    (event_id, data) = conn.execute(
        "SELECT event_id, data FROM events WHERE kind = 'step' AND subject = 'task:s'"
    ).fetchone()
    data = json.loads(data)
    edit(data)
    conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id))
    conn.commit()
    conn.close()
    rechain(db, run_id)
    with RunLedger(f"sqlite:///{db}") as ledger:
        report = verify_run(ledger, run_id)
        secret = next(t.result for t in ledger.tasks(run_id) if t.task_id == "secret")
    assert secret is not None
    assert not report.ok
    return [f.reason for f in report.findings if f.subject == "task:s"]


def _secret_hash(db: Path) -> str:
    conn = sqlite3.connect(db)
    (result,) = conn.execute("SELECT result FROM tasks WHERE task_id = 'secret'").fetchone()
    conn.close()
    return sha256_text(result)


def test_a_step_given_a_result_outside_its_clearance_is_a_finding(recorded, rechain) -> None:
    db, run_id = recorded
    digest = _secret_hash(db)
    reasons = _forge(db, run_id, rechain, lambda d: d["results"].update(secret=digest))
    assert reasons == ["the step was given task 'secret', outside its clearance"]


def test_a_step_given_a_failure_outside_its_clearance_is_a_finding(recorded, rechain) -> None:
    db, run_id = recorded
    reasons = _forge(db, run_id, rechain, lambda d: d["failed"].append("secret"))
    assert reasons == ["the step was given task 'secret', outside its clearance"]


def test_a_step_given_another_result_than_recorded_is_a_finding(recorded, rechain) -> None:
    db, run_id = recorded
    reasons = _forge(db, run_id, rechain, lambda d: d["results"].update(pub=sha256_text("x")))
    assert reasons == [
        "the step was given a result of task 'pub' other than its own recorded result"
    ]


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda d: d.update(run="python:forge_steps:boom"),
         "the step event is not of a step task of the recorded graph"),
        (lambda d: d["files"].update({"notes.txt": sha256_text("n")}),
         "the step event's files are not the task's files"),
    ],
)  # fmt: skip
def test_a_step_event_of_another_function_or_files_is_a_finding(
    recorded, rechain, edit: Callable[[dict[str, Any]], None], reason: str
) -> None:
    db, run_id = recorded
    assert _forge(db, run_id, rechain, edit) == [reason]


FLAKY = """\
import json
import os


def flaky(step):
    if not os.path.exists("ready"):
        raise RuntimeError("not yet")
    return "ready now"


def show(step):
    return json.dumps({"results": sorted(step.results), "failed": sorted(step.failed)})
"""

RESUMED = """\
name: step-resume
agents:
  - {name: lead, instructions: "You lead."}
tasks:
  - {id: a, title: A, description: Think., assignee: lead}
  - {id: b, title: B, description: Flaky., assignee: lead, run: "python:flaky_steps:flaky"}
  - {id: p, title: P, description: Go on., assignee: lead, depends_on: [a, b],
     after_failure: proceed, run: "python:flaky_steps:show"}
  - {id: s, title: S, description: Wait., assignee: lead, depends_on: [a, b],
     run: "python:flaky_steps:show"}
"""


def test_steps_of_a_resumed_run_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "flaky_steps.py").write_text(FLAKY)
    (tmp_path / "team.yaml").write_text(RESUMED)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "flaky_steps", raising=False)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    first = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:m", "--db", db])
    run_id = re.search(r"run id: (\S+)", first.output).group(1)  # type: ignore[union-attr]
    (tmp_path / "ready").write_text("")
    CliRunner().invoke(
        app, ["resume", run_id, "--team", "team.yaml", "--model", "fake:m", "--db", db]
    )
    with RunLedger(db) as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        report = verify_run(ledger, run_id)
    assert {t: r.status for t, r in tasks.items()} == dict.fromkeys("abps", "completed")
    assert json.loads(tasks["p"].result or "") == {"results": ["a"], "failed": ["b"]}
    assert json.loads(tasks["s"].result or "") == {"results": ["a", "b"], "failed": []}
    assert report.ok, report.findings
