"""A ``run: python:`` step that raises odd exceptions or returns odd values fails its task only.

Before: a step raising `StopIteration` could not be set on the awaited future (asyncio
refuses it), so its task waited for the step's whole deadline (300 s) with a traceback on
stderr; a `SystemExit` (a library calling ``sys.exit``, argparse on a bad argument) or a
`KeyboardInterrupt` raised in the step's thread reached the event loop and stopped the
whole run, leaving the other tasks unfinished; an exception whose ``__str__`` raises, a value
nested too deeply for JSON or text with lone surrogates failed with a raw Python error.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from clearance import Agent, Orchestrator, RunLedger, Task, Team

ODD = """\
import sys


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message")


def stop(step):
    raise StopIteration("done")


def leave(step):
    sys.exit(3)


def interrupt(step):
    raise KeyboardInterrupt


def unprintable(step):
    raise Unprintable()


def deep(step):
    value = []
    for _ in range(100_000):
        value = [value]
    return value


def surrogate(step):
    return "half \\ud800 a character"


def ok(step):
    return "fine"
"""

CASES = {
    "stop": "raised StopIteration: done",
    "leave": "raised SystemExit: 3",
    "interrupt": "raised KeyboardInterrupt",
    "unprintable": "raised Unprintable: (its message cannot be shown)",
    "deep": "neither text nor JSON-ready data: RecursionError",
    "surrogate": "not valid Unicode",
}


@pytest.fixture
def odd_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "odd_steps.py").write_text(ODD)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "odd_steps", raising=False)


@pytest.mark.parametrize("name", sorted(CASES))
async def test_an_odd_exception_fails_its_task_at_once_and_the_run_goes_on(
    name: str, odd_steps: None, tmp_path: Path
) -> None:
    team = Team(agents=(Agent(name="a", instructions="Do."),))
    step = f"python:odd_steps:{name}"
    tasks = [
        Task(id="first", title="F", description="d", assignee="", run="python:odd_steps:ok"),
        Task(id="odd", title="O", description="d", assignee="", run=step, depends_on=("first",)),
        Task(id="after", title="A", description="d", assignee="", run="python:odd_steps:ok",
             depends_on=("first",)),
    ]  # fmt: skip
    started = time.monotonic()
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(team, model="fake:echo", ledger=ledger).run_tasks(tasks)
        recorded = {t.task_id: t for t in ledger.tasks(result.run_id)}
    assert time.monotonic() - started < 10  # not the step's 300 s deadline
    odd = result.tasks["odd"]
    assert str(odd.status) == "failed"
    assert odd.error is not None and CASES[name] in odd.error, odd.error
    assert "\n" not in odd.error
    # Nothing finished is lost: the other tasks completed and are recorded as such.
    for task_id in ("first", "after"):
        assert result.tasks[task_id].result == "fine"
        assert recorded[task_id].status == "completed"
    assert recorded["odd"].status == "failed"


HANGING_IMPORT = """\
import time

time.sleep(30)


def never(step):
    return "late"
"""

EXITING_IMPORT = """\
import sys

sys.exit("not a library")
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [(HANGING_IMPORT, "step_timeout_s"), (EXITING_IMPORT, "': SystemExit: not a library")],
)
async def test_a_step_module_whose_import_hangs_or_exits_fails_its_step_on_time(
    source: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `run_step` imported the module on the event loop, outside the step's
    deadline: an import that sleeps froze every task of the run for as long, and one
    calling ``sys.exit`` stopped the run. (A run's graph check imports step modules before
    the run starts; a ``sys.exit`` there is a one-line error too:
    `test_module_exit_on_import`.)"""
    from clearance import ClearanceError
    from clearance._orchestration.steps import run_step

    name = f"odd_import_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    task = Task(id="odd", title="O", description="d", assignee="", run=f"python:{name}:never")
    started = time.monotonic()
    with pytest.raises(ClearanceError) as info:
        await run_step(task, files={}, results={}, failed={}, input_name="", timeout_s=1.0)
    assert time.monotonic() - started < 5
    assert expected in str(info.value)
