"""Declarative specs: what a task is, what an agent is, what a team is.

Specs are frozen, keyword-only dataclasses. They hold no run-time state; the state of a
run lives in the state layer (`TaskQueue`, `SharedMemory`, the ledger).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for

from clearance._core.errors import ConfigError
from clearance._core.memory_spec import AgentMemory, MemoryGroup

__all__ = [
    "DEFAULT_TOOL_STEPS",
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
]

DEFAULT_TOOL_STEPS = 8
"""Model calls a tool-using agent loop may make when ``AgentLimits.max_steps`` is ``None``."""

MemoryScope = Literal["dependencies", "transitive", "all"]
"""Which earlier results a task may see.

- ``"dependencies"`` (default): the results of its direct dependencies only.
- ``"transitive"``: the results of every ancestor in the graph.
- ``"all"``: opt-in full view of every completed result of the run.
"""

_SCOPES = frozenset(get_args(MemoryScope))

TaskMode = Literal["standard", "isolated"]
"""How a task's agent is run.

- ``"standard"`` (default): one prompt with the task, its files and admitted results.
- ``"isolated"``: a fresh subagent (the "fresh subagent per task" controller pattern): the
  task's full text, the project's architectural context, the contents of its files, its
  constraints and admitted results; it ends its answer with a ``STATUS:`` line and may ask
  for context (``NEEDS_CONTEXT``), which the orchestrator answers before dispatching a
  fresh subagent again.
"""

_MODES = frozenset(get_args(TaskMode))

AfterFailure = Literal["skip", "proceed"]
"""What a task does when one of its dependencies fails (or is skipped).

- ``"skip"`` (default): it is skipped, and so are its own dependents.
- ``"proceed"``: it runs once every dependency has finished, with the results of those
  that completed; the others are listed in its prompt as failed or skipped (their reason,
  never a partial result).
"""

_AFTER_FAILURE = frozenset(get_args(AfterFailure))
_RUN = re.compile(r"^(python:[A-Za-z_][\w.]*:[A-Za-z_]\w*|step:[a-z][a-z0-9_]*)$")
MAX_FAN_OUT = 32
"""Most goals one task's ``fan_out`` may list."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FanOut:
    """Children a task spawns before its own agent answers (a static fan-out).

    Each goal becomes one child of agent ``agent``, which sees only that goal; the results
    reach the task's prompt as ``child_result:<child id>`` items.

    Attributes:
        agent: The children's agent; the task's assignee must list it in ``can_spawn``.
        goals: One goal per child (1 to `MAX_FAN_OUT`).

    Raises:
        ConfigError: No goals, too many, or an empty goal.
    """

    agent: str
    goals: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "goals", tuple(self.goals))
        if not 1 <= len(self.goals) <= MAX_FAN_OUT:
            raise ConfigError(f"must list 1 to {MAX_FAN_OUT} goals", field="fan_out.goals")
        if any(not isinstance(g, str) or not g.strip() for g in self.goals):
            raise ConfigError("a goal is empty", field="fan_out.goals")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"agent": self.agent, "goals": list(self.goals)}


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def _check_name(kind: str, value: str) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigError(
            f"{kind} {value!r} is not valid: use 1-128 letters, digits, '_', '.', ':' "
            "or '-', starting with a letter or digit"
        )


def _check_utf8(field: str, *values: str) -> None:
    """Refuse text no later step could encode (lone surrogates, as in a non-UTF-8 file name)."""
    for value in values:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                f"{value!r} is not valid UTF-8 (it holds a lone surrogate)", field=field
            ) from None


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
        mode: ``"standard"`` or ``"isolated"`` (see `TaskMode`).
        constraints: Rules the result must follow; only for isolated tasks, where each is
            one ``constraint:<n>`` item of the prompt.
        fan_out: Children spawned before the assignee answers, or ``None``.
        run: A non-model task: ``"step:<name>"`` (a built-in analysis step, see
            `clearance.analysis.STEPS`) or ``"python:<module>:<function>"`` (a callable the
            team file's author provides), run instead of a model. Its output is the task's
            result, recorded and handed to dependents like any other. ``None`` for a model
            task. The assignee of such a task is only a label.
        after_failure: ``"skip"`` (default) or ``"proceed"`` (see `AfterFailure`).
        approval: ``"required"``: the task starts only once a person approved it (see
            ``clearance approve``); ``"none"`` (default): no approval.
        output_schema: JSON Schema the result must validate against (a structured hand-off),
            or ``None`` for a free-text result. The model is asked for JSON matching it; an
            invalid answer gets one repair attempt, then the task fails with
            `OutputValidationError`. Dependents receive the validated JSON, re-serialized
            canonically. The dialect is taken from ``$schema`` (draft 2020-12 when absent or
            unknown); ``format`` is an annotation, not checked. Stored as a deep copy and
            left out of the hash, so a task stays hashable.

    Raises:
        ConfigError: An invalid id, scope or title, text that is not valid UTF-8 (a lone
            surrogate), or an ``output_schema`` that is not a valid JSON Schema or not
            JSON-serializable (``field`` is ``tasks.<id>.output_schema``; the message gives
            the problem and where it is).
    """

    id: str
    title: str
    description: str
    assignee: str
    depends_on: tuple[str, ...] = ()
    memory_scope: MemoryScope = "dependencies"
    files: tuple[str, ...] = ()
    output_schema: dict[str, Any] | None = field(default=None, hash=False)
    mode: TaskMode = "standard"
    constraints: tuple[str, ...] = ()
    fan_out: FanOut | None = None
    run: str | None = None
    after_failure: AfterFailure = "skip"
    approval: Literal["none", "required"] = "none"

    def __post_init__(self) -> None:
        _check_name("task id", self.id)
        if self.run is not None and not _RUN.match(self.run):
            raise ConfigError(
                f"must be 'step:<name>' or 'python:<module>:<function>', got {self.run!r}",
                field=f"tasks.{self.id}.run",
            )
        if self.run is not None and (self.mode != "standard" or self.fan_out is not None):
            raise ConfigError(
                "a task with 'run' calls a function, not a model: drop mode and fan_out",
                field=f"tasks.{self.id}.run",
            )
        if self.approval not in ("none", "required"):
            raise ConfigError(
                f"must be 'none' or 'required', got {self.approval!r}",
                field=f"tasks.{self.id}.approval",
            )
        if self.after_failure not in _AFTER_FAILURE:
            raise ConfigError(
                f"must be one of {sorted(_AFTER_FAILURE)}, got {self.after_failure!r}",
                field=f"tasks.{self.id}.after_failure",
            )
        if self.mode not in _MODES:
            raise ConfigError(
                f"mode must be one of {sorted(_MODES)}, got {self.mode!r}",
                field=f"tasks.{self.id}.mode",
            )
        object.__setattr__(self, "constraints", tuple(self.constraints))
        if self.constraints and self.mode != "isolated":
            raise ConfigError(
                "constraints are given only to isolated tasks: add 'mode: isolated' or "
                "put the rule in the description",
                field=f"tasks.{self.id}.constraints",
            )
        if any(not isinstance(c, str) or not c.strip() for c in self.constraints):
            raise ConfigError("a constraint is empty", field=f"tasks.{self.id}.constraints")
        if self.mode == "isolated" and self.output_schema is not None:
            raise ConfigError(
                "an isolated task answers with a STATUS line, not a structured hand-off: "
                "drop output_schema or the isolated mode",
                field=f"tasks.{self.id}.output_schema",
            )
        if self.memory_scope not in _SCOPES:
            raise ConfigError(
                f"memory_scope must be one of {sorted(_SCOPES)}, got {self.memory_scope!r}",
                field=f"tasks.{self.id}.memory_scope",
            )
        if not self.title.strip():
            raise ConfigError("title is empty", field=f"tasks.{self.id}.title")
        for name in ("title", "description", "files", "constraints"):
            value = getattr(self, name)
            _check_utf8(f"tasks.{self.id}.{name}", *([value] if isinstance(value, str) else value))
        # Accept lists from callers but store tuples, so the spec stays hashable and frozen.
        object.__setattr__(self, "depends_on", tuple(dict.fromkeys(self.depends_on)))
        object.__setattr__(self, "files", tuple(self.files))
        if self.output_schema is not None:
            object.__setattr__(self, "output_schema", _checked_schema(self.id, self.output_schema))


def _checked_schema(task_id: str, schema: Any) -> dict[str, Any]:
    """A deep copy of ``schema`` once it is known to be a valid, JSON-ready JSON Schema."""
    where = f"tasks.{task_id}.output_schema"
    if not isinstance(schema, dict):
        raise ConfigError(
            f"must be a JSON Schema object (a mapping), got {type(schema).__name__}",
            field=where,
        )
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"not JSON-serializable: {exc}", field=where) from exc
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        raise ConfigError(
            f"not a valid JSON Schema: {exc.message} (at {exc.json_path})",
            field=where,
        ) from exc
    return copy.deepcopy(schema)


def schema_validator(schema: dict[str, Any]) -> Validator:
    """A validator for ``schema`` (a task's checked ``output_schema``), in its own dialect.

    The dialect is taken from ``$schema``; draft 2020-12 when absent or unknown.
    """
    return validator_for(schema, default=Draft202012Validator)(schema)


OversizePolicy = Literal["error", "truncate"]
"""What to do with a file over a cap: raise `LimitExceeded`, or cut it with a visible marker."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FileCaps:
    """Size caps on the files of one isolated context.

    Attributes:
        max_file_bytes: Most bytes of any one file.
        max_total_bytes: Most bytes of all files of one context together.
        on_oversize: ``"error"`` raises `LimitExceeded` (``max_file_bytes`` or
            ``max_total_bytes``); ``"truncate"`` keeps the first bytes that fit and appends
            `truncation_marker`, so the cut is visible to the model and in the manifest.
    """

    max_file_bytes: int = 64 * 1024
    max_total_bytes: int = 256 * 1024
    on_oversize: OversizePolicy = "error"

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1 or self.max_total_bytes < 1:
            raise ConfigError("file caps must be at least 1 byte", field="file_caps")
        if self.on_oversize not in ("error", "truncate"):
            raise ConfigError(
                f"on_oversize must be 'error' or 'truncate', got {self.on_oversize!r}",
                field="file_caps.on_oversize",
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class Sampling:
    """How an agent's model decodes; ``None`` leaves a setting to the provider's default.

    The embedded provider's defaults (``repeat_penalty`` 1.15 and stop sequences that end a
    turn) keep a small model from looping; see `clearance.models.LlamaCppModel`.

    Attributes:
        temperature: Sampling temperature, 0 to 2 (0: the most likely tokens). ``None``
            means 0.
        top_p: Nucleus sampling mass, in ``(0, 1]``.
        repeat_penalty: Penalty on tokens already generated, 1 to 2 (1: none). llama.cpp
            applies it as is; OpenAI-compatible servers receive it as ``repeat_penalty``
            (llama.cpp, vLLM) in the request body.
        stop: Up to 8 non-empty strings that end the answer when generated (not included).

    Raises:
        ConfigError: A value out of range, or a bad ``stop`` list.
    """

    temperature: float | None = None
    top_p: float | None = None
    repeat_penalty: float | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop))
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ConfigError("must be 0 to 2", field="sampling.temperature")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError("must be above 0 and at most 1", field="sampling.top_p")
        if self.repeat_penalty is not None and not 1 <= self.repeat_penalty <= 2:
            raise ConfigError("must be 1 to 2", field="sampling.repeat_penalty")
        if len(self.stop) > 8 or any(
            not isinstance(s, str) or not s or len(s) > 64 for s in self.stop
        ):
            raise ConfigError(
                "must be at most 8 non-empty strings of at most 64 characters",
                field="sampling.stop",
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentLimits:
    """Hard limits on one agent's work.

    Attributes:
        max_output_tokens: Most tokens the model may generate per call.
        max_prompt_tokens: Most tokens a prompt may hold; ``None`` means the model's context
            window minus ``max_output_tokens``. A larger prompt fails the task with
            `LimitExceeded`; nothing is truncated silently.
        timeout_s: Deadline, in wall-clock seconds, of one model call: every attempt, and
            the backoff between attempts, included. When it passes the call fails with
            `LimitExceeded` naming ``timeout_s`` and is not retried. ``None`` means no
            deadline (not recommended: a server that trickles bytes then holds the task).
        attempt_timeout_s: Most seconds one attempt may take before it is abandoned and
            retried (a transient failure), within ``timeout_s``; ``None`` lets an attempt
            use whatever is left of the deadline.
        retries: Most retries of a model call after a transient failure (connection error,
            timeout, HTTP 429 or 5xx), with exponential backoff and jitter between attempts;
            0 disables retrying. Client errors (other 4xx) are never retried.
        max_dependency_tokens: Most tokens the result of any one task admitted into this
            agent's task prompts may hold, counted on the result text with the agent's model;
            ``None`` means no limit. A larger result fails the dependent task with
            `DependencyPayloadError`; nothing is truncated silently.
        max_steps: Most model calls of one tool-using agent loop (a task, or one delegation)
            and most steps an ``AgentSession`` may record (model calls, tool calls, spawns);
            reaching it raises `LimitExceeded` naming ``max_steps``. ``None`` means
            `DEFAULT_TOOL_STEPS` (8) for the tool loop and no limit for a session.
        max_tokens_per_step: Most tokens one model call of this agent may generate: the
            ``max_tokens`` sent is at most this, and a provider reporting more completion
            tokens fails the call with `LimitExceeded`. ``None`` means ``max_output_tokens``,
            unchecked.
        max_model_calls: Most model calls one task of this agent may cause in all: its
            tool loop, its delegates, its clarification rounds and its spawned children
            together (retries of one call are not counted again). Bounds delegation and
            spawn fan-out; reaching it fails the task with `LimitExceeded` naming
            ``max_model_calls``. ``None`` for no cap.
        max_output_files: Most files an agent may write to its workspace's ``outputs/``
            (a spawned child's, in runs).
        max_output_size_bytes: Most bytes all files in an agent's ``outputs/`` may hold.
        max_children: Most children one task of this agent may spawn (its ``fan_out`` and
            ``spawn`` tool calls together); more is `LimitExceeded` naming ``max_children``.
        spawn_timeout_s: Most seconds a parent waits for the children of one fan-out; a
            child still running then is cancelled and reported as timed out.
        answer_at_max_steps: Opt-in: make the last of the ``max_steps`` model calls without
            tools, so the agent must answer with what it has instead of failing with
            `LimitExceeded` (useful with small models that keep calling tools).
    """

    max_output_tokens: int = 512
    max_prompt_tokens: int | None = None
    timeout_s: float | None = 600.0
    attempt_timeout_s: float | None = None
    max_dependency_tokens: int | None = 4000
    max_steps: int | None = None
    max_tokens_per_step: int | None = None
    max_model_calls: int | None = 64
    max_output_files: int | None = None
    max_output_size_bytes: int | None = None
    answer_at_max_steps: bool = False
    retries: int = 2
    max_children: int = 8
    spawn_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        for name in (
            "max_steps",
            "max_tokens_per_step",
            "max_output_files",
            "max_model_calls",
            "max_children",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError("must be at least 1", field=f"limits.{name}")
        if self.max_output_size_bytes is not None and self.max_output_size_bytes < 0:
            raise ConfigError("must not be negative", field="limits.max_output_size_bytes")
        if self.max_output_tokens < 1:
            raise ConfigError("must be at least 1", field="limits.max_output_tokens")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ConfigError("must be at least 1", field="limits.max_prompt_tokens")
        for name in ("timeout_s", "attempt_timeout_s", "spawn_timeout_s"):
            value = getattr(self, name)
            if value is not None and not 0 < value < 10**7:
                raise ConfigError("must be a positive number of seconds", field=f"limits.{name}")
        if self.max_dependency_tokens is not None and self.max_dependency_tokens < 1:
            raise ConfigError("must be at least 1", field="limits.max_dependency_tokens")
        if self.retries < 0:
            raise ConfigError("must be 0 or more", field="limits.retries")


@dataclass(frozen=True, kw_only=True, slots=True)
class Agent:
    """Declarative spec of an agent: a pure function from its prompt to a result text.

    Attributes:
        name: Unique name within the team; tasks name it as their assignee.
        instructions: The system prompt.
        role: One-line summary shown to the coordinator when it plans. Only a declared role
            is shown: an agent without one is listed by name only (its instructions, first
            line included, never reach the coordinator).
        model: Model id (``"provider:name"``), or ``None`` for the orchestrator's default.
        limits: Hard limits on the agent's model calls.
        tools: Tools the agent may call (opt-in; none by default): names of built-in tools
            (``store_get``, ``store_set``, ``store_query``), names of tools registered with
            the orchestrator, or plain typed Python functions.
        can_delegate_to: Agents this one may delegate to with the ``delegate`` tool (which
            it gets when this is not empty).
        can_spawn: Agents this one may spawn as children, with the ``spawn`` tool (which it
            gets when this is not empty) or a task's ``fan_out``. A child sees only its goal.
        store_grants: Store namespace (or ``prefix*``) to ``"read"``, ``"write"`` or
            ``"read_write"``; every other namespace is denied. Stored as a copy and left
            out of the hash.
        memory: Long-term memory in runs (recall before a task, record after), or ``None``
            (default) for none. Private to the agent unless ``memory.record_to`` names one
            of its memory groups.
        store_read_extends_ttl_s: When set, every store entry this agent reads through its
            tools has its expiry pushed to at least this many seconds from now (never
            earlier, and never added to an entry that does not expire): knowledge that is
            used survives. ``None`` (default): reads leave expiry alone.
        sampling: How its model decodes (temperature, top_p, repeat_penalty, stop).
    """

    name: str
    instructions: str
    role: str = ""
    model: str | None = None
    limits: AgentLimits = field(default_factory=AgentLimits)
    tools: tuple[str | Callable[..., Any], ...] = ()
    can_delegate_to: tuple[str, ...] = ()
    store_grants: Mapping[str, str] = field(default_factory=dict, hash=False)
    can_spawn: tuple[str, ...] = ()
    memory: AgentMemory | None = None
    store_read_extends_ttl_s: float | None = None
    sampling: Sampling = field(default_factory=Sampling)

    def __post_init__(self) -> None:
        _check_name("agent name", self.name)
        ext = self.store_read_extends_ttl_s
        if ext is not None and not 0 < ext < 10**10:
            raise ConfigError(
                "must be a positive number of seconds",
                field=f"agents.{self.name}.store_read_extends_ttl_s",
            )
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "can_delegate_to", tuple(dict.fromkeys(self.can_delegate_to)))
        object.__setattr__(self, "can_spawn", tuple(dict.fromkeys(self.can_spawn)))
        object.__setattr__(self, "store_grants", dict(self.store_grants))
        if self.name in self.can_delegate_to:
            raise ConfigError("an agent may not delegate to itself", field="can_delegate_to")
        for pattern, access in self.store_grants.items():
            if access not in ("read", "write", "read_write") or not pattern:
                raise ConfigError(
                    f"must be 'read', 'write' or 'read_write', got {access!r}",
                    field=f"agents.{self.name}.store_grants.{pattern}",
                )

    @property
    def uses_tools(self) -> bool:
        """Whether the agent runs the tool loop (it has tools, delegation or spawn targets)."""
        return bool(self.tools or self.can_delegate_to or self.can_spawn)

    @property
    def summary(self) -> str:
        """The declared role (at most 200 characters) for the coordinator's roster, or ``""``."""
        text = self.role
        return text if len(text) <= 200 else text[:197] + "..."


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
        ConfigError: On duplicate agent names, or a memory group naming an unknown agent or
            declared twice.
    """

    agents: tuple[Agent, ...]
    coordinator: Agent | None = None
    name: str = "team"
    memory_groups: tuple[MemoryGroup, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", tuple(self.agents))
        seen: set[str] = set()
        for agent in self.agents:
            if agent.name in seen:
                raise ConfigError(f"duplicate agent name {agent.name!r}", field="agents")
            seen.add(agent.name)
        for agent in (*self.agents, *((self.coordinator,) if self.coordinator else ())):
            unknown = sorted(set(agent.can_spawn) - seen)
            if unknown:
                raise ConfigError(
                    f"can_spawn names unknown agents {unknown}",
                    field=f"agents.{agent.name}.can_spawn",
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
