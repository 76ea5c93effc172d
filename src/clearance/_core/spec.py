"""Declarative specs: what a task is, what an agent is, what a team is.

Specs are frozen, keyword-only dataclasses. They hold no run-time state; the state of a
run lives in the state layer (`TaskQueue`, `SharedMemory`, the ledger).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, get_args

from clearance._core.errors import ConfigError

__all__ = ["Agent", "AgentLimits", "MemoryScope", "Task", "Team"]

MemoryScope = Literal["dependencies", "transitive", "all"]
"""Which earlier results a task may see.

- ``"dependencies"`` (default): the results of its direct dependencies only.
- ``"transitive"``: the results of every ancestor in the graph.
- ``"all"``: opt-in full view of every completed result of the run.
"""

_SCOPES = frozenset(get_args(MemoryScope))
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def _check_name(kind: str, value: str) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigError(
            f"{kind} {value!r} is not valid: use 1-128 letters, digits, '_', '.', ':' "
            "or '-', starting with a letter or digit"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Task:
    """One unit of work in a task graph.

    Attributes:
        id: Unique id within the graph.
        title: One-line title, shown to dependents above this task's result.
        description: The full task text given to the assignee.
        assignee: Name of the agent that performs the task.
        depends_on: Ids of the tasks whose results this task needs.
        memory_scope: Which earlier results the task may see (see `MemoryScope`).
        files: Paths, relative to the run's input root, whose contents the task may see.
    """

    id: str
    title: str
    description: str
    assignee: str
    depends_on: tuple[str, ...] = ()
    memory_scope: MemoryScope = "dependencies"
    files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name("task id", self.id)
        if self.memory_scope not in _SCOPES:
            raise ConfigError(
                f"memory_scope must be one of {sorted(_SCOPES)}, got {self.memory_scope!r}",
                field=f"tasks.{self.id}.memory_scope",
            )
        if not self.title.strip():
            raise ConfigError("title is empty", field=f"tasks.{self.id}.title")
        # Accept lists from callers but store tuples, so the spec stays hashable and frozen.
        object.__setattr__(self, "depends_on", tuple(dict.fromkeys(self.depends_on)))
        object.__setattr__(self, "files", tuple(self.files))


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentLimits:
    """Hard limits on one agent's work.

    Attributes:
        max_output_tokens: Most tokens the model may generate per call.
        max_prompt_tokens: Most tokens a prompt may hold; ``None`` means the model's context
            window minus ``max_output_tokens``. A larger prompt fails the task with
            `LimitExceeded`; nothing is truncated silently.
        timeout_s: Wall-clock seconds one model call may take; ``None`` means no limit.
    """

    max_output_tokens: int = 512
    max_prompt_tokens: int | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_output_tokens < 1:
            raise ConfigError("must be at least 1", field="limits.max_output_tokens")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ConfigError("must be at least 1", field="limits.max_prompt_tokens")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ConfigError("must be positive", field="limits.timeout_s")


@dataclass(frozen=True, kw_only=True, slots=True)
class Agent:
    """Declarative spec of an agent: a pure function from its prompt to a result text.

    Attributes:
        name: Unique name within the team; tasks name it as their assignee.
        instructions: The system prompt.
        role: One-line summary shown to the coordinator when it plans; defaults to the first
            line of ``instructions``.
        model: Model id (``"provider:name"``), or ``None`` for the orchestrator's default.
        limits: Hard limits on the agent's model calls.
    """

    name: str
    instructions: str
    role: str = ""
    model: str | None = None
    limits: AgentLimits = field(default_factory=AgentLimits)

    def __post_init__(self) -> None:
        _check_name("agent name", self.name)

    @property
    def summary(self) -> str:
        """A short role summary (at most 200 characters) for the coordinator's roster."""
        text = self.role or (self.instructions.strip().splitlines() or [""])[0]
        return text if len(text) <= 200 else text[:197] + "..."


@dataclass(frozen=True, kw_only=True, slots=True)
class Team:
    """Agents plus an optional coordinator that plans and synthesizes.

    Attributes:
        agents: The workers; names must be unique.
        coordinator: The agent that plans (`Orchestrator.run_team`) and writes the synthesis
            with the full view; ``None`` means a built-in coordinator on the default model.
        name: A label for the team, shown in the ledger.

    Raises:
        ConfigError: On duplicate agent names.
    """

    agents: tuple[Agent, ...]
    coordinator: Agent | None = None
    name: str = "team"

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", tuple(self.agents))
        seen: set[str] = set()
        for agent in self.agents:
            if agent.name in seen:
                raise ConfigError(f"duplicate agent name {agent.name!r}", field="agents")
            seen.add(agent.name)

    def agent(self, name: str) -> Agent:
        """Return the worker named ``name``.

        Raises:
            ConfigError: If no worker has that name.
        """
        for agent in self.agents:
            if agent.name == name:
                return agent
        known = ", ".join(a.name for a in self.agents) or "none"
        raise ConfigError(f"unknown agent {name!r} (agents: {known})", field="assignee")
