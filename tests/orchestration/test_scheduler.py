import asyncio

from clearance import Task, TaskGraph, TaskStatus
from clearance._orchestration.scheduler import Scheduler
from clearance._state.queue import TaskQueue


def t(task_id, *deps):
    return Task(id=task_id, title=task_id, description="d", assignee="a", depends_on=deps)


async def run(queue, *, max_concurrency, answer):
    """Run ``queue`` with a scheduler; returns (start order, peak running, seen at start)."""
    order, seen = [], {}
    running = peak = 0

    async def run_task(task):
        nonlocal running, peak
        order.append(task.id)
        # What a prompt built now could see: the results completed so far.
        seen[task.id] = {s.task.id for s in queue.with_status(TaskStatus.COMPLETED)}
        running += 1
        peak = max(peak, running)
        try:
            return await answer(task)
        finally:
            running -= 1

    def settle(task_id, job):
        if job.exception() is None:
            queue.complete(task_id, job.result())
        else:
            queue.fail(task_id, str(job.exception()))

    started = []
    await Scheduler(
        queue,
        max_concurrency=max_concurrency,
        run_task=run_task,
        settle=settle,
        on_started=lambda states: started.append([s.task.id for s in states]),
    ).run()
    return order, peak, seen, started


async def test_starts_in_graph_order_within_the_limit_and_records_each_round():
    async def answer(task):
        await asyncio.sleep(0.01)
        return f"r-{task.id}"

    queue = TaskQueue(TaskGraph([t(f"n{i}") for i in range(7)] + [t("last", "n0", "n6")]))
    order, peak, _, started = await run(queue, max_concurrency=3, answer=answer)
    assert order == [f"n{i}" for i in range(7)] + ["last"]
    assert peak == 3
    assert started[0] == ["n0", "n1", "n2"]  # the first round, recorded together
    assert sum(len(r) for r in started) == 8
    assert all(s.status is TaskStatus.COMPLETED for s in queue.states())


async def test_a_task_sees_exactly_the_results_completed_when_it_started():
    # "fast" and "late" start together and both finish in their first step; they are settled
    # together after it, so neither sees the other, and "after" sees both.
    async def answer(task):
        return "r"

    queue = TaskQueue(TaskGraph([t("fast"), t("late"), t("after", "fast")]))
    order, _, seen, _ = await run(queue, max_concurrency=5, answer=answer)
    assert seen == {"fast": set(), "late": set(), "after": {"fast", "late"}}
    assert order == ["fast", "late", "after"]


async def test_a_failure_skips_dependents_and_the_rest_runs():
    async def answer(task):
        if task.id == "bad":
            raise RuntimeError("boom")
        return "r"

    queue = TaskQueue(TaskGraph([t("bad"), t("child", "bad"), t("other")]))
    order, _, _, _ = await run(queue, max_concurrency=2, answer=answer)
    assert "child" not in order
    assert queue.get("child").status is TaskStatus.SKIPPED
    assert queue.get("other").status is TaskStatus.COMPLETED
