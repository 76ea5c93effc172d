"""`RunStream`: a run's events as an async iterator.

``async with orchestrator.stream(tasks) as events: async for event in events: ...`` runs the
graph in a background asyncio task, with every model call streaming, and hands the caller
each `RunEvent` in the order it happened: ``run_started``, ``task_started``, ``model_call``,
``text`` (pieces of a completion as they arrive), ``tool_call``, ``task_completed`` /
``task_failed`` / ``task_skipped``, ``synthesis_started``, ``run_finished``.

The events pass through a queue between the run and the reader. It is bounded for ``text``
events: when ``max_events`` events wait unread, further ``text`` pieces are dropped (and
counted in `RunStream.dropped`) rather than slowing the run, whose model calls run under
deadlines; every other event (a fixed number per task and per model call) is always
delivered. A dropped piece loses nothing recorded: the whole text of every call is in the
ledger, and each task's result is in `RunStream.result`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from clearance._agents.caller import CallEventKind, ServingListener
from clearance._core.errors import ConfigError
from clearance._core.spec import Task
from clearance._core.vocabulary import RunEventKind
from clearance._orchestration.result import RunEvent, RunResult

if TYPE_CHECKING:
    from clearance._orchestration.orchestrator import Orchestrator

__all__ = ["DEFAULT_MAX_EVENTS", "RunStream", "call_listener"]

DEFAULT_MAX_EVENTS = 10_000
"""Unread events after which a `RunStream` drops ``text`` pieces."""


def call_listener(emit: Callable[..., None], run_id: str) -> ServingListener:
    """A listener that turns a run's call events into `RunEvent` s through ``emit``.

    ``emit`` is the orchestrator's ``_emit(kind, run_id, task_id=, detail=, subject=)``.
    Each event names the task its call serves, as the caller hears it from the call's budget
    (`CallBudget.task_id`): a delegate's, a child's, an isolated dispatch's, a
    clarification's or a review's call names its task, the plan and the synthesis none.
    """

    def listen(kind: CallEventKind, subject: str, task_id: str | None, detail: str) -> None:
        emit(kind, run_id, task_id=task_id, detail=detail, subject=subject)

    return ServingListener(listen)


class RunStream:
    """The events of one run, as it runs (see the module docstring).

    Made by `Orchestrator.stream`. Iterate it once, inside ``async with`` (leaving the block
    early cancels the run, which is then recorded ``interrupted`` and can be resumed).

    Attributes:
        dropped: ``text`` events dropped because the reader fell ``max_events`` behind.
    """

    def __init__(
        self,
        orchestrator: Orchestrator,
        *,
        tasks: Iterable[Task] | None,
        goal: str | None,
        resume: str | None,
        max_events: int,
    ) -> None:
        if tasks is None and goal is None and resume is None:
            raise ConfigError("stream needs tasks, a goal or a run to resume", field="stream")
        if max_events < 1:
            raise ConfigError("must be at least 1", field="max_events")
        self._orchestrator = orchestrator
        self._tasks = list(tasks) if tasks is not None else None
        self._goal = goal
        self._resume = resume
        self._max_events = max_events
        self._queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
        self._job: asyncio.Task[RunResult] | None = None
        self._result: RunResult | None = None
        self.dropped = 0

    @property
    def result(self) -> RunResult:
        """The run's result, once the events are read to the end.

        Raises:
            RuntimeError: The run has not finished.
        """
        if self._result is None:
            raise RuntimeError("the run has not finished: read its events to the end first")
        return self._result

    def _deliver(self, event: RunEvent) -> None:
        if event.kind == RunEventKind.TEXT and self._queue.qsize() >= self._max_events:
            self.dropped += 1
            return
        self._queue.put_nowait(event)

    async def _run(self) -> RunResult:
        orchestrator = self._orchestrator
        chained = orchestrator._on_event
        streaming = orchestrator.stream_text

        def tee(event: RunEvent) -> None:
            self._deliver(event)
            if chained is not None:
                chained(event)

        orchestrator._on_event, orchestrator.stream_text = tee, True
        try:
            if self._tasks is not None:
                return await orchestrator.run_tasks(self._tasks, goal=self._goal)
            if self._goal is not None:
                return await orchestrator.run_team(self._goal)
            assert self._resume is not None
            return await orchestrator.resume(self._resume)
        finally:
            orchestrator._on_event, orchestrator.stream_text = chained, streaming
            self._queue.put_nowait(None)

    def _start(self) -> asyncio.Task[RunResult]:
        if self._job is None:
            self._job = asyncio.create_task(self._run())
        return self._job

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> RunEvent:
        """The next event.

        Raises:
            StopAsyncIteration: The run finished and every event was read.
            ClearanceError: What the run raised (a bad graph, a failing ledger...), once
                the events before it were read.
        """
        job = self._start()
        event = await self._queue.get()
        if event is not None:
            return event
        self._queue.put_nowait(None)  # stay at the end
        self._result = await job  # raises what the run raised
        raise StopAsyncIteration

    async def __aenter__(self) -> RunStream:
        self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the run if it is still going (it is recorded ``interrupted``)."""
        job = self._job
        if job is not None and not job.done():
            job.cancel()
        if job is not None:
            await asyncio.gather(job, return_exceptions=True)

    def __repr__(self) -> str:
        state: Any = "running" if self._result is None else self._result.status
        return f"RunStream({state}, dropped={self.dropped})"
