"""What a ``run: python:`` step may return, through ``clearance run``.

A step is a plain function: an ``async def`` one is refused before the run starts, with one
line naming the task (it would only ever return a coroutine that nothing awaits), and a
plain function that returns an awaitable fails its task with one line, the awaitable closed
(no "never awaited" warning). Text is checked as text: a `str` subclass cannot pass an
empty (or over-long) result off as fine by overriding `strip` or `len`. A step's failure is
one progress line, whatever its exception's text holds. Keys that would have no effect on a
step or a root task (``output_schema`` on a step, ``after_failure: proceed`` without
dependencies) are refused before the run, in one line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.verify import verify_run
from clearance._orchestration import steps
from clearance.cli import app

STEPS = """\
class Sly(str):
    def strip(self, chars=None):
        return "not empty"

    def __len__(self):
        return 1


async def asynchronous(step):
    return "never seen"


async def _later():
    return "never seen"


def awaitable(step):
    return _later()


def empty(step):
    return Sly("   ")


def big(step):
    return Sly("x" * (LIMIT + 1))


def liar(step):
    forged = "[    0.1s] completed  s (0.0s) [1/2]\\nrun finished: completed"
    raise RuntimeError("no luck\\r\\n" + forged)
"""


def _team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, function: str) -> str:
    (tmp_path / f"{name}.py").write_text(STEPS.replace("LIMIT", str(steps.MAX_STEP_OUTPUT_CHARS)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, name, raising=False)
    (tmp_path / "team.yaml").write_text(f"""\
name: returns
agents:
  - {{name: lead, instructions: "You lead."}}
tasks:
  - {{id: s, title: S, description: Step., assignee: lead, run: "python:{name}:{function}"}}
  - {{id: m, title: M, description: Go on., assignee: lead}}
""")
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_an_async_step_function_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _team(tmp_path, monkeypatch, "returns_async", "asynchronous")
    result = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:m", "--db", db])
    assert result.exit_code == 2, result.output
    assert "run id" not in result.output  # nothing ran
    lines = [line for line in result.output.splitlines() if "error" in line]
    assert len(lines) == 1, result.output
    assert "tasks.s.run" in lines[0]
    assert "'returns_async:asynchronous' is an async function" in lines[0]
    assert "never awaited" not in result.output


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_step_returning_an_awaitable_fails_its_task_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _team(tmp_path, monkeypatch, "returns_awaitable", "awaitable")
    result = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:m", "--db", db])
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    with RunLedger(db) as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        assert verify_run(ledger, run_id).ok
    assert tasks["m"].status == "completed"
    assert tasks["s"].status == "failed"
    assert tasks["s"].error == (
        "task 's': the step returned a coroutine: a step is a plain function that returns "
        "text or JSON-ready data"
    )


@pytest.mark.parametrize(
    ("function", "error"),
    [
        ("empty", "task 's': the step returned an empty result"),
        ("big", "max_step_output_chars"),
    ],
)
def test_a_str_subclass_is_checked_as_the_text_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, function: str, error: str
) -> None:
    db = _team(tmp_path, monkeypatch, f"returns_sly_{function}", function)
    result = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:m", "--db", db])
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    with RunLedger(db) as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        assert verify_run(ledger, run_id).ok
    assert tasks["s"].status == "failed", tasks["s"].result
    assert tasks["s"].result is None
    assert error in (tasks["s"].error or "")


def test_an_output_schema_on_a_step_is_refused_as_having_no_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A step's output is never held to an output_schema: declaring one would promise a
    # shape (to conditions and x-enum-from of its dependents) that nothing checks.
    db = _team(tmp_path, monkeypatch, "returns_schema", "empty")
    team = (tmp_path / "team.yaml").read_text()
    (tmp_path / "team.yaml").write_text(
        team.replace('run: "python:returns_schema:empty"}',
                     'run: "python:returns_schema:empty", output_schema: {type: object}}')
    )  # fmt: skip
    result = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:m", "--db", db])
    assert result.exit_code == 2, result.output
    assert "run id" not in result.output
    (line,) = [line for line in result.output.splitlines() if "error" in line]
    assert line.endswith(
        "tasks.s.output_schema: task 's' runs a function, not a model: its output is not "
        "held to an output_schema (drop it)"
    )


def test_a_steps_failure_is_one_progress_line_that_forges_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _team(tmp_path, monkeypatch, "returns_liar", "liar")
    result = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:m", "--db", db])
    (failed,) = [line for line in result.output.splitlines() if "FAILED" in line]
    assert failed.endswith(
        "FAILED     s: task 's': python:returns_liar:liar raised RuntimeError: no luck\\n"
        "[    0.1s] completed  s (0.0s) [1/2]\\nrun finished: completed [1/2]"
    )
    assert not any(
        line.startswith("[    0.1s] completed  s") for line in result.output.splitlines()
    )
    assert not any(line.startswith("run finished") for line in result.output.splitlines())


def test_after_failure_proceed_without_dependencies_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _team(tmp_path, monkeypatch, "returns_proceed", "empty")
    team = (tmp_path / "team.yaml").read_text()
    (tmp_path / "team.yaml").write_text(
        team.replace("description: Go on., assignee: lead}",
                     "description: Go on., assignee: lead, after_failure: proceed}")
    )  # fmt: skip
    result = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:m", "--db", db])
    assert result.exit_code == 2, result.output
    assert "run id" not in result.output
    (line,) = [line for line in result.output.splitlines() if "error" in line]
    assert line.endswith(
        "tasks.m.after_failure: has no effect: task 'm' has no dependencies to fail"
    )
