"""A quiet run says what it is still working on, so a long model call is not silence.

Between a task's ``started`` and its end, a model call of minutes (or retries after a
server's 429s) printed nothing; `RunProgress.while_running` prints a line after each
`HEARTBEAT_S` without one, naming the longest-running tasks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from clearance._orchestration.result import RunEvent
from clearance.cli import _progress, app
from clearance.cli._progress import RunProgress

TEAM = """\
name: quiet
model: fake:slow
agents:
  - name: writer
    instructions: You write.
tasks:
  - id: first-draft
    title: First draft
    description: Write a sentence.
    assignee: writer
  - id: final
    title: Final
    description: Rewrite it.
    assignee: writer
    depends_on: [first-draft]
"""


def progress_at(clock: list[float], monkeypatch) -> tuple[RunProgress, Console]:
    monkeypatch.setattr(_progress.time, "perf_counter", lambda: clock[0])
    console = Console(record=True, width=200)
    return RunProgress(console, total=6), console


def send(progress: RunProgress, clock: list[float], kind: str, task: str | None, at: float):
    clock[0] = at
    progress(RunEvent(kind=kind, run_id="r", task_id=task))  # type: ignore[arg-type]


def test_the_quiet_line_names_the_longest_running_tasks_and_counts_the_rest(monkeypatch):
    clock = [0.0]
    progress, _ = progress_at(clock, monkeypatch)
    assert progress.quiet_line(5.0) is None  # nothing runs: nothing to say
    for i, task in enumerate(["a", "b", "c", "d", "e"]):
        send(progress, clock, "task_started", task, float(i))
    send(progress, clock, "task_completed", "b", 6.0)
    send(progress, clock, "awaiting_approval", "a", 7.0)  # waits for a person: not working
    line = progress.quiet_line(40.0)
    assert line == "[   40.0s] working    c, d, e (the longest for 38s)"
    send(progress, clock, "task_started", "f", 41.0)
    send(progress, clock, "task_started", "g", 42.0)
    line = progress.quiet_line(60.0)
    assert line is not None and line.endswith("working    c, d, e and 2 more (the longest for 58s)")
    send(progress, clock, "model_call", "a", 61.0)  # approved: working again
    line = progress.quiet_line(62.0)
    assert line is not None and "working    a, c, d and 3 more (the longest for 62s)" in line
    for task in "acdefg":
        send(progress, clock, "task_completed", task, 63.0)
    send(progress, clock, "synthesis_started", None, 64.0)
    assert progress.quiet_line(94.5) == "[   94.5s] working    synthesis (for 30s)"
    send(progress, clock, "run_finished", None, 95.0)
    assert progress.quiet_line(200.0) is None


@pytest.fixture
def team(tmp_path: Path, monkeypatch) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(TEAM)
    monkeypatch.setenv("CLEARANCE_FAKE_LATENCY_S", "1.2")  # each model call takes 1.2 s
    monkeypatch.setattr(_progress, "HEARTBEAT_S", 0.5)
    return path


def test_a_run_quiet_for_a_period_prints_what_it_works_on(team: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(app, ["run", str(team), "--db", db])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    working = [line for line in lines if " working " in line]
    # Each call takes 1.2 s and the line comes after 0.5 s of quiet: at least once per task.
    assert any(re.search(r"working    first-draft \(the longest for [01]s\)", w) for w in working)
    assert any(re.search(r"working    final \(the longest for [01]s\)", w) for w in working)
    # Between the task's start and its end, never after the run finished.
    first = next(i for i, line in enumerate(lines) if "started    first-draft" in line)
    done = next(i for i, line in enumerate(lines) if "completed  first-draft" in line)
    assert any("working    first-draft" in line for line in lines[first:done])
    finished = next(i for i, line in enumerate(lines) if "run finished" in line)
    assert not any(" working " in line for line in lines[finished:])


def test_a_streamed_run_prints_no_quiet_line(team: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(app, ["run", str(team), "--db", db, "--stream"])
    assert result.exit_code == 0, result.output
    assert " working " not in result.output  # the model's text shows the run is alive
