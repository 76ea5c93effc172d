"""`Recorder`: what code that records a run needs of a ledger.

The orchestrator, the agent loop and the subagent kit record through this protocol, so a
`RunLedger` (every record kept) and a `NullLedger` (nothing kept) are interchangeable where
a run is only recorded. Reading a run back (``inspect``, ``verify``, ``resume``) takes a
`RunLedger`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from clearance._core.errors import LimitExceeded
from clearance._core.prompt import Prompt
from clearance._core.vocabulary import EventKind
from clearance._state.messages import Message
from clearance._state.queue import TaskState
from clearance.models._base import ModelResponse, Usage

__all__ = ["Recorder", "record_breach"]


@runtime_checkable
class Recorder(Protocol):
    """Records a run: its start and end, tasks, model calls, messages, tool calls and events.

    Every method but `reopen_run` may queue its write (see `RunLedger.write_behind`); a
    failed write is then raised by a later call. See `RunLedger` for each method's
    arguments and errors.
    """

    def start_run(
        self,
        *,
        run_id: str,
        team: str,
        goal: str | None,
        graph: list[dict[str, Any]] | None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Record a new run, ``running``."""
        ...

    def reopen_run(
        self, run_id: str, *, process: dict[str, Any] | None = None, force: bool = False
    ) -> None:
        """Take a recorded run over to resume it."""
        ...

    def set_graph(self, run_id: str, graph: list[dict[str, Any]]) -> None:
        """Record a run's task graph."""
        ...

    def record_task(self, run_id: str, state: TaskState) -> None:
        """Record one task's current state."""
        ...

    def record_tasks(self, run_id: str, states: Sequence[TaskState]) -> None:
        """Record several tasks' states."""
        ...

    def record_messages(self, run_id: str, messages: Sequence[Message]) -> None:
        """Record messages agents exchanged."""
        ...

    def record_call(
        self,
        *,
        run_id: str,
        subject: str,
        agent: str,
        model_id: str,
        prompt: Prompt,
        response: ModelResponse | None,
        error: str | None,
        started_at: datetime,
        latency_s: float,
        parameters: dict[str, Any] | None = None,
    ) -> str:
        """Record one model call with its prompt; return the call's id."""
        ...

    def record_request(
        self,
        *,
        run_id: str,
        subject: str,
        agent: str,
        model_id: str,
        prompt: Prompt,
        started_at: datetime,
        parameters: dict[str, Any] | None = None,
    ) -> str:
        """Record a model call before it is sent; return the call's id."""
        ...

    def finish_call(
        self,
        call_id: str,
        *,
        run_id: str,
        response: ModelResponse | None,
        error: str | None,
        latency_s: float,
        usage: Usage | None = None,
    ) -> None:
        """Record the outcome of a call recorded with `record_request`."""
        ...

    def wait_committed(self) -> Awaitable[None]:
        """An awaitable done once every queued write is committed."""
        ...

    def record_event(self, run_id: str, kind: EventKind, subject: str, data: dict[str, Any]) -> str:
        """Record one event of a run; return the event's id."""
        ...

    def record_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str,
        subject: str,
        agent: str,
        step: int,
        name: str,
        arguments: dict[str, Any],
        result: str,
        is_error: bool,
        store_reads: Sequence[dict[str, Any]] = (),
        chain: dict[str, Any] | None = None,
    ) -> None:
        """Record one tool call and its result."""
        ...

    def finish_run(
        self, run_id: str, *, status: str, synthesis: str | None, usage: Usage, error: str | None
    ) -> None:
        """Record the end of a run."""
        ...

    def write_behind(self) -> AbstractContextManager[None]:
        """Queue writes and commit them in groups while open."""
        ...

    def flush(self) -> None:
        """Wait until every queued write is committed."""
        ...

    def close(self) -> None:
        """Commit what is queued and release what the recorder holds."""
        ...


def record_breach(recorder: Recorder, run_id: str, subject: str, exc: LimitExceeded) -> None:
    """Record ``exc`` as a ``limit_exceeded`` event of ``subject``, once per breach.

    The first code to catch a breach records it (a child's runner, or the task's failure); a
    breach already recorded (``exc.recorded``) is not recorded again where it ends the task.
    """
    if exc.recorded:
        return
    recorder.record_event(run_id, EventKind.LIMIT_EXCEEDED, subject, {
        "limit": exc.limit, "value": exc.value, "maximum": exc.maximum, "error": str(exc),
    })  # fmt: skip
    exc.recorded = True
