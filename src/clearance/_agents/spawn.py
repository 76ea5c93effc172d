"""Spawning child agents over the `EventBus`: a spawn request, a spawn result.

A parent publishes a `SpawnRequest` on ``spawn.request``; a `SpawnWorker` runs the child
(with a time limit) and publishes a `SpawnResult` on ``spawn.result`` under the same
correlation id. The result carries only the child's final text, never its steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from clearance._core.reasons import bounded_reason
from clearance._state.events import Event, EventBus

__all__ = ["SPAWN_REQUEST", "SPAWN_RESULT", "SpawnRequest", "SpawnResult", "SpawnWorker"]

SPAWN_REQUEST = "spawn.request"
SPAWN_RESULT = "spawn.result"


@dataclass(frozen=True, kw_only=True, slots=True)
class SpawnRequest:
    """A parent asks for a child.

    Attributes:
        parent_id: The parent agent.
        child_id: The child to create.
        goal: The only thing the child is given.
        tools: Names of the tools the child may use.
        timeout_s: Seconds the child may run.
    """

    parent_id: str
    child_id: str
    goal: str
    tools: tuple[str, ...] = ()
    timeout_s: float = 60.0

    def to_payload(self) -> dict[str, Any]:
        """Event payload form."""
        return {"parent_id": self.parent_id, "child_id": self.child_id, "goal": self.goal,
                "tools": list(self.tools), "timeout_s": self.timeout_s}  # fmt: skip

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> SpawnRequest:
        """Parse an event payload."""
        return cls(parent_id=str(payload["parent_id"]), child_id=str(payload["child_id"]),
                   goal=str(payload["goal"]), tools=tuple(payload.get("tools", ())),
                   timeout_s=float(payload.get("timeout_s", 60.0)))  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class SpawnResult:
    """A child's outcome, as its parent receives it.

    Attributes:
        parent_id: The parent agent.
        child_id: The child.
        success: Whether the child finished with a result.
        result: Its final result text (``""`` on failure).
        error: Why it failed, or ``None``.
    """

    parent_id: str
    child_id: str
    success: bool
    result: str = ""
    error: str | None = None

    def to_payload(self) -> dict[str, Any]:
        """Event payload form."""
        return {"parent_id": self.parent_id, "child_id": self.child_id,
                "success": self.success, "result": self.result, "error": self.error}  # fmt: skip

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> SpawnResult:
        """Parse an event payload."""
        error = payload.get("error")
        return cls(parent_id=str(payload["parent_id"]), child_id=str(payload["child_id"]),
                   success=bool(payload["success"]), result=str(payload.get("result", "")),
                   error=None if error is None else str(error))  # fmt: skip


ChildRunner = Callable[[SpawnRequest], Awaitable[str]]
"""Runs one child from its request and returns its final result text."""


class SpawnWorker:
    """Serves spawn requests from a bus: runs each child, publishes its result.

    A child that raises, or runs past its request's ``timeout_s``, yields a result with
    ``success=False`` and the error (cut as every failure reason is: `bounded_reason`). Use
    as an async context manager, or call `start` / `aclose`.

    Args:
        bus: The bus to serve.
        run_child: Runs one child (for example a fresh `AgentSession` plus a dispatch).
    """

    def __init__(self, bus: EventBus, run_child: ChildRunner) -> None:
        self._bus = bus
        self._run_child = run_child
        self._tasks: set[asyncio.Task[None]] = set()
        self._unsubscribe: Callable[[], None] | None = None

    def start(self) -> None:
        """Subscribe to ``spawn.request``."""
        if self._unsubscribe is None:
            self._unsubscribe = self._bus.subscribe(SPAWN_REQUEST, self._on_request)

    async def aclose(self) -> None:
        """Unsubscribe and cancel children still running."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> SpawnWorker:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _on_request(self, event: Event) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, event: Event) -> None:
        request = SpawnRequest.from_payload(event.payload)
        try:
            text = await asyncio.wait_for(self._run_child(request), request.timeout_s)
            result = SpawnResult(parent_id=request.parent_id, child_id=request.child_id,
                                 success=True, result=text)  # fmt: skip
        except TimeoutError:
            result = SpawnResult(parent_id=request.parent_id, child_id=request.child_id,
                                 success=False,
                                 error=f"timeout_s exceeded: {request.timeout_s}")  # fmt: skip
        except Exception as exc:  # a child's failure is its result, not the worker's
            # Bounded: the text can be a provider's error body, and it reaches the parent's
            # prompt and the ledger.
            result = SpawnResult(parent_id=request.parent_id, child_id=request.child_id,
                                 success=False,
                                 error=bounded_reason(f"{type(exc).__name__}: {exc}"))  # fmt: skip
        self._bus.publish(SPAWN_RESULT, result.to_payload(), correlation_id=event.correlation_id)
