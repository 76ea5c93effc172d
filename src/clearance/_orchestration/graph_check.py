"""Checks, before anything runs, that a task graph can run with a team and its settings.

Two entry points share the checks of tasks (`check_tasks`) and tools (`check_tools`):

- `check_spec`: a team file's spec, before anything is opened. ``clearance graph``, ``plan``
  and ``run`` call it (through `checked_run`), so each refuses the same files with the same
  line. It needs no model, ledger, store, memory or network, and runs no user code: a
  ``tools:`` entry's or ``python:`` step's module is only looked up (`find_user_module`),
  and MCP servers are not started.
- `check_graph`: an orchestrator's graph, with what the orchestrator holds (imported tools,
  an opened store and memory, the message bus), when a run starts.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearance._agents.tools import BUILTIN_TOOL_NAMES, DELEGATE_TOOL, SPAWN_TOOL, Tool, tool_name
from clearance._agents.workspace_tools import WORKSPACE_TOOLS
from clearance._context.verify_children import child_id_problem
from clearance._core.errors import ConfigError
from clearance._core.mcp_spec import MCP_FUNCTION_PREFIX, MCP_PREFIX, mcp_refs
from clearance._core.names import title_key
from clearance._core.run_spec import RunSpec
from clearance._core.spec import DEFAULT_COORDINATOR, Agent, Task, Team, check_coordinator_name
from clearance._core.task_spec import MAX_GOAL_CHARS, goal_too_long
from clearance._core.teamfile import LoadedTeam
from clearance._core.user_modules import split_import_path
from clearance._orchestration.steps import resolve_step, step_target
from clearance._state.graph import TaskGraph
from clearance._state.messages import check_recipient
from clearance.models._registry import DEFAULT_MODEL_ID

if TYPE_CHECKING:  # a run's resources: their databases (SQLAlchemy) load only when a run opens them
    from clearance._orchestration.run_memory import RunMemory
    from clearance._state.messages import MessageBus
    from clearance._state.store import ContextStore

__all__ = [
    "check_children",
    "check_graph",
    "check_new_tasks",
    "check_spec",
    "check_tasks",
    "check_tools",
    "find_import_path",
    "find_step",
    "find_user_module",
]

_BUILTIN = frozenset({*BUILTIN_TOOL_NAMES, *WORKSPACE_TOOLS})


def check_spec(
    loaded: LoadedTeam, graph: TaskGraph | None, *, given_tools: Collection[str] = ()
) -> None:
    """Refuse, before anything is opened, a prepared spec that its run would refuse.

    The checks a run makes before its first task that need no model, ledger, store, memory
    or network, in the run's order: each ``tools:`` entry names a function whose module can
    be found (`find_import_path`); a cost budget has a price for each agent's model id; each
    agent's tools are known (`check_tools`, counting the spec's ``store``); and, when there
    are tasks, each can run with the team (`check_tasks`, a ``python:`` step's module only
    looked up). No user code runs: a module that is found but fails when imported, or has
    no such function, or a function without type hints, is refused only when the run
    imports it; so is a ``python:`` step whose package is found but not its submodule. MCP
    servers are not started: their tools are taken to be there.

    Args:
        loaded: The prepared spec (`prepare_run`).
        graph: Its tasks as a graph; ``None`` when the coordinator plans them.
        given_tools: Names of user tools given in code (``tools=``), which need no entry.

    Raises:
        ConfigError: As `check_coordinator_name`, `find_import_path`, `check_tools`,
            `check_tasks` and `check_children`; a ``tools:``
            entry has no function and is not given, or is named ``mcp__...`` (as MCP tools
            are called); or a cost budget has no price for a model an agent uses
            (``prices``).
    """
    spec = loaded.spec
    check_coordinator_name(loaded.team)
    user_tools = set(given_tools)
    for name in spec.tools:  # a caller's ceiling is by name: it would pass as an MCP tool
        if name.startswith(MCP_FUNCTION_PREFIX):
            raise ConfigError(
                f"{name!r} is named like an MCP tool (name those {MCP_PREFIX}<server>/<tool> "
                "in an agent's tools): give it another name",
                field=f"tools.{name}",
            )
    for name, path in tool_import_paths(spec, given_tools):
        find_import_path(path, field=f"tools.{name}")
        user_tools.add(name)
    team = loaded.team
    agents = (*team.agents, team.coordinator or DEFAULT_COORDINATOR)
    user_tools.update(r.model_name for a in agents for r in mcp_refs(a.tools))
    if (budget := spec.run_budget()) is not None:
        default = spec.model or DEFAULT_MODEL_ID
        budget.check_prices({a.model or default for a in agents})
    check_tools(team, user_tools, has_store=spec.store is not None)
    if graph is not None:
        check_titles(graph)
        check_tasks(
            graph, team=team, synthesis_from=loaded.synthesis_from,
            input_root=loaded.input_root, project_root=loaded.project_root, check_step=find_step,
        )  # fmt: skip
        check_children(graph, team)


def check_children(graph: TaskGraph, team: Team) -> None:
    """Refuse tasks whose children could not be told apart or could not run.

    A new run is held to this; a run resumed from its record is not (it is verified as it
    ran).

    Raises:
        ConfigError: A ``fan_out`` goal is over `MAX_GOAL_CHARS` (it heads its child's
            result, on one line), two tasks' ids give one child-id prefix (``a:b`` and
            ``a_b``: both are named), or a task that may have children has an id too long
            for their ids (`child_id_problem`).
    """
    for task in graph:
        for index, goal in enumerate(task.fan_out.goals if task.fan_out else (), 1):
            if len(goal) > MAX_GOAL_CHARS:
                raise ConfigError(
                    goal_too_long(goal, f"goal {index}"), field=f"tasks.{task.id}.fan_out.goals"
                )
    problem = child_id_problem(graph, team)
    if problem is not None:
        raise ConfigError(problem[1], field=problem[0])


def check_new_tasks(graph: TaskGraph, team: Team) -> None:
    """`check_titles` and `check_children`: what a new run's tasks are held to, not a resume's.

    Raises:
        ConfigError: As `check_titles` and `check_children`.
    """
    check_titles(graph)
    check_children(graph, team)


def find_user_module(name: str) -> bool:
    """Whether the top-level package of ``name`` can be found where `import_user_module` looks.

    Installed (`importlib.util.find_spec` of a name without a dot imports nothing), else in
    the current folder. No code runs: a submodule is not looked for, since finding it would
    import its package.
    """
    top = name.partition(".")[0]
    if top in sys.modules:
        return True
    if importlib.util.find_spec(top) is not None:
        return True
    return importlib.machinery.PathFinder.find_spec(top, [os.getcwd()]) is not None


def _check_module(module_name: str, *, field: str) -> None:
    """Refuse a module `import_user_module` would refuse without running it, as it says it.

    Raises:
        ConfigError: ``module_name`` is not dotted identifiers, or its top-level package
            cannot be found (the message `import_function` and `resolve_step` give).
    """
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise ConfigError(
            f"cannot import {module_name!r}: ValueError: {module_name!r} is not a module name "
            "(dotted identifiers)",
            field=field,
        )
    if not find_user_module(module_name):
        top = module_name.partition(".")[0]
        raise ConfigError(
            f"cannot import {module_name!r}: ModuleNotFoundError: No module named {top!r} "
            "(installed or in the current folder)",
            field=field,
        )


def find_import_path(path: str, *, field: str) -> None:
    """Refuse a ``module:function`` path `import_function` would refuse, without importing.

    Raises:
        ConfigError: The path is malformed, or its module's top-level package cannot be
            found (`find_user_module`); ``field`` names the entry.
    """
    module_name, _ = split_import_path(path, field=field)
    _check_module(module_name, field=field)


def tool_import_paths(spec: RunSpec, given: Collection[str]) -> Iterator[tuple[str, str]]:
    """The ``tools:`` entries a run imports: ``(name, "module:function")`` each.

    Tools ``given`` in code and the built-ins are left out.

    Raises:
        ConfigError: An entry has no import path (it was given in code when the run started)
            and is not given now.
    """
    for name, path in spec.tool_functions.items():
        if name in given or (path is None and name in _BUILTIN):
            continue
        if path is None:
            raise ConfigError(
                f"the tool {name!r} has no import path (it was given in code); give it with "
                "tools= (or name it in the team file's tools: and resume with --team)",
                field=f"tools.{name}",
            )
        yield name, path


def find_step(task: Task) -> None:
    """Refuse a step task `resolve_step` would refuse, without importing its module.

    Raises:
        ConfigError: An unknown ``step:``, or a ``python:`` module whose top-level package
            cannot be found.
    """
    target = step_target(task)
    if isinstance(target, tuple):
        _check_module(target[0], field=f"tasks.{task.id}.run")


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
    check_tools(team, tools, has_store=store is not None)
    with_memory = [a.name for a in team.agents if a.memory is not None]
    if with_memory and memory is None:
        raise ConfigError(
            f"agents {with_memory} have memory settings but the orchestrator has no memory: "
            "pass memory=RunMemory(url)",
            field="memory",
        )
    check_tasks(
        graph, team=team, synthesis_from=synthesis_from, input_root=input_root,
        project_root=project_root, check_step=resolve_step,
    )  # fmt: skip
    names = {a.name for a in team.agents}
    coordinator = team.coordinator
    members = names | ({coordinator.name} if coordinator is not None else set())
    for message in messages.all():
        check_recipient(message.recipient, members)


def check_titles(graph: TaskGraph) -> None:
    """Refuse two tasks whose titles read alike (`title_key`: NFKC, case, invisible marks).

    A result is labelled by its task's title (and assignee) where others read it: in its
    dependents' prompts and in the synthesis. Two tasks of one title, or of titles that
    differ only by a zero-width character, a normalization form or full-width letters,
    would be results that no one could tell apart. A new run is held to this; a run resumed
    from its record is not (it started under the rules of its day).

    Raises:
        ConfigError: Two titles read alike (both ids are named, and both titles, escaped,
            when they differ).
    """
    seen: dict[str, Task] = {}
    for task in graph:
        other = seen.setdefault(title_key(task.title), task)
        if other.id != task.id:
            same = other.title.casefold() == task.title.casefold()
            shown = (
                f"title {task.title!r}" if same else f"titles {other.title!a} and {task.title!a}"
            )
            raise ConfigError(
                f"tasks {other.id!r} and {task.id!r} have the same {shown}: results "
                "are labelled by title, so give each task a title of its own",
                field=f"tasks.{task.id}.title",
            )


def check_tasks(
    graph: TaskGraph,
    *,
    team: Team,
    synthesis_from: Sequence[str] | None,
    input_root: Path | None,
    project_root: Path | None,
    check_step: Callable[[Task], object],
) -> None:
    """Refuse, before anything runs, tasks that cannot run with this team.

    Args:
        graph: The run's tasks.
        team: The agents the tasks are assigned to.
        synthesis_from: Ids of the tasks the synthesis shows; ``None`` for all.
        input_root: Folder that task ``files`` are relative to; ``None`` for none.
        project_root: Folder that isolated tasks' ``files`` are relative to; ``None`` for none.
        check_step: Called with each step task (``run:``); raises `ConfigError` for a step
            that cannot run (`resolve_step` imports its module; `find_step` only looks it up).

    Raises:
        ConfigError: ``synthesis_from`` names an unknown task, or a task names an unknown
            agent, a reviewer that cannot review it, a step that cannot run (or has an
            ``output_schema``), lists files without a folder to read them from, or fans out
            beyond its assignee's ``can_spawn`` or ``max_children``.
    """
    names = {a.name for a in team.agents}
    unknown = sorted(set(synthesis_from or ()) - {t.id for t in graph})
    if unknown:
        raise ConfigError(f"names unknown task {unknown[0]!r}", field="synthesis_from")
    for task in graph:
        if task.run is not None:  # a non-model task: its assignee is only a label
            check_step(task)
            if task.output_schema is not None:  # nothing would hold the step's output to it
                raise ConfigError(
                    f"task {task.id!r} runs a function, not a model: its output is not held "
                    "to an output_schema (drop it)",
                    field=f"tasks.{task.id}.output_schema",
                )
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
        _check_reviewers(task, team)
        root = project_root if task.mode == "isolated" else input_root
        if task.files and root is None:
            raise ConfigError(
                f"task {task.id!r} lists files but the orchestrator has no input_root",
                field=f"tasks.{task.id}.files",
            )
        _check_fan_out(task, team.agent(task.assignee))


def _check_reviewers(task: Task, team: Team) -> None:
    names = {a.name for a in team.agents}
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


def _check_fan_out(task: Task, assignee: Agent) -> None:
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


def check_tools(team: Team, user_tools: Collection[str], *, has_store: bool) -> None:
    """Refuse, before a run starts, tools that cannot be resolved.

    Args:
        team: The agents whose ``tools`` are checked.
        user_tools: The names of the user tools there are (a mapping by name will do).
        has_store: Whether the run has a context store (the built-in store tools need one).

    Raises:
        ConfigError: An agent names a tool that is neither built in nor registered, lists a
            function named like a built-in tool (it would shadow it, and no caller's ceiling
            would bound it: `clearance._context.authority`), or uses a store tool (or has
            store grants) while the orchestrator has no store, or two different functions
            go by one name (a caller's ceiling is by name: a delegate could run its own
            function under the name of its caller's); likewise a function named
            ``mcp__...``, the names models call MCP tools by.
    """
    functions: dict[str, Callable[..., Any]] = {}
    for agent in team.agents:
        for entry in agent.tools:
            name = tool_name(entry)
            where = f"agents.{agent.name}.tools"
            builtin = (*BUILTIN_TOOL_NAMES, *WORKSPACE_TOOLS)
            if not isinstance(entry, str) and name in (*builtin, DELEGATE_TOOL, SPAWN_TOOL):
                raise ConfigError(
                    f"function {name!r} is named like a built-in tool: give it another name",
                    field=where,
                )
            if not isinstance(entry, str) and name.startswith(MCP_FUNCTION_PREFIX):
                raise ConfigError(
                    f"function {name!r} is named like an MCP tool: give it another name",
                    field=where,
                )
            if not isinstance(entry, str) and functions.setdefault(name, entry) != entry:
                raise ConfigError(
                    f"two different functions are named {name!r}: a model knows a tool by its "
                    "name only, so give each its own",
                    field=where,
                )
            if isinstance(entry, str) and name not in builtin and name not in user_tools:
                known = ", ".join([*builtin, *sorted(user_tools)])
                raise ConfigError(f"unknown tool {name!r} (tools: {known})", field=where)
            if name in BUILTIN_TOOL_NAMES and not has_store:
                raise ConfigError(
                    f"tool {name!r} needs a context store: give the team one (store: in a team "
                    "file, store=ContextStore(...) in code)",
                    field=where,
                )
