"""Hooks have a deadline: a coroutine hook that never returns fails what it was called for
(its task, or the run, left resumable) in about its ``timeout_s``, naming the hook; it never
hangs the run. Real SQLite ledgers, the fake model."""

from __future__ import annotations

import asyncio
import time

import pytest

from clearance import Agent, Orchestrator, RunHooks, RunLedger, RunServices, Task, Team
from clearance._context.verify import verify_run
from clearance._core.errors import ConfigError, LimitExceeded
from clearance._core.hooks import HookRunner, RunInfo, TaskInfo
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="alice", instructions="A."),))
TASKS = [
    Task(id="a", title="A", description="Do a.", assignee="alice"),
    Task(id="b", title="B", description="Do b.", assignee="alice"),
]


class Stuck(RunHooks):
    """Never returns from one method (``method``); quick everywhere else."""

    timeout_s = 0.2

    def __init__(self, method: str, task_id: str = "a") -> None:
        self.method, self.task_id = method, task_id

    async def _hang(self, task: TaskInfo) -> None:
        if self.method != "before_run" and task.task_id == self.task_id:
            await asyncio.Event().wait()

    async def before_run(self, run: RunInfo) -> None:
        if self.method == "before_run":
            await asyncio.Event().wait()

    async def before_task(self, task: TaskInfo) -> None:
        if self.method == "before_task":
            await self._hang(task)

    async def task_context(self, task: TaskInfo) -> None:
        if self.method == "task_context":
            await self._hang(task)


async def _run(tmp_path, hook: RunHooks):
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    orch = Orchestrator(TEAM, model=FunctionModel(lambda request: "DONE"), ledger=ledger,
                        services=RunServices(hooks=(hook,)))  # fmt: skip
    started = time.monotonic()
    result = await asyncio.wait_for(orch.run_tasks(TASKS), timeout=10)
    return ledger, result, time.monotonic() - started


@pytest.mark.parametrize("method", ["before_task", "task_context"])
async def test_a_hook_that_hangs_around_a_task_fails_that_task_only(tmp_path, method):
    ledger, result, took = await _run(tmp_path, Stuck(method))
    assert took < 3
    assert result.tasks["a"].status == "failed"
    assert f"Stuck.{method}" in result.tasks["a"].error and "0.2" in result.tasks["a"].error
    assert result.tasks["b"].status == "completed"  # the rest of the run goes on
    assert verify_run(ledger, result.run_id).ok
    ledger.close()


async def test_a_hook_that_hangs_before_the_run_stops_it_resumably(tmp_path):
    started = time.monotonic()
    with pytest.raises(LimitExceeded, match=r"hook Stuck\.before_run: timeout_s exceeded"):
        await _run(tmp_path, Stuck("before_run"))
    assert time.monotonic() - started < 3
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}", create=False) as ledger:
        (run,) = ledger.list_runs()
        assert run.status == "interrupted"  # resumable


async def test_a_quick_hook_is_not_cut_short():
    class Quick(RunHooks):
        timeout_s = 5.0

        async def before_task(self, task: TaskInfo) -> None:
            await asyncio.sleep(0.05)

    await HookRunner([Quick()])("before_task", TaskInfo(run_id="r", task_id="t", agent="a"))


async def test_the_deadline_is_the_hooks_not_an_error_it_raises():
    class Broken(RunHooks):
        async def before_task(self, task: TaskInfo) -> None:
            raise TimeoutError("the hook's own service timed out")

    with pytest.raises(TimeoutError, match="own service"):
        await HookRunner([Broken()])("before_task", TaskInfo(run_id="r", task_id="t", agent="a"))
    with pytest.raises(LimitExceeded):
        await HookRunner([Stuck("before_task", "t")])(
            "before_task", TaskInfo(run_id="r", task_id="t", agent="a")
        )


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "60", 86_401])
def test_a_hook_deadline_out_of_range_is_refused(value):
    class Odd(RunHooks):
        timeout_s = value

    with pytest.raises(ConfigError, match=r"hooks\.Odd\.timeout_s"):
        HookRunner([Odd()])
    with pytest.raises(ConfigError, match=r"hooks\.Odd\.timeout_s"):  # before any run starts
        RunServices(hooks=(Odd(),))
