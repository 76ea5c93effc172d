"""Declarative specs: what a task is, what an agent is, what a team is.

Specs are frozen, keyword-only dataclasses. They hold no run-time state; the state of a
run lives in the state layer (`TaskQueue`, `SharedMemory`, the ledger).
"""

from __future__ import annotations

from dataclasses import dataclass

from clearance._core.agent_spec import (
    DEFAULT_TOOL_STEPS,
    Agent,
    AgentLimits,
    FileCaps,
    OversizePolicy,
    Sampling,
)
from clearance._core.errors import ConfigError
from clearance._core.memory_spec import MemoryGroup
from clearance._core.names import check_label
from clearance._core.task_spec import (
    MAX_FAN_OUT,
    AfterFailure,
    FanOut,
    MemoryScope,
    Task,
    TaskMode,
    schema_validator,
)

__all__ = [
    "DEFAULT_COORDINATOR",
    "DEFAULT_TOOL_STEPS",
    "MAX_FAN_OUT",
    "Agent",
    "AgentLimits",
    "FanOut",
    "FileCaps",
    "OversizePolicy",
    "AfterFailure",
    "MemoryScope",
    "Sampling",
    "Task",
    "TaskMode",
    "Team",
    "check_coordinator_name",
    "schema_validator",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Team:
    """Agents plus an optional coordinator that plans and synthesizes.

    Attributes:
        agents: The workers; names must be unique.
        coordinator: The agent that plans (`Orchestrator.run_team`) and writes the synthesis
            with the full view; ``None`` means a built-in coordinator on the default model.
        name: A label for the team, shown in the ledger.
        memory_groups: Declared memory groups, the only way agents share memory (none by
            default: every agent's memory is private).

    Raises:
        ConfigError: On duplicate agent names (the coordinator's included), ``can_spawn`` or
            ``can_delegate_to`` naming an unknown agent, or a memory group naming an unknown
            agent or declared twice.
    """

    agents: tuple[Agent, ...]
    coordinator: Agent | None = None
    name: str = "team"
    memory_groups: tuple[MemoryGroup, ...] = ()

    def __post_init__(self) -> None:
        check_label("name", self.name, most=128)
        if isinstance(self.agents, Agent):
            raise ConfigError("must be a list of agents, got one agent", field="agents")
        object.__setattr__(self, "agents", tuple(self.agents))
        for agent in (*self.agents, *((self.coordinator,) if self.coordinator else ())):
            if not isinstance(agent, Agent):
                raise ConfigError(f"must hold Agent specs, got {agent!r:.60}", field="agents")
        seen: set[str] = set()
        for agent in self.agents:
            if agent.name in seen:
                raise ConfigError(f"duplicate agent name {agent.name!r}", field="agents")
            seen.add(agent.name)
        if self.coordinator is not None and self.coordinator.name in seen:
            raise ConfigError(
                f"{self.coordinator.name!r} is a worker's name: give the coordinator its own "
                "(the ledger and verify tell agents apart by name)",
                field="coordinator.name",
            )
        for agent in (*self.agents, *((self.coordinator,) if self.coordinator else ())):
            for key in ("can_spawn", "can_delegate_to"):
                unknown = sorted(set(getattr(agent, key)) - seen)
                if unknown:
                    raise ConfigError(
                        f"{key} names unknown agents {unknown}",
                        field=f"agents.{agent.name}.{key}",
                    )
        object.__setattr__(self, "memory_groups", tuple(self.memory_groups))
        names: set[str] = set()
        for group in self.memory_groups:
            unknown = sorted(set(group.agents) - seen)
            if unknown or group.name in names:
                problem = f"unknown agents {unknown}" if unknown else "declared twice"
                raise ConfigError(problem, field=f"memory_groups.{group.name}")
            names.add(group.name)
        for agent in (*self.agents, *((self.coordinator,) if self.coordinator else ())):
            target = agent.memory.record_to if agent.memory else None
            if target is not None and not any(
                g.name == target and agent.name in g.agents for g in self.memory_groups
            ):
                raise ConfigError(
                    f"{agent.name!r} is not a member of a declared memory group {target!r}",
                    field=f"agents.{agent.name}.memory.record_to",
                )

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


DEFAULT_COORDINATOR = Agent(
    name="coordinator",
    instructions=(
        "You are the coordinator of a team of agents. You plan the team's work, and you "
        "write the final answer from the results your team members report."
    ),
)
"""The coordinator of a team that declares none."""


def check_coordinator_name(team: Team) -> None:
    """Refuse a worker named like the built-in coordinator in a team that declares none.

    For a team that runs tasks or plans (not for ``clearance chat``, which runs no
    coordinator): the built-in coordinator plans and synthesizes under its name, so a worker
    of that name would be recorded under the same name, and the ledger and ``verify`` tell
    agents apart by name.

    Raises:
        ConfigError: A worker is named ``coordinator`` and the team declares no coordinator.
    """
    if team.coordinator is None and any(a.name == DEFAULT_COORDINATOR.name for a in team.agents):
        raise ConfigError(
            f"{DEFAULT_COORDINATOR.name!r} is the built-in coordinator's name: give the "
            "worker another, or declare a coordinator (the ledger and verify tell agents "
            "apart by name)",
            field="agents",
        )
