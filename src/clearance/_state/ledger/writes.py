"""The queued writes of the frequent records: a task's state, a model call and its outcome.

Each is one slotted (not frozen: a frozen dataclass sets each field through
``object.__setattr__``) object holding the immutable values its rows are built from, on the
writer thread (`clearance._state.write_behind.Write`): a run queues several per task, and
each object that waits in the queue is one the garbage collector tracks and walks, where a
`PendingWrite` with its row dicts (or a ``functools.partial`` and its keyword dict) is three
or four. The operation named in an error message is only built when needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from clearance._core.prompt import Prompt
from clearance._state.ledger.rows import build_task_rows, call_rows, finish_row
from clearance._state.queue import TaskState
from clearance._state.write_behind import Rows
from clearance.models._base import ModelResponse, Usage

__all__ = ["CallWrite", "FinishWrite", "TaskWrite"]


@dataclass(slots=True)
class TaskWrite:
    """The upserts of one task's state or several (`build_task_rows`).

    Attributes:
        run_id: The run's full id.
        states: One state, or several in order.
        recorded_at: When a reason is recorded (read on the caller's thread: the clock may
            not be thread-safe), or ``None`` when no state has an error.
    """

    run_id: str
    states: TaskState | tuple[TaskState, ...]
    recorded_at: datetime | None

    @property
    def operation(self) -> str:
        """What the write does, for error messages."""
        states = self.states
        if isinstance(states, TaskState):  # a named tuple itself
            return f"record task {states.task.id!r} of run {self.run_id!r}"
        return f"record {len(states)} tasks of run {self.run_id!r}"

    def build(self) -> Rows:
        """The rows (on the writer thread)."""
        states = self.states
        return build_task_rows(
            self.run_id, (states,) if isinstance(states, TaskState) else states, self.recorded_at
        )


@dataclass(slots=True, kw_only=True)
class CallWrite:
    """The row of one model call, or of a request about to be sent (`call_rows`).

    The fields are `call_rows`'s arguments; the prompt and response are immutable.
    """

    call_id: str
    run_id: str
    subject: str
    agent: str
    model_id: str
    prompt: Prompt
    response: ModelResponse | None
    error: str | None
    started_at: datetime
    latency_s: float
    pending: bool
    parameters: dict[str, Any] | None

    @property
    def operation(self) -> str:
        """What the write does, for error messages."""
        what = "request" if self.pending else "call"
        return f"record a {self.subject!r} {what} of run {self.run_id!r}"

    def build(self) -> Rows:
        """The rows (on the writer thread)."""
        return call_rows(
            call_id=self.call_id, run_id=self.run_id, subject=self.subject, agent=self.agent,
            model_id=self.model_id, prompt=self.prompt, response=self.response,
            error=self.error, started_at=self.started_at, latency_s=self.latency_s,
            pending=self.pending, parameters=self.parameters,
        )  # fmt: skip


@dataclass(slots=True)
class FinishWrite:
    """The outcome of a call recorded as a request (`finish_row`); fields as its arguments."""

    call_id: str
    run_id: str
    response: ModelResponse | None
    error: str | None
    latency_s: float
    usage: Usage | None = None

    @property
    def operation(self) -> str:
        """What the write does, for error messages."""
        return f"record the outcome of call {self.call_id!r} of run {self.run_id!r}"

    def build(self) -> Rows:
        """The rows (on the writer thread)."""
        row = finish_row(
            self.call_id, self.run_id, self.response, self.error, self.latency_s, self.usage
        )
        return {"call_finish": [row]}
