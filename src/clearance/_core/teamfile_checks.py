"""Team-file checks across keys: settings that would have no effect, messages to nobody."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clearance._core.errors import ConfigError
from clearance._core.for_each_file import included
from clearance._core.names import check_tool_name, reserved_tool_name
from clearance._core.run_spec import RunSpec
from clearance._core.spec import Agent, Task, Team

__all__ = [
    "check_chat_agent",
    "check_effective",
    "check_input",
    "check_messages",
    "check_paths",
    "check_tool_entries",
]

_LOOP_KEYS = ("tools", "can_delegate_to", "can_spawn", "store_grants")
"""An agent's keys that act only through its tool loop (store grants through store tools)."""

_STORE_READS = ("store_get", "store_query", "store_get_structured", "store_search")
"""The store tools whose reads move an entry's expiry (``store_read_extends_ttl_s``)."""

_NO_REPEAT_PENALTY = frozenset({"anthropic"})
"""Providers whose API has no repeat penalty (``sampling.repeat_penalty`` is not sent)."""

_NO_OUTPUTS = ("write_output", "writes no outputs: give it the write_output tool")
_NO_SPAWN = ("spawn", "spawns no children: give it can_spawn")
_NO_LOOP = ("tools", "runs no tool loop: give it tools, can_delegate_to or can_spawn")
_NEEDS = {
    "max_output_files": _NO_OUTPUTS, "max_output_size_bytes": _NO_OUTPUTS,
    "max_children": _NO_SPAWN, "spawn_timeout_s": _NO_SPAWN,
    "max_steps": _NO_LOOP, "answer_at_max_steps": _NO_LOOP, "compact_tool_steps": _NO_LOOP,
}  # fmt: skip
"""An agent limit's need (what its agent must have) and the reason it has no effect without."""


def check_effective(spec: RunSpec, team: Team, tasks: tuple[Task, ...]) -> None:
    """Refuse keys that would have no effect: a setting nobody reads is a silent no-op.

    Raises:
        ConfigError: An agent limit its agent never uses (``max_output_files`` without
            ``write_output``, ``max_children`` without ``can_spawn``, ``max_steps`` without a
            tool loop), ``store_grants`` on an agent with no store tool and nobody it calls
            (its grants bound its delegates' and children's), ``project``, ``isolation``
            or ``workspace`` in a team without isolated tasks or tool loops, ``store``
            in a team none of whose agents has a store tool, ``store_read_extends_ttl_s`` on
            an agent without store tools, ``memory.record_to`` with ``memory.record: none``,
            or ``memory`` in a team none of whose agents has ``memory:``, or
            ``after_failure: proceed`` on a task without dependencies; an agent's
            ``memory`` that recalls and records nothing, ``sampling.repeat_penalty`` on an
            ``anthropic:`` model, ``max_dependency_tokens`` on an agent whose tasks admit
            no result, ``memory_scope: transitive`` that admits no more than the
            dependencies (a ``tools:`` entry: `check_tool_entries`).
    """
    specs = [*spec.agents, *((spec.coordinator,) if spec.coordinator else ())]
    for entry in specs:
        agent = entry.to_agent()
        where = "coordinator" if entry is spec.coordinator else f"agents.{agent.name}"
        has = {
            "write_output": "write_output" in entry.tools,
            "spawn": bool(agent.can_spawn),
            "tools": agent.uses_tools,
        }
        for name in sorted(entry.limits.model_fields_set):
            need = _NEEDS.get(name)
            if need is not None and not has[need[0]]:
                raise ConfigError(
                    f"has no effect: agent {agent.name!r} {need[1]}",
                    field=f"{where}.limits.{name}",
                )
    for entry in spec.agents:
        store_tools = [t for t in entry.tools if t.startswith("store_")]
        if entry.store_grants and not (store_tools or entry.can_delegate_to or entry.can_spawn):
            raise ConfigError(
                f"has no effect: agent {entry.name!r} has no store tool (store_get, ...) and "
                "no delegate or child to bound",
                field=f"agents.{entry.name}.store_grants",
            )
        reads = any(t in _STORE_READS for t in entry.tools)
        bounds = entry.can_delegate_to or entry.can_spawn  # its extension caps theirs
        if entry.store_read_extends_ttl_s is not None and not (reads or bounds):
            raise ConfigError(
                f"has no effect: agent {entry.name!r} reads the store through no tool "
                f"({', '.join(_STORE_READS)}) and has no delegate or child to bound",
                field=f"agents.{entry.name}.store_read_extends_ttl_s",
            )
    for entry in specs:
        where = "coordinator" if entry is spec.coordinator else f"agents.{entry.name}"
        if entry.memory is not None and entry.memory.record == "none" and entry.memory.recall == 0:
            raise ConfigError(
                f"has no effect: agent {entry.name!r} recalls nothing (recall: 0) and records "
                "nothing (record: none)",
                field=f"{where}.memory",
            )
        if entry.sampling.repeat_penalty is not None and _provider(entry.model or spec.model) in (
            _NO_REPEAT_PENALTY
        ):
            raise ConfigError(
                f"has no effect: agent {entry.name!r} runs on {entry.model or spec.model!r}, "
                "and the anthropic: Messages API has no repeat penalty",
                field=f"{where}.sampling.repeat_penalty",
            )
        if entry.memory is not None and entry.memory.record == "none" and entry.memory.record_to:
            raise ConfigError(
                f"has no effect: agent {entry.name!r} records nothing (memory.record: none)",
                field=f"{where}.memory.record_to",
            )
    if spec.memory is not None and not any(entry.memory is not None for entry in specs):
        raise ConfigError(
            "has no effect: no agent has memory: (give one memory: {recall: 3})", field="memory"
        )
    _check_scopes(tasks)
    _check_dependency_limits(spec, tasks)
    for task in tasks:
        if task.after_failure == "proceed" and not task.depends_on:
            raise ConfigError(
                f"has no effect: task {task.id!r} has no dependencies to fail",
                field=f"tasks.{task.id}.after_failure",
            )
    # A file `clearance plan` wrote keeps its source's keys for the plan's edits (`plan:`).
    isolated = any(t.mode == "isolated" for t in tasks) or spec.plan is not None
    workspaces = any(a.can_spawn or a.uses_tools for a in team.agents) or any(
        t.fan_out is not None for t in tasks
    )
    # Only the store tools read or write the store; a delegate or child is a team agent.
    stored = any(t.startswith("store_") for entry in specs for t in entry.tools)
    for key, used, why in (
        ("project", isolated, "no task has mode: isolated"),
        ("isolation", isolated, "no task has mode: isolated"),
        ("workspace", workspaces, "no agent runs a tool loop or spawns children"),
        ("store", stored, "no agent has a store tool (store_get, store_set, ...)"),
    ):
        if key in spec.model_fields_set and not used:
            raise ConfigError(f"has no effect: {why}", field=key)


def _provider(model: str | None) -> str | None:
    """The provider of a model id (``None``: the embedded default's, which takes every key)."""
    return model.partition(":")[0] if model else None


def _check_dependency_limits(spec: RunSpec, tasks: tuple[Task, ...]) -> None:
    """Refuse ``max_dependency_tokens`` on an agent whose tasks admit no other task's result.

    It bounds the results admitted into the agent's task prompts; a delegate's or child's
    prompt admits none. Not checked when the coordinator plans the tasks.

    Raises:
        ConfigError: An agent sets it, and none of its tasks has a dependency or
            ``memory_scope: all``.
    """
    if not tasks:
        return
    admitting = {
        t.assignee for t in tasks if t.run is None and (t.depends_on or t.memory_scope == "all")
    }
    for entry in spec.agents:
        if "max_dependency_tokens" in entry.limits.model_fields_set and entry.name not in (
            admitting
        ):
            raise ConfigError(
                f"has no effect: no task of agent {entry.name!r} sees another task's result "
                "(no depends_on, no memory_scope: all)",
                field=f"agents.{entry.name}.limits.max_dependency_tokens",
            )


def _check_scopes(tasks: tuple[Task, ...]) -> None:
    """Refuse ``memory_scope: transitive`` where it admits no more than ``dependencies``.

    Raises:
        ConfigError: A task's dependencies have no dependencies of their own.
    """
    by_id = {t.id: t for t in tasks}
    for task in tasks:
        if task.memory_scope != "transitive":
            continue
        if not any(by_id[d].depends_on for d in task.depends_on if d in by_id):
            raise ConfigError(
                f"has no effect: the dependencies of task {task.id!r} have no dependencies "
                "of their own, so it sees their results only (drop it, or depend on more)",
                field=f"tasks.{task.id}.memory_scope",
            )


def check_tool_entries(spec: RunSpec) -> None:
    """Refuse a ``tools:`` entry no agent lists, or one named like a built-in tool.

    Run after the other checks: a more particular mistake (a tool its agent's path cannot
    use) is named first. An agent listing a tool that is neither an entry nor built in is
    refused later, naming that agent's list (likely a misspelt entry): the entry is then not
    called unused here.

    Raises:
        ConfigError: Naming the entry.
    """
    specs = [*spec.agents, *((spec.coordinator,) if spec.coordinator else ())]
    listed = {t for entry in specs for t in entry.tools}
    misspelt = any(
        t not in spec.tools and not reserved_tool_name(t) and not t.startswith("mcp:")
        for t in listed
    )
    for name in spec.tools:
        check_tool_name(name, field=f"tools.{name}")
        if name not in listed and not misspelt:
            raise ConfigError(
                f"has no effect: no agent lists the tool {name!r} in its tools",
                field=f"tools.{name}",
            )


def check_input(spec: RunSpec, tasks: tuple[Task, ...]) -> None:
    """Hold the files tasks read from the input folder to ``input.include``.

    ``include`` bounds the files tasks may read: a ``for_each_file`` task's matches, and
    each task's ``files`` read from the input folder (a step's, a standard task's, and an
    isolated task's when ``project:`` names no other folder).

    Raises:
        ConfigError: A task lists a file none of the globs matches (naming the task's
            ``files``), or ``include`` is given and no task reads a file from the folder
            (an isolated task's ``FILE:`` requests do without ``project:``), in a file
            that is no plan.
    """
    include = spec.input.include
    reading = any(t.for_each_file for t in spec.tasks)
    asking = spec.project is None and spec.isolation.max_rounds > 0
    for task in tasks:
        if task.mode == "isolated" and asking:
            reading = True  # its FILE: requests are held to include
        if not task.files or (task.mode == "isolated" and spec.project is not None):
            continue
        reading = True
        for path in task.files:
            if not included(path, include):
                raise ConfigError(
                    f"task {task.id!r} lists {path!r}, which matches none of input.include "
                    f"({', '.join(include)})",
                    field=f"tasks.{task.id}.files",
                )
    if "include" in spec.input.model_fields_set and not reading and spec.plan is None:
        raise ConfigError(
            "has no effect: no task reads files from the input folder (files, for_each_file)",
            field="input.include",
        )


def check_messages(spec: RunSpec) -> None:
    """Refuse a message to or from an agent the team does not have."""
    names = {a.name for a in spec.agents}
    if spec.coordinator is not None:
        names.add(spec.coordinator.name)
    for i, message in enumerate(spec.messages):
        if message.sender not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(
                f"message from unknown agent {message.sender!r} (agents: {known})",
                field=f"messages.{i}.from",
            )
        if message.to != "*" and message.to not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(
                f"message to unknown agent {message.to!r} would reach nobody (agents: {known})",
                field=f"messages.{i}.to",
            )


def check_paths(spec: RunSpec, tasks: tuple[Task, ...]) -> None:
    """Refuse a capability declared where its agent is only called on a path it cannot apply.

    Every call path gets its agent from one runtime (see ``docs/architecture.md``, the
    capability-by-path table); a key that no path of its agent would apply is refused:

    - the coordinator plans, answers clarifications and writes the synthesis without a tool
      loop, and is never a task's assignee: ``tools``, ``can_delegate_to``, ``can_spawn``,
      ``store_grants`` and ``memory`` on it are refused;
    - an isolated task's subagent is dispatched without tools: its assignee may not declare
      ``tools``, ``can_delegate_to``, ``can_spawn`` or ``store_grants``;
    - long-term memory is recalled and recorded per task: ``memory`` on an agent that only
      ever runs as a delegate, a spawned child or a reviewer (never a task's assignee) is
      refused;
    - a spawned child never spawns, nor does a delegate (however deep) in a child's run:
      ``can_spawn`` on an agent that only ever runs as one (never a task's assignee nor a
      delegate, directly or through other delegates, of one) is refused;
    - a delegate or child is offered only the user and MCP tools its caller may call too:
      such a tool on an agent that only ever runs as one, none of whose callers has it, is
      refused.

    A run planned by the coordinator (no ``tasks:``) is not checked for the last three, since
    the plan assigns the tasks.

    Raises:
        ConfigError: The first such key, naming it and the path.
    """
    assignees = {t.assignee for t in tasks}
    coordinator = spec.coordinator
    if coordinator is not None:  # a task's assignee is a worker, never the coordinator
        for key in (*_LOOP_KEYS, "memory"):
            if key in coordinator.model_fields_set and getattr(coordinator, key):
                raise ConfigError(
                    "has no effect: the coordinator plans, answers clarifications and writes "
                    "the synthesis without tools or memory (give it to a worker agent)",
                    field=f"coordinator.{key}",
                )
    entries = {a.name: a for a in spec.agents}
    for task in tasks:
        entry = entries.get(task.assignee)
        if task.mode != "isolated" or entry is None:
            continue
        for key in _LOOP_KEYS:
            if getattr(entry, key):
                raise ConfigError(
                    f"has no effect on isolated task {task.id!r}: an isolated subagent is "
                    "dispatched without tools (use a standard task, or another agent)",
                    field=f"agents.{entry.name}.{key}",
                )
    if not tasks:
        return
    _check_recipients(spec, tasks)
    callees: dict[str, str] = {}
    for entry in spec.agents:
        for target in entry.can_delegate_to:
            callees.setdefault(target, f"a delegate of {entry.name!r}")
        for target in entry.can_spawn:
            callees.setdefault(target, f"a child spawned by {entry.name!r}")
    for task in tasks:
        if task.fan_out is not None:
            callees.setdefault(task.fan_out.agent, f"a child of task {task.id!r}")
    for name, path in sorted(callees.items()):
        entry = entries.get(name)
        if entry is not None and entry.memory is not None and name not in assignees:
            raise ConfigError(
                f"has no effect: agent {name!r} runs only as {path}, and memory is recalled "
                "and recorded per task (a delegate or child never has more than its caller)",
                field=f"agents.{name}.memory",
            )
    for task in tasks:
        for reviewer in task.review.by if task.review is not None else ():
            entry = entries.get(reviewer)
            if entry is not None and entry.memory is not None and reviewer not in assignees:
                raise ConfigError(
                    f"has no effect: agent {reviewer!r} runs only as a reviewer of task "
                    f"{task.id!r}, which answers with the task and the candidate only; memory "
                    "is recalled and recorded per task (assign it a task to use it)",
                    field=f"agents.{reviewer}.memory",
                )
    _check_child_spawns(spec, tasks, assignees)
    _check_lent_tools(spec, tasks, assignees)


def _check_recipients(spec: RunSpec, tasks: tuple[Task, ...]) -> None:
    """Refuse a message to an agent that reads messages in no prompt.

    Messages reach the prompt of a standard task only (`ContextBuilder.build_task_prompt`):
    the coordinator, a reviewer, a delegate, a child, an isolated subagent and a step read
    none. A message to an agent that is the assignee of no standard task, or to everyone
    (``*``) in a run without one, would reach nobody.
    """
    readers = {t.assignee for t in tasks if t.run is None and t.mode != "isolated"}
    for i, message in enumerate(spec.messages):
        if message.to in readers or (message.to == "*" and readers):
            continue
        who = "no agent" if message.to == "*" else f"agent {message.to!r}"
        raise ConfigError(
            f"has no effect: {who} is the assignee of no standard task, and messages reach "
            "task prompts only (not the coordinator, reviewers, delegates, children, "
            "isolated tasks or steps)",
            field=f"messages.{i}.to",
        )


def _check_child_spawns(spec: RunSpec, tasks: tuple[Task, ...], assignees: set[str]) -> None:
    """Refuse ``can_spawn`` on an agent that only ever runs within a spawned child's run.

    A child's tool loop is offered no ``spawn`` tool (a spawned child never spawns), and a
    delegate acts in its delegator's loop, so neither is a delegate of a child, however many
    delegates down. On an agent that runs only that way (never a task's assignee, nor a
    delegate, directly or through other delegates, of one), ``can_spawn`` would be silently
    ignored. The walk visits each agent once.
    """
    parents: dict[str, set[str]] = {}
    for entry in spec.agents:
        for target in entry.can_spawn:
            parents.setdefault(target, set()).add(repr(entry.name))
    for task in tasks:
        if task.fan_out is not None:
            parents.setdefault(task.fan_out.agent, set()).add(f"task {task.id!r}")
    delegates = {a.name: a.can_delegate_to for a in spec.agents}
    spawning = _delegation_closure(assignees, delegates)  # runs where spawn is offered
    within_child = _delegation_closure(set(parents), delegates)
    for entry in spec.agents:
        name = entry.name
        if name not in within_child or name in spawning or not entry.can_spawn:
            continue
        if name in parents:
            path = f"a child spawned by {', '.join(sorted(parents[name]))}"
        else:
            callers = sorted(repr(a) for a in within_child if name in delegates.get(a, ()))
            path = f"a delegate of {', '.join(callers)} within a spawned child's run"
        raise ConfigError(
            f"has no effect: agent {name!r} runs only as {path}, and a spawned child never "
            "spawns, nor does a delegate in its run (give can_spawn to its parent, or make it "
            "a task's assignee or the delegate of one)",
            field=f"agents.{name}.can_spawn",
        )


def _delegation_closure(start: set[str], delegates: Mapping[str, Sequence[str]]) -> set[str]:
    """``start`` and every agent a member delegates to, directly or through other delegates."""
    reached = set(start)
    pending = list(start)
    while pending:
        for target in delegates.get(pending.pop(), ()):
            if target not in reached:
                reached.add(target)
                pending.append(target)
    return reached


def _check_lent_tools(spec: RunSpec, tasks: tuple[Task, ...], assignees: set[str]) -> None:
    """Refuse a user or MCP tool of an agent that runs only for callers none of which has it.

    A delegate or child is offered only the tools its caller may call too (workspace and
    store tools aside: `clearance._context.authority`), so on an agent that is never a
    task's assignee, a tool none of its callers has would never be offered. Likewise its
    reads extend an entry's expiry only when its caller's do too: its
    ``store_read_extends_ttl_s`` is refused when no caller sets one.
    """
    callers: dict[str, set[str]] = {}
    for entry in spec.agents:
        for target in (*entry.can_delegate_to, *entry.can_spawn):
            callers.setdefault(target, set()).add(entry.name)
    for task in tasks:
        if task.fan_out is not None:
            callers.setdefault(task.fan_out.agent, set()).add(task.assignee)
    entries = {a.name: a for a in spec.agents}
    for name, above in sorted(callers.items()):
        callee = entries.get(name)
        if callee is None or name in assignees:
            continue
        held = {t for caller in above if caller in entries for t in entries[caller].tools}
        for tool in callee.tools:
            if reserved_tool_name(tool) or tool in held:
                continue
            who = ", ".join(repr(c) for c in sorted(above))
            raise ConfigError(
                f"has no effect: agent {name!r} runs only as a delegate or child of {who}, "
                f"and none may call {tool!r} (a delegate or child never acts with more than "
                "its caller may): give the caller the tool, or remove it here",
                field=f"agents.{name}.tools",
            )
        extending = [c for c in above if c in entries and entries[c].store_read_extends_ttl_s]
        if callee.store_read_extends_ttl_s is not None and not extending:
            who = ", ".join(repr(c) for c in sorted(above))
            raise ConfigError(
                f"has no effect: agent {name!r} runs only as a delegate or child of {who}, "
                "whose reads extend no expiry (a read extends it only when its caller's do "
                "too): give the caller store_read_extends_ttl_s, or remove it here",
                field=f"agents.{name}.store_read_extends_ttl_s",
            )


def check_chat_agent(agent: Agent) -> None:
    """Refuse, for ``clearance chat``, an agent whose tool loop the chat would not run.

    Raises:
        ConfigError: The agent declares ``tools``, ``can_delegate_to``, ``can_spawn`` or
            ``store_grants`` (a chat turn is one model call with its memory, no tools).
    """
    for key in _LOOP_KEYS:
        if getattr(agent, key):
            raise ConfigError(
                "has no effect in clearance chat: a chat turn runs no tools (talk to an "
                "agent without them, or run the team file)",
                field=f"agents.{agent.name}.{key}",
            )
