"""`Scheduler`: runs a graph's tasks, each the moment its last dependency completes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from clearance._core.spec import Task
from clearance._state.queue import TaskQueue, TaskState

__all__ = ["Scheduler"]


class Scheduler:
    """Runs the tasks of a `TaskQueue`, at most ``max_concurrency`` at once.

    Event-driven: a finishing task's done callback queues it; one loop step later the tasks
    that finished meanwhile are settled together and the tasks they made ready start, the
    first ones in graph order, up to the concurrency limit. No loop waits on the set of
    running tasks, so a completion costs the same however many tasks are running, and a
    dependent starts two loop steps after its last dependency finished.

    A task builds its prompt in its first step. Settling runs one step after the first
    finished task of a batch, so behind the first step of every task started before: a task
    sees exactly the results completed when it started, never one settled in between (which
    a task with ``memory_scope="all"`` would otherwise see).

    Args:
        queue: The run's state; tasks are started and read from here.
        max_concurrency: Most tasks running at once (at least 1).
        run_task: Runs one task and returns its result (the orchestrator's attempt).
        settle: Records a finished task (its result or its failure) in the queue and the
            ledger; given the task id and the finished asyncio task.
        on_started: Records the tasks started together, before any of them runs (a new
            asyncio task first runs at the next step of the loop).
    """

    def __init__(
        self,
        queue: TaskQueue,
        *,
        max_concurrency: int,
        run_task: Callable[[Task], Coroutine[Any, Any, str]],
        settle: Callable[[str, asyncio.Task[str]], None],
        on_started: Callable[[Sequence[TaskState]], None],
    ) -> None:
        self._queue = queue
        self._max_concurrency = max_concurrency
        self._run_task = run_task
        self._settle = settle
        self._on_started = on_started
        self._running: dict[asyncio.Task[str], str] = {}
        self._done: list[asyncio.Task[str]] = []  # finished, not yet settled
        self._idle = asyncio.get_running_loop().create_future()  # set once nothing runs
        self._stopping = False

    async def run(self) -> None:
        """Run every task that can run; return once none is running.

        Raises:
            BaseException: What settling a task raised (a failing ledger, for example), or
                the cancellation of this coroutine; the running tasks are cancelled first
                and left ``running`` in the queue for the caller to mark interrupted.
        """
        try:
            self._launch()
            await self._idle
        finally:
            self._stopping = True
            running = list(self._running)
            for pending in running:
                pending.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    def _launch(self) -> None:
        """Start ready tasks up to the concurrency limit; resolve ``_idle`` if none runs."""
        queue, running = self._queue, self._running
        room = self._max_concurrency - len(running)
        started = []
        if room > 0:
            for task in queue.ready(limit=room):
                queue.start(task.id)
                started.append(queue.get(task.id))
                job = asyncio.create_task(self._run_task(task))
                running[job] = task.id
                job.add_done_callback(self._finished)
        if started:
            self._on_started(started)
        if not running and not self._idle.done():
            self._idle.set_result(None)

    def _finished(self, job: asyncio.Task[str]) -> None:
        """Done callback of a task: queue it to be settled (see `_settle_finished`)."""
        self._done.append(job)
        if len(self._done) == 1:
            job.get_loop().call_soon(self._settle_finished)

    def _settle_finished(self) -> None:
        """Settle every finished task, then start what they made ready."""
        done, self._done = self._done, []
        if self._stopping or self._idle.done():
            return  # cancelled on the way out: the caller marks them interrupted
        try:
            for job in done:
                self._settle(self._running.pop(job), job)
            self._launch()
        except BaseException as exc:  # a failing ledger: stop the run, raise it from `run`
            self._idle.set_exception(exc)
