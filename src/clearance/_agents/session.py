"""`AgentSession`: one agent's run-time state, steps and limits, in its own workspace.

A session records every step (model call, tool call, spawn, limit reached) as one JSON file
in ``history/``. A child spawned with `AgentSession.spawn_child` starts with an empty
history except its goal, in a sibling folder; the parent records the spawn as one step and
later receives only the child's final result (`AgentSession.child_result`), never its steps
or files.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from clearance._agents.caller import CallBudget, ModelCaller
from clearance._agents.workspace import Workspace, check_agent_id
from clearance._core.clock import Clock, utc_now
from clearance._core.errors import ConfigError, LimitExceeded
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, AgentLimits
from clearance._core.vocabulary import StepKind
from clearance.models._base import ChatModel, ModelResponse

__all__ = ["AgentSession", "Step"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One recorded step of an agent.

    Attributes:
        index: Position in the history, from 1.
        kind: ``goal``, ``model``, ``tool``, ``spawn``, ``limit_exceeded``...
        content: What happened, as text (a model's answer, a tool's output or reference).
        ok: ``False`` for a failed step; compaction keeps failed steps.
        data: Extra JSON-ready fields (tokens, child id...).
        created_at: When it was recorded (aware UTC).
    """

    index: int
    kind: str
    content: str
    ok: bool = True
    data: Mapping[str, Any] = field(default_factory=dict)
    created_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as written to ``history/<index>.json``."""
        return {
            "index": self.index,
            "kind": self.kind,
            "content": self.content,
            "ok": self.ok,
            "data": dict(self.data),
            "created_at": self.created_at,
        }


class AgentSession:
    """One agent's session: workspace, step history, limits, children.

    Args:
        agent_id: Names the agent's folder under ``base_dir`` (letters, digits, ``_.-``).
        base_dir: The folder that holds every agent's workspace of a run.
        goal: Recorded as the first step (kind ``goal``) when given.
        limits: ``max_steps``, ``max_tokens_per_step``, ``timeout_s`` (the deadline of each
            model call, as everywhere), ``max_output_files``, ``max_output_size_bytes``.
        clock: Timestamps of the steps.
        monotonic: Seconds counter for `elapsed_s` (injectable so tests never sleep).
        caller: The `ModelCaller` model steps go through; ``None`` for one that records
            nothing in a ledger.
        folder: The folder's name under ``base_dir`` when it is not ``agent_id`` (a run's
            child whose id is taken by another folder of the run); same characters.

    Raises:
        ConfigError: A bad ``agent_id``, or its folder already exists under ``base_dir``
            (even empty): each session's workspace is created fresh, never reused.
    """

    def __init__(
        self,
        agent_id: str,
        *,
        base_dir: Path,
        goal: str | None = None,
        limits: AgentLimits | None = None,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        caller: ModelCaller | None = None,
        folder: str | None = None,
    ) -> None:
        self.agent_id = check_agent_id(agent_id)
        self.base_dir = base_dir
        self.limits = limits or AgentLimits()
        try:
            self.workspace = Workspace(base_dir / check_agent_id(folder or agent_id),
                                       limits=self.limits, subject=f"agent:{agent_id}")  # fmt: skip
        except ConfigError as exc:
            raise ConfigError(f"agent {agent_id!r} needs a fresh workspace: {exc}",
                              field="agent_id") from None  # fmt: skip
        self._clock = clock
        self._monotonic = monotonic
        self.caller = caller if caller is not None else ModelCaller(clock=clock)
        self._started = monotonic()
        self._steps: list[Step] = []
        self._children: dict[str, AgentSession] = {}
        self.result: str | None = None
        self.goal = goal
        if goal is not None:
            self.record_step(StepKind.GOAL, goal)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps recorded so far, in order."""
        return tuple(self._steps)

    @property
    def elapsed_s(self) -> float:
        """Seconds since the session started."""
        return self._monotonic() - self._started

    # -- steps and limits ---------------------------------------------------------------

    def record_step(
        self, kind: str, content: str, *, ok: bool = True, data: Mapping[str, Any] | None = None
    ) -> Step:
        """Record one step and write it to ``history/<index:04d>.json``.

        Raises:
            LimitExceeded: The step would exceed ``max_steps`` (``limit="max_steps"``). The
                refusal itself is recorded as a ``limit_exceeded`` step.
        """
        if kind != StepKind.GOAL:
            self._admit_step()
        return self._write(kind, content, ok=ok, data=data or {})

    def _admit_step(self) -> None:
        maximum = self.limits.max_steps
        if maximum is not None and self._work_steps() + 1 > maximum:
            self._limit("max_steps", value=self._work_steps() + 1, maximum=maximum)

    async def call_model(
        self,
        model: ChatModel,
        prompt: Prompt,
        *,
        subject: str | None = None,
        budget: CallBudget | None = None,
        agent: Agent | None = None,
    ) -> ModelResponse:
        """One model step: call ``model`` on ``prompt`` (from the `ContextBuilder`), checked.

        The call goes through the session's `ModelCaller` under the session's limits
        (``timeout_s`` is the call's deadline, ``max_tokens_per_step`` the completion
        limit); the answer is recorded as a ``model`` step.

        Args:
            model: The model.
            prompt: The prompt.
            subject: The call's subject in the ledger; ``None`` means ``agent:<id>``.
            budget: A task's model-call budget, charged one call.
            agent: The agent the session runs (a spawned child's): the call is recorded as
                its call, with its sampling and model settings; ``None`` for an agent named
                after the session with the session's limits.

        Raises:
            LimitExceeded: ``max_steps``, or a limit of the call (see `ModelCaller.call`);
                each is recorded as a ``limit_exceeded`` step.
            ModelError: The model failed.
        """
        maximum = self.limits.max_steps
        if maximum is not None and self._work_steps() + 1 > maximum:
            self._limit("max_steps", value=self._work_steps() + 1, maximum=maximum)
        try:
            response = await self.caller.call(
                subject=subject or f"agent:{self.agent_id}", agent=agent or self._as_agent(),
                model=model,
                prompt=prompt, budget=budget,
            )  # fmt: skip
        except LimitExceeded as exc:
            self._write(StepKind.LIMIT_EXCEEDED, str(exc), ok=False, data=_limit_data(exc))
            raise
        self._write(StepKind.MODEL, response.text, ok=True, data={
            "prompt_sha256": prompt.manifest.prompt_sha256,
            "origins": list(prompt.manifest.origins),
            "usage": response.usage.to_dict(),
        })  # fmt: skip
        return response

    def _as_agent(self) -> Agent:
        """The spec the caller applies: this session's name and limits."""
        return Agent(name=self.agent_id, instructions="-", limits=self.limits)

    def write_output(self, name: str, data: str | bytes) -> Path:
        """Write to the workspace's ``outputs/`` within the output limits.

        Raises:
            PathEscapeError: ``name`` leaves ``outputs/``.
            LimitExceeded: ``max_output_files`` or ``max_output_size_bytes`` (recorded).
        """
        try:
            return self.workspace.write_output(name, data)
        except LimitExceeded as exc:
            self._write(StepKind.LIMIT_EXCEEDED, str(exc), ok=False, data=_limit_data(exc))
            raise

    # -- children -------------------------------------------------------------------------

    def spawn_child(
        self, child_id: str, goal: str, *, limits: AgentLimits | None = None
    ) -> AgentSession:
        """Create a child session in a sibling folder whose history holds only ``goal``.

        The parent records one ``spawn`` step (child id and goal) once the child's folder is
        created. The child shares nothing with the parent: not its history, not its
        workspace. Its folder is created fresh: a folder that already exists under
        ``base_dir`` (another agent's, even with an empty history) is refused, so a child
        never reads another agent's outputs.

        Args:
            child_id: The child's agent id (its folder name under ``base_dir``).
            goal: The only thing the child starts with.
            limits: The child's limits; ``None`` gives it the parent's.

        Raises:
            ConfigError: A bad or already used ``child_id``, or its folder already exists.
            LimitExceeded: The spawn step would exceed the parent's ``max_steps``.
        """
        check_agent_id(child_id)
        if child_id in self._children or child_id == self.agent_id:
            raise ConfigError(f"child id {child_id!r} is already used", field="child_id")
        self._admit_step()
        child = AgentSession(child_id, base_dir=self.base_dir, goal=goal,
                             limits=limits or self.limits, clock=self._clock,
                             monotonic=self._monotonic, caller=self.caller)  # fmt: skip
        self._children[child_id] = child
        self._write(StepKind.SPAWN, goal, ok=True, data={"child_id": child_id})
        return child

    def finish(self, result: str) -> None:
        """Set the session's final result: the one thing its parent receives."""
        self.result = result

    def child_result(self, child_id: str) -> str | None:
        """The final result of a child (``None`` until it finishes) — never its steps.

        Raises:
            ConfigError: No child of this session has that id.
        """
        if child_id not in self._children:
            raise ConfigError(f"{self.agent_id!r} has no child {child_id!r}", field="child_id")
        return self._children[child_id].result

    # -- internals ------------------------------------------------------------------------

    def _work_steps(self) -> int:
        return sum(1 for s in self._steps if s.kind not in (StepKind.GOAL, StepKind.LIMIT_EXCEEDED))

    def _write(self, kind: str, content: str, *, ok: bool, data: Mapping[str, Any]) -> Step:
        step = Step(index=len(self._steps) + 1, kind=kind, content=content, ok=ok, data=data,
                    created_at=self._clock().isoformat())  # fmt: skip
        self.workspace.write_history(
            f"{step.index:04d}.json", json.dumps(step.to_dict(), ensure_ascii=False, indent=1)
        )
        self._steps.append(step)
        return step

    def _limit(self, limit: str, *, value: int | float, maximum: int | float) -> NoReturn:
        exc = LimitExceeded(limit, value=value, maximum=maximum, subject=f"agent:{self.agent_id}")
        self._write(StepKind.LIMIT_EXCEEDED, str(exc), ok=False, data=_limit_data(exc))
        raise exc


def _limit_data(exc: LimitExceeded) -> dict[str, Any]:
    return {"limit": exc.limit, "value": exc.value, "maximum": exc.maximum}
