"""`NullLedger`: a `Recorder` that records nothing, for runs that need no record.

Benchmarks use it to measure the orchestrator without the database, and embedders whose
runs are recorded elsewhere may use it too. A run made with it cannot be inspected,
verified or resumed: every read raises `StoreError`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from clearance._core.errors import StoreError
from clearance._core.event_schema import parse_event
from clearance._core.ids import new_id
from clearance._core.prompt import Prompt, canonical_json
from clearance._core.vocabulary import EventKind
from clearance._state.ledger import (
    CallRecord,
    ChainEntry,
    EventRecord,
    RunRecord,
    TaskRecord,
    ToolCallRecord,
)
from clearance._state.messages import Message
from clearance._state.queue import TaskState
from clearance._state.write_behind import COMMITTED
from clearance.models._base import ModelResponse, Usage

__all__ = ["NullLedger"]


class NullLedger:
    """A `Recorder` that discards every write and opens no database.

    Pass it as ``Orchestrator(..., ledger=NullLedger())`` to run without a record. Writes
    return at once (``record_call`` still returns a fresh call id); the reads a `RunLedger`
    has raise.

    Raises:
        StoreError: From any read (`get_run`, `list_runs`, `tasks`, `calls`, `messages`,
            `events`...): nothing was recorded.
    """

    def __init__(self) -> None:  # no database: nothing to open or configure
        self._closed = False

    @property
    def url(self) -> str:
        """``"null:"``: there is no database."""
        return "null:"

    def close(self) -> None:
        """Mark the ledger closed (there is nothing to release)."""
        self._closed = True

    def __repr__(self) -> str:
        return "NullLedger()"

    @contextmanager
    def write_behind(self) -> Iterator[None]:
        """Nothing to queue: writes are discarded at once."""
        yield

    def flush(self) -> None:
        """Nothing is ever queued."""

    @staticmethod
    def _refuse(operation: str) -> NoReturn:
        raise StoreError(f"cannot {operation}: a NullLedger records nothing")

    def start_run(
        self,
        *,
        run_id: str,
        team: str,
        goal: str | None,
        graph: list[dict[str, Any]] | None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Discard the run's start."""

    def set_graph(self, run_id: str, graph: list[dict[str, Any]]) -> None:
        """Discard the graph."""

    def record_task(self, run_id: str, state: TaskState) -> None:
        """Discard the task's state."""

    def record_tasks(self, run_id: str, states: Sequence[TaskState]) -> None:
        """Discard the tasks' states."""

    def record_messages(self, run_id: str, messages: Sequence[Message]) -> None:
        """Discard the messages."""

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
        """Discard the call; return a fresh call id, as `RunLedger.record_call` does."""
        return new_id("call")

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
        """Discard the request; return a fresh call id, as `RunLedger.record_request` does."""
        return new_id("call")

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
        """Discard the call's outcome."""

    def wait_committed(self) -> Awaitable[None]:
        """Nothing is ever queued: done at once."""
        return COMMITTED

    def record_event(self, run_id: str, kind: EventKind, subject: str, data: dict[str, Any]) -> str:
        """Check the event against its schema, discard it, return a fresh event id.

        Raises:
            ConfigError: As `RunLedger.record_event`: the data does not match the schema.
        """
        parse_event(kind, json.loads(canonical_json(data)))
        return new_id("evt")

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
        """Discard the tool call."""

    def reopen_run(
        self, run_id: str, *, process: dict[str, Any] | None = None, force: bool = False
    ) -> None:
        """Nothing to reopen: raises, as every read does."""
        self._refuse(f"reopen run {run_id!r}")

    def finish_run(
        self, run_id: str, *, status: str, synthesis: str | None, usage: Usage, error: str | None
    ) -> None:
        """Discard the run's end."""

    # -- reads: nothing was recorded ----------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord:
        """Raise: nothing was recorded."""
        self._refuse(f"read run {run_id!r}")

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        """Raise: nothing was recorded."""
        self._refuse("list runs")

    def tasks(self, run_id: str) -> list[TaskRecord]:
        """Raise: nothing was recorded."""
        self._refuse(f"read the tasks of run {run_id!r}")

    def calls(self, run_id: str, *, subject: str | None = None) -> list[CallRecord]:
        """Raise: nothing was recorded."""
        self._refuse(f"read the calls of run {run_id!r}")

    def task_reasons(self, run_id: str) -> dict[str, list[str]]:
        """Raise: nothing was recorded."""
        self._refuse(f"read the task reasons of run {run_id!r}")

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        """Raise: nothing was recorded."""
        self._refuse(f"read the messages of run {run_id!r}")

    def events(self, run_id: str, kind: str | None = None) -> list[EventRecord]:
        """Raise: nothing was recorded."""
        self._refuse(f"read the events of run {run_id!r}")

    def tool_calls(self, run_id: str) -> list[ToolCallRecord]:
        """Raise: nothing was recorded."""
        self._refuse(f"read the tool calls of run {run_id!r}")

    def chain_entries(self, run_id: str) -> list[ChainEntry]:
        """Raise: nothing was recorded."""
        self._refuse(f"read the hash chain of run {run_id!r}")

    def chain_heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """Raise: nothing was recorded."""
        self._refuse("read the chain heads of runs")

    def record_rows(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        """Raise: nothing was recorded."""
        self._refuse(f"read the records of run {run_id!r}")


if TYPE_CHECKING:  # both ledgers are recorders, checked by the type checker
    from clearance._state.ledger import Recorder, RunLedger

    _null: Recorder = NullLedger()
    _real: Recorder = RunLedger()
