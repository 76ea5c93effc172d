"""`RunProgress`: one line per task event of a run, on the terminal.

While the run is quiet, a line now and then says what it works on (`RunProgress.while_running`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

from rich.console import Console

from clearance import RunEvent, RunEventKind
from clearance.cli._common import safe_text

__all__ = ["HEARTBEAT_S", "RunProgress"]

HEARTBEAT_S = 30.0
"""Seconds without a line after which a running command says what it is still working on."""

_NAMED = 3
"""Tasks a quiet-run line names; the rest are counted."""

T = TypeVar("T")


class RunProgress:
    """Prints one line per task event, with the time since the run started.

    The time left is estimated apart for model tasks and steps (non-model tasks, which
    take a fraction of a second): remaining model tasks, plus the synthesis, times the mean
    duration of the model tasks finished so far, one at a time (the conservative case of
    one local model); remaining steps times the mean step duration. The means are kept as
    running sums, so a line costs the same at the 10,000th task as at the first.

    Args:
        console: Where to print.
        total: Tasks of the run.
        steps: Ids of its non-model tasks (``run:``).
        synthesis: Whether a synthesis follows the tasks (one more model call).
    """

    def __init__(
        self,
        console: Console,
        total: int = 0,
        *,
        steps: frozenset[str] = frozenset(),
        synthesis: bool = False,
    ):
        self._console = console
        self._t0 = time.perf_counter()
        self._started: dict[str, float] = {}
        self._running: dict[str, float] = {}  # task id -> when it started, while it runs
        self._synthesis_at: float | None = None  # when the synthesis started, while it runs
        self._waiting: set[str] = set()  # tasks waiting for a person's approval
        self._printed_at = self._t0  # when the last line was printed
        self._steps = steps
        # Per kind (step: True, model task: False): tasks finished, and the seconds they took.
        self._finished: dict[bool, int] = {True: 0, False: 0}
        self._seconds: dict[bool, float] = {True: 0.0, False: 0.0}
        self._synthesis = synthesis
        self.run_id: str | None = None
        self.total = total
        self.done = 0

    def _count(self) -> str:
        """``done/total`` and, once a model task finished, the estimated time left."""
        if not self.total:
            return ""
        eta = ""
        models, steps = self._finished[False], self._finished[True]
        model_total = self.total - len(self._steps)
        if models and self.done < self.total:
            left_models = max(model_total - models, 0) + int(self._synthesis)
            left_steps = max(len(self._steps) - steps, 0)
            step_s = self._seconds[True] / steps if steps else 0.0
            seconds = left_models * self._seconds[False] / models + left_steps * step_s
            eta = f", about {seconds:.0f}s left ({left_models} model calls)"
        return f" [{self.done}/{self.total}{eta}]"

    def __call__(self, event: RunEvent) -> None:
        if event.kind == RunEventKind.RUN_STARTED:
            self.run_id = event.run_id
        now = time.perf_counter()
        if event.kind in (
            RunEventKind.TASK_COMPLETED,
            RunEventKind.TASK_FAILED,
            RunEventKind.TASK_SKIPPED,
        ):
            self.done += 1
        stamp = f"[{now - self._t0:7.1f}s]"
        task = event.task_id or ""
        if event.kind in (
            RunEventKind.TASK_COMPLETED,
            RunEventKind.TASK_FAILED,
            RunEventKind.TASK_SKIPPED,
            RunEventKind.MODEL_CALL,
            RunEventKind.TOOL_CALL,
        ):
            self._waiting.discard(task)  # decided, or done
            if event.kind not in (RunEventKind.MODEL_CALL, RunEventKind.TOOL_CALL):
                self._running.pop(task, None)
        if event.kind == RunEventKind.TASK_STARTED:
            self._started[task] = self._running[task] = now
            line = f"{stamp} started    {task}"
        elif event.kind == RunEventKind.TASK_COMPLETED:
            took = now - self._started.get(task, now)
            step = task in self._steps
            self._finished[step] += 1
            self._seconds[step] += took
            line = f"{stamp} completed  {task} ({took:.1f}s){self._count()}"
        elif event.kind == RunEventKind.TASK_FAILED:
            # One line even when the reason holds line breaks (a step's exception text).
            reason = "\\n".join(event.detail.splitlines())
            line = f"{stamp} FAILED     {task}: {reason}{self._count()}"
        elif event.kind == RunEventKind.TASK_SKIPPED:
            line = f"{stamp} skipped    {task}{self._count()}"
        elif event.kind == RunEventKind.SYNTHESIS_STARTED:
            self._synthesis_at = now
            line = f"{stamp} synthesis  (coordinator)"
        elif event.kind == RunEventKind.RUN_STARTED:
            line = f"{stamp} run {event.run_id} started ({event.detail})"
        elif event.kind == RunEventKind.PLAN_READY:
            line = f"{stamp} plan ready ({event.detail})"
        elif event.kind == RunEventKind.AWAITING_APPROVAL:
            self._waiting.add(task)
            line = f"{stamp} waiting    {task}: approval {event.detail}"
        elif event.kind == RunEventKind.RUN_REPLAYED:
            line = f"{stamp} resume     {event.detail}"
        elif event.kind != RunEventKind.RUN_FINISHED:
            return  # a model call's progress: shown by --stream
        else:
            self._synthesis_at = None
            line = f"{stamp} run finished: {event.detail}"
        self._print(line, now)

    def _print(self, line: str, now: float) -> None:
        self._printed_at = now
        # As one line, wrapped (if at all) by the terminal: rich's own wrapping took half of
        # each line's cost, which a run of thousands of tasks pays per task event.
        self._console.print(safe_text(line), soft_wrap=True)

    def quiet_line(self, now: float) -> str | None:
        """The line saying what the run is working on, or ``None`` when nothing runs.

        ``now`` is a `time.perf_counter` reading. Names the longest-running tasks (at most
        `_NAMED`, the rest counted) and for how long the longest has run; a task waiting for
        a person's approval is not working.
        """
        working = sorted(
            (started, task) for task, started in self._running.items() if task not in self._waiting
        )
        stamp = f"[{now - self._t0:7.1f}s]"
        if working:
            names = ", ".join(task for _, task in working[:_NAMED])
            more = f" and {len(working) - _NAMED} more" if len(working) > _NAMED else ""
            return f"{stamp} working    {names}{more} (the longest for {now - working[0][0]:.0f}s)"
        if self._synthesis_at is not None:
            return f"{stamp} working    synthesis (for {now - self._synthesis_at:.0f}s)"
        return None

    async def while_running(self, work: Awaitable[T], *, every_s: float | None = None) -> T:
        """Await ``work``, saying what the run works on whenever it is quiet.

        Each time no line was printed for ``every_s`` seconds (default `HEARTBEAT_S`), prints
        `quiet_line`. A model call of minutes, or retries after a server's 429s, would
        otherwise leave the terminal silent between a task's ``started`` and its end.
        """
        beat = asyncio.create_task(self._beat(HEARTBEAT_S if every_s is None else every_s))
        try:
            return await work
        finally:
            beat.cancel()  # not awaited: a cancellation of this coroutine stays its own

    async def _beat(self, every_s: float) -> None:
        while True:
            quiet_for = time.perf_counter() - self._printed_at
            await asyncio.sleep(max(every_s - quiet_for, 0.05))
            now = time.perf_counter()
            if now - self._printed_at >= every_s:
                line = self.quiet_line(now)
                if line is None:
                    self._printed_at = now  # nothing to say: wait another period
                else:
                    self._print(line, now)
