"""`RunProgress`: one line per task event of a run, on the terminal."""

from __future__ import annotations

import time

from rich.console import Console

from clearance import RunEventKind
from clearance._orchestration.result import RunEvent
from clearance.cli._common import safe_text

__all__ = ["RunProgress"]


class RunProgress:
    """Prints one line per task event, with the time since the run started."""

    def __init__(self, console: Console, total: int = 0):
        self._console = console
        self._t0 = time.perf_counter()
        self._started: dict[str, float] = {}
        self.run_id: str | None = None
        self.total = total
        self.done = 0

    def _count(self, now: float) -> str:
        """``done/total`` and, once a task finished, the estimated time left."""
        if not self.total:
            return ""
        elapsed = now - self._t0
        eta = ""
        if 0 < self.done < self.total:
            eta = f", about {elapsed / self.done * (self.total - self.done):.0f}s left"
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
        if event.kind == RunEventKind.TASK_STARTED:
            self._started[task] = now
            line = f"{stamp} started    {task}"
        elif event.kind == RunEventKind.TASK_COMPLETED:
            took = now - self._started.get(task, now)
            line = f"{stamp} completed  {task} ({took:.1f}s){self._count(now)}"
        elif event.kind == RunEventKind.TASK_FAILED:
            line = f"{stamp} FAILED     {task}: {event.detail}{self._count(now)}"
        elif event.kind == RunEventKind.TASK_SKIPPED:
            line = f"{stamp} skipped    {task}{self._count(now)}"
        elif event.kind == RunEventKind.SYNTHESIS_STARTED:
            line = f"{stamp} synthesis  (coordinator)"
        elif event.kind == RunEventKind.RUN_STARTED:
            line = f"{stamp} run {event.run_id} started ({event.detail})"
        elif event.kind == RunEventKind.PLAN_READY:
            line = f"{stamp} plan ready ({event.detail})"
        elif event.kind == RunEventKind.AWAITING_APPROVAL:
            line = f"{stamp} waiting    {task}: approval {event.detail}"
        elif event.kind == RunEventKind.RUN_REPLAYED:
            line = f"{stamp} resume     {event.detail}"
        elif event.kind != RunEventKind.RUN_FINISHED:
            return  # a model call's progress: shown by --stream
        else:
            line = f"{stamp} run finished: {event.detail}"
        self._console.print(safe_text(line))
