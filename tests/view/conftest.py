"""A recorded run with a failure, a retry, a skipped task and a hostile result, for the page."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from clearance import (
    Agent,
    ModelError,
    Orchestrator,
    RetryPolicy,
    RunLedger,
    RunOptions,
    Task,
    Team,
)
from clearance.testing import FunctionModel

HOSTILE = (
    "</pre></script><script>window.__pwned = 1; document.title = 'pwned'</script>"
    '<img src=x id="evil-img" onerror="window.__pwned = 3">'
    "<svg><script>window.__pwned = 2</script></svg>"
    "{{ 7 * 7 }} \x1b[31m"
)
"""What the ``evil`` task answers: markup, script, template syntax and a terminal escape."""


@dataclass(frozen=True)
class RecordedRun:
    db: str
    run_id: str
    path: Path
    hostile: str = HOSTILE


async def record_run(tmp_path: Path) -> RecordedRun:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    flaky_left = [1]

    def answer(request):
        subject = request.prompt.manifest.subject
        if subject == "task:evil":
            return HOSTILE
        if subject == "task:flaky" and flaky_left:
            flaky_left.pop()
            raise ModelError("503 service unavailable", transient=True)
        if subject == "task:broken":
            raise ModelError("HTTP 400 bad request")
        return f"ANSWER for {subject}"

    team = Team(
        agents=(
            Agent(name="writer", instructions="You write."),
            Agent(name="checker", instructions="You check."),
        ),
        name="demo",
    )
    tasks = [
        Task(id="spec", title="Write the spec", description="Spec it.", assignee="writer"),
        Task(id="evil", title="Untrusted <b>task</b>", description="Answer.", assignee="writer"),
        Task(id="flaky", title="Flaky", description="Retry me.", assignee="writer"),
        Task(
            id="review",
            title="Review",
            description="Review the spec and the untrusted answer.",
            assignee="checker",
            depends_on=["spec", "evil"],
        ),
        Task(
            id="summary",
            title="Summary",
            description="Sum.",
            assignee="checker",
            depends_on=["spec", "flaky"],
        ),
        Task(id="broken", title="Broken", description="Fails.", assignee="writer"),
        Task(
            id="after",
            title="After",
            description="Skipped.",
            assignee="writer",
            depends_on=["broken"],
        ),
    ]
    with RunLedger(db) as ledger:
        orchestrator = Orchestrator(
            team,
            model=FunctionModel(answer),
            ledger=ledger,
            options=RunOptions(retry_policy=RetryPolicy(initial_s=0, max_s=0, jitter_s=0)),
        )
        result = await orchestrator.run_tasks(tasks)
    return RecordedRun(db=db, run_id=result.run_id, path=tmp_path)


@pytest.fixture
async def recorded(tmp_path: Path) -> RecordedRun:
    return await record_run(tmp_path)


@pytest.fixture
def record() -> Callable[[Path], Awaitable[RecordedRun]]:
    """Record one more such run (into ``path / 'runs.db'``, which may hold runs already)."""
    return record_run


TAMPERED = "\"'><script>window.__pwned = 4</script><!--"


def tamper_ledger(recorded: RecordedRun) -> str:
    """Edit the ledger's own fields the way someone with the file could; returns the text."""
    conn = sqlite3.connect(recorded.path / "runs.db")
    conn.execute("UPDATE tasks SET status = ? WHERE task_id = 'spec'", (TAMPERED,))
    conn.execute("UPDATE runs SET team = ?, goal = ?", (TAMPERED, TAMPERED))
    conn.commit()
    conn.close()
    return TAMPERED


@pytest.fixture
def tamper() -> Callable[[RecordedRun], str]:
    return tamper_ledger
