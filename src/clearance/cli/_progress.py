"""`RunProgress`: one line per task event of a run, on the terminal."""

from __future__ import annotations

import time

from rich.console import Console

from clearance import RunEvent, RunEventKind
from clearance.cli._common import safe_text

__all__ = ["RunProgress"]


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
        if event.kind == RunEventKind.TASK_STARTED:
            self._started[task] = now
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
        # As one line, wrapped (if at all) by the terminal: rich's own wrapping took half of
        # each line's cost, which a run of thousands of tasks pays per task event.
        self._console.print(safe_text(line), soft_wrap=True)
