"""Checks, before anything runs, that a task graph can run with a team and its settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from clearance._agents.tools import BUILTIN_TOOL_NAMES, Tool, tool_name
from clearance._agents.workspace_tools import WRITE_OUTPUT_TOOL
from clearance._core.errors import ConfigError
from clearance._core.spec import Team
from clearance._orchestration.run_memory import RunMemory
from clearance._orchestration.steps import resolve_step
from clearance._state.graph import TaskGraph
from clearance._state.messages import MessageBus, check_recipient
from clearance._state.store import ContextStore

__all__ = ["check_graph", "check_tools"]


def check_graph(
    graph: TaskGraph,
    *,
    team: Team,
    tools: Mapping[str, Tool],
    store: ContextStore | None,
    memory: RunMemory | None,
    messages: MessageBus,
    synthesis_from: Sequence[str] | None,
    input_root: Path | None,
    project_root: Path | None,
) -> None:
    """Refuse, before anything runs, a graph that cannot run with this team.

    Args:
        graph: The run's tasks.
        team: The agents (and coordinator) the tasks are assigned to.
        tools: The user tools agents may opt in to, by name.
        store: The context store agents reach through their grants; ``None`` for none.
        memory: The long-term memory; ``None`` for none.
        messages: The team's message bus (every recipient must be a member).
        synthesis_from: Ids of the tasks the synthesis shows; ``None`` for all.
        input_root: Folder that task ``files`` are relative to; ``None`` for none.
        project_root: Folder that isolated tasks' ``files`` are relative to; ``None`` for none.

    Raises:
        ConfigError: An agent's tools or memory cannot be provided, a task names an unknown
            agent or task, lists files without a folder to read them from, fans out beyond its
            assignee's ``can_spawn`` or ``max_children``, or a message names an unknown
            recipient.
    """
    check_tools(team, tools, store)
    with_memory = [a.name for a in team.agents if a.memory is not None]
    if with_memory and memory is None:
        raise ConfigError(
            f"agents {with_memory} have memory settings but the orchestrator has no memory: "
            "pass memory=RunMemory(url)",
            field="memory",
        )
    names = {a.name for a in team.agents}
    unknown = sorted(set(synthesis_from or ()) - {t.id for t in graph})
    if unknown:
        raise ConfigError(f"names unknown task {unknown[0]!r}", field="synthesis_from")
    for task in graph:
        if task.run is not None:  # a non-model task: its assignee is only a label
            resolve_step(task)
            if task.files and input_root is None:
                raise ConfigError(
                    f"task {task.id!r} lists files but the orchestrator has no input_root",
                    field=f"tasks.{task.id}.files",
                )
            continue
        if task.assignee not in names:
            known = ", ".join(sorted(names)) or "none"
            raise ConfigError(
                f"task {task.id!r} is assigned to unknown agent {task.assignee!r} "
                f"(agents: {known})",
                field=f"tasks.{task.id}.assignee",
            )
        for reviewer in task.review.by if task.review is not None else ():
            if reviewer not in names or reviewer == task.assignee:
                raise ConfigError(
                    f"task {task.id!r} is reviewed by {reviewer!r}: name another agent of "
                    "the team than its assignee",
                    field=f"tasks.{task.id}.review.by",
                )
            if team.agent(reviewer).uses_tools or team.agent(reviewer).store_grants:
                raise ConfigError(
                    f"reviewer {reviewer!r} of task {task.id!r} answers in one call, with the "
                    "task and the candidate only: drop its tools, delegation, spawning and "
                    "store grants",
                    field=f"tasks.{task.id}.review.by",
                )
        root = project_root if task.mode == "isolated" else input_root
        if task.files and root is None:
            raise ConfigError(
                f"task {task.id!r} lists files but the orchestrator has no input_root",
                field=f"tasks.{task.id}.files",
            )
        assignee = team.agent(task.assignee)
        fan_out = task.fan_out
        if fan_out is not None and fan_out.agent not in assignee.can_spawn:
            allowed = ", ".join(assignee.can_spawn) or "nobody"
            raise ConfigError(
                f"task {task.id!r} fans out to {fan_out.agent!r}, but its assignee "
                f"{assignee.name!r} may spawn only: {allowed} (can_spawn)",
                field=f"tasks.{task.id}.fan_out",
            )
        if fan_out is not None and len(fan_out.goals) > assignee.limits.max_children:
            raise ConfigError(
                f"task {task.id!r} fans out to {len(fan_out.goals)} children, over "
                f"its assignee's max_children ({assignee.limits.max_children})",
                field=f"tasks.{task.id}.fan_out",
            )
    coordinator = team.coordinator
    members = names | ({coordinator.name} if coordinator is not None else set())
    for message in messages.all():
        check_recipient(message.recipient, members)


def check_tools(team: Team, user_tools: Mapping[str, Tool], store: ContextStore | None) -> None:
    """Refuse, before a run starts, tools that cannot be resolved.

    Raises:
        ConfigError: An agent names a tool that is neither built in nor registered, or
            uses a store tool (or has store grants) while the orchestrator has no store.
    """
    for agent in team.agents:
        for entry in agent.tools:
            name = tool_name(entry)
            where = f"agents.{agent.name}.tools"
            builtin = (*BUILTIN_TOOL_NAMES, WRITE_OUTPUT_TOOL)
            if isinstance(entry, str) and name not in builtin and name not in user_tools:
                known = ", ".join([*builtin, *sorted(user_tools)])
                raise ConfigError(f"unknown tool {name!r} (tools: {known})", field=where)
            if name in BUILTIN_TOOL_NAMES and store is None:
                raise ConfigError(
                    f"tool {name!r} needs a context store: pass store=ContextStore(...)",
                    field=where,
                )
