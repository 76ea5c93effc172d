"""The progress line's time left keeps model tasks and sub-second steps apart."""

from __future__ import annotations

from rich.console import Console

from clearance._orchestration.result import RunEvent
from clearance.cli import _progress
from clearance.cli._progress import RunProgress


def test_the_time_left_counts_model_calls_not_an_average_with_steps(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(_progress.time, "perf_counter", lambda: clock[0])
    console = Console(record=True, width=200)
    steps = frozenset({"facts-a", "facts-b", "facts-c", "package"})
    progress = RunProgress(console, total=7, steps=steps, synthesis=True)

    def event(kind: str, task: str, at: float) -> None:
        clock[0] = at
        progress(RunEvent(kind=kind, run_id="r", task_id=task))  # type: ignore[arg-type]

    for i, step in enumerate(sorted(steps - {"package"})):
        event("task_started", step, 0.1 * i)
        event("task_completed", step, 0.1 * i + 0.1)
    event("task_started", "review-a", 0.3)
    event("task_completed", "review-a", 30.3)
    text = console.export_text()
    # Three steps of 0.1 s say nothing about the model: no estimate before a model task.
    assert "left" not in text.split("review-a")[0]
    # Two reviews and the synthesis left at 30 s each, plus one step of 0.1 s: 90 s; an
    # average over every task (4 done in 30.3 s, 3 left) would have said 23 s.
    assert "about 90s left (3 model calls)" in text
