"""A resumed run records exactly the tasks it resets: the ledger reads as if it wrote them all.

Before tasks got their first row lazily, a run (and each resumed session) wrote every task
not kept at its start. Now a session writes only the tasks whose state differs from what the
ledger reads: a failed, skipped or interrupted task reset, an unstarted task made ready by
the results kept. What the ledger reads during the resumed session is what it read before.
"""

import asyncio

import pytest

from clearance import Agent, Orchestrator, RunOptions, Task, TaskStatus, Team
from clearance._context.verify import verify_run
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(Agent(name="v", instructions="You are V."), Agent(name="w", instructions="You are W.")),
    coordinator=Agent(name="lead", instructions="You lead."),
)
TASKS = [
    Task(id="a", title="A", description="do a", assignee="v"),
    Task(id="b", title="B", description="do b", assignee="w"),
    Task(id="c", title="C", description="do c", assignee="v", depends_on=("a",)),
    Task(id="d", title="D", description="do d", assignee="w", depends_on=("b", "c")),
]


def subject(request):
    return request.prompt.manifest.subject


def snapshotting(ledger, run_id, seen):
    """A model answering every call, noting what the ledger reads at the session's first call."""

    def answer(request):
        if not seen:
            seen.update({t.task_id: t.status for t in ledger.tasks(run_id)})
        return f"R-{subject(request)}"

    return FunctionModel(answer)


async def test_a_resumed_session_resets_failed_and_skipped_tasks_in_the_ledger(ledger):
    def broken(request):
        if subject(request) == "task:c":
            raise ValueError("model crashed")
        return f"R-{subject(request)}"

    first = await Orchestrator(TEAM, model=FunctionModel(broken), ledger=ledger).run_tasks(TASKS)
    assert {t.task_id: t.status for t in ledger.tasks(first.run_id)} == {
        "a": "completed", "b": "completed", "c": "failed", "d": "skipped",
    }  # fmt: skip

    seen: dict[str, str] = {}
    model = snapshotting(ledger, first.run_id, seen)
    resumed = await Orchestrator(TEAM, model=model, ledger=ledger).resume(first.run_id)
    assert resumed.status == "completed"
    # At task c's call: c running again, d reset to pending (it was recorded skipped).
    assert seen == {"a": "completed", "b": "completed", "c": "running", "d": "pending"}
    assert verify_run(ledger, first.run_id).ok


async def test_an_unstarted_task_made_ready_by_kept_results_reads_ready(ledger):
    in_flight = asyncio.Event()

    async def blocking(request):
        if subject(request) == "task:b":
            in_flight.set()
            await asyncio.sleep(3600)
        return f"R-{subject(request)}"

    one_at_a_time = RunOptions(max_concurrency=1)
    orchestrator = Orchestrator(
        TEAM, model=FunctionModel(blocking), ledger=ledger, options=one_at_a_time
    )
    running = asyncio.create_task(orchestrator.run_tasks(TASKS))
    await in_flight.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    run_id = ledger.list_runs(limit=1)[0].run_id
    # c became ready when a completed, but was never recorded: it reads as at the run's start.
    assert {t.task_id: t.status for t in ledger.tasks(run_id)} == {
        "a": "completed", "b": "interrupted", "c": "pending", "d": "pending",
    }  # fmt: skip
    assert [r["task_id"] for r in ledger.record_rows(run_id)["task"]] == ["a", "b"]

    seen: dict[str, str] = {}
    model = snapshotting(ledger, run_id, seen)
    resumed = await Orchestrator(TEAM, model=model, ledger=ledger, options=one_at_a_time).resume(
        run_id
    )
    assert resumed.tasks["d"].status is TaskStatus.COMPLETED
    # At b's call: the resumed session recorded c ready (a's result is kept), d pending.
    assert seen == {"a": "completed", "b": "running", "c": "ready", "d": "pending"}
    assert verify_run(ledger, run_id).ok
