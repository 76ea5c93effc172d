"""Team files: YAML that declares agents, a coordinator, tasks and an input folder.

Validated with pydantic, so an error names the file, the field and the problem. A task may
carry ``for_each_file: GLOB``: it then stands for one task per matching file of the input
folder, with ``{path}``, ``{name}``, ``{stem}`` and ``{slug}`` filled in from the file.
A ``depends_on`` entry equal to such a task's ``id`` template depends on all of its copies;
in a ``for_each_file`` task it depends on the copy for the same file (when there is one).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from clearance._core.errors import ConfigError
from clearance._core.memory_spec import MAX_RECALL, AgentMemory, MemoryGroup, SharedConversation
from clearance._core.safe_yaml import load_yaml_file
from clearance._core.spec import (
    MAX_FAN_OUT,
    Agent,
    AgentLimits,
    FanOut,
    FileCaps,
    Sampling,
    Task,
    Team,
)

__all__ = ["LoadedTeam", "TeamFile", "load_team_file", "resolve_input"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsSpec(_Strict):
    """``limits:`` of an agent."""

    max_output_tokens: int = Field(default=512, ge=1)
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    timeout_s: float | None = Field(default=600.0, gt=0, lt=10**7)
    attempt_timeout_s: float | None = Field(default=None, gt=0, lt=10**7)
    max_dependency_tokens: int | None = Field(default=4000, ge=1)
    max_steps: int | None = Field(default=None, ge=1)
    max_tokens_per_step: int | None = Field(default=None, ge=1)
    max_model_calls: int | None = Field(default=64, ge=1)
    max_children: int = Field(default=8, ge=1)
    spawn_timeout_s: float = Field(default=300.0, gt=0, lt=10**7)
    max_output_files: int | None = Field(default=None, ge=1)
    max_output_size_bytes: int | None = Field(default=None, ge=0)
    answer_at_max_steps: bool = False
    retries: int = Field(default=2, ge=0)


class AgentMemorySpec(_Strict):
    """``memory:`` of an agent: recall before a task, record after (see `AgentMemory`)."""

    recall: int = Field(default=3, ge=0, le=MAX_RECALL)
    record: Literal["none", "result", "task_and_result"] = "result"
    record_to: str | None = Field(default=None, min_length=1)


class SamplingSpec(_Strict):
    """``sampling:`` of an agent: how its model decodes (see `Sampling`)."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    repeat_penalty: float | None = Field(default=None, ge=1, le=2)
    stop: list[str] = Field(default=[], max_length=8)


class ModelOptionsSpec(_Strict):
    """``model_options:`` of the team: settings of its models.

    ``context_window`` is the tokens the models can attend to: for ``openai:`` and
    ``anthropic:`` models (whose servers do not say) it bounds each prompt at the window minus
    the agent's ``max_output_tokens``; for the embedded ``llama-cpp:`` model it is the
    context it is loaded with (``n_ctx``, 128 to 131072). ``threads`` (generation),
    ``threads_batch`` (prompt evaluation, or prefill; 1 to 256 each) and ``batch_size``
    (prompt tokens per step, 1 to 8192) apply to ``llama-cpp:`` models only, and are refused
    when no agent uses one.
    """

    context_window: int | None = Field(default=None, ge=1, strict=True)
    threads: int | None = Field(default=None, ge=1, le=256, strict=True)
    threads_batch: int | None = Field(default=None, ge=1, le=256, strict=True)
    batch_size: int | None = Field(default=None, ge=1, le=8192, strict=True)


class AgentSpec(_Strict):
    """One entry of ``agents:`` (or the ``coordinator:``)."""

    name: str = Field(min_length=1)
    instructions: str = Field(min_length=1)
    role: str = ""
    model: str | None = None
    limits: LimitsSpec = LimitsSpec()
    tools: list[str] = []
    can_delegate_to: list[str] = []
    can_spawn: list[str] = []
    store_grants: dict[str, Literal["read", "write", "read_write"]] = {}
    memory: AgentMemorySpec | None = None
    store_read_extends_ttl_s: float | None = Field(default=None, gt=0, lt=10**10)
    sampling: SamplingSpec = SamplingSpec()

    def to_agent(self) -> Agent:
        """The `Agent` this entry declares."""
        return Agent(
            name=self.name,
            instructions=self.instructions,
            role=self.role,
            model=self.model,
            limits=AgentLimits(**self.limits.model_dump()),
            tools=tuple(self.tools),
            can_delegate_to=tuple(self.can_delegate_to),
            store_grants=dict(self.store_grants),
            can_spawn=tuple(self.can_spawn),
            memory=AgentMemory(**self.memory.model_dump()) if self.memory else None,
            store_read_extends_ttl_s=self.store_read_extends_ttl_s,
            sampling=Sampling(
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                repeat_penalty=self.sampling.repeat_penalty,
                stop=tuple(self.sampling.stop),
            ),
        )


class FanOutSpec(_Strict):
    """``fan_out:`` of a task: children spawned before its agent answers."""

    agent: str = Field(min_length=1)
    goals: list[str] = Field(min_length=1, max_length=MAX_FAN_OUT)


class TaskSpec(_Strict):
    """One entry of ``tasks:``."""

    id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    description: str = Field(min_length=1)
    assignee: str | None = Field(default=None, min_length=1)
    depends_on: list[str] = []
    memory_scope: Literal["dependencies", "transitive", "all"] = "dependencies"
    files: list[str] = []
    output_schema: dict[str, Any] | None = None
    for_each_file: str | None = None
    mode: Literal["standard", "isolated"] = "standard"
    constraints: list[str] = []
    fan_out: FanOutSpec | None = None
    run: str | None = None
    after_failure: Literal["skip", "proceed"] = "skip"
    approval: Literal["none", "required"] = "none"

    @model_validator(mode="after")
    def _assignee_or_run(self) -> TaskSpec:
        if self.assignee is None and self.run is None:
            raise ValueError("a task needs an assignee (an agent) or run (a step)")
        return self

    @field_validator("for_each_file")
    @classmethod
    def _relative_glob(cls, value: str | None) -> str | None:
        """A pattern relative to the input folder: not absolute, no ``..`` part, no NUL."""
        if value is None:
            return None
        normalized = value.replace("\\", "/")
        if not normalized.strip() or "\x00" in normalized:
            raise ValueError("must be a non-empty glob pattern relative to the input folder")
        drive = normalized[:1].isalpha() and normalized[1:2] == ":"
        if normalized.startswith("/") or drive:
            raise ValueError(f"{value!r} is absolute: give a pattern relative to the input folder")
        if ".." in normalized.split("/"):
            raise ValueError(f"{value!r} has a '..' part: it would match outside the input folder")
        return value


class MessageSpec(_Strict):
    """One entry of ``messages:``: a message sent before the run starts."""

    sender: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)
    content: str = Field(min_length=1)


class SharedConversationSpec(_Strict):
    """``shared_conversation:`` of a memory group (opt-in)."""

    window: int = Field(default=10, ge=1)
    retrieval: Literal["recency", "relevance"] = "recency"


class MemoryGroupSpec(_Strict):
    """One entry of ``memory_groups:``: agents that share one long-term memory."""

    name: str = Field(min_length=1)
    agents: list[str] = Field(min_length=2)
    shared_conversation: SharedConversationSpec | None = None

    def to_group(self) -> MemoryGroup:
        """The `MemoryGroup` this entry declares."""
        shared = self.shared_conversation
        return MemoryGroup(
            name=self.name,
            agents=tuple(self.agents),
            shared_conversation=SharedConversation(**shared.model_dump()) if shared else None,
        )


class InputSpec(_Strict):
    """``input:``: the folder that task files are read from."""

    default: str | None = None
    include: list[str] = ["*"]


class FileCapsSpec(_Strict):
    """``isolation.file_caps:``: size caps on the files of one isolated task."""

    max_file_bytes: int = Field(default=64 * 1024, ge=1, le=64 * 1024 * 1024)
    max_total_bytes: int = Field(default=256 * 1024, ge=1, le=256 * 1024 * 1024)
    on_oversize: Literal["error", "truncate"] = "error"


class IsolationSpec(_Strict):
    """``isolation:``: how isolated tasks are run."""

    max_rounds: int = Field(default=2, ge=0, le=10)
    file_caps: FileCapsSpec = FileCapsSpec()


class MemorySpec(_Strict):
    """``memory:`` of the team, in its long form (the short form is the URL alone)."""

    url: str | None = Field(default=None, min_length=1)
    on_error: Literal["fail", "continue"] = "fail"


class ToolEntrySpec(_Strict):
    """A ``tools:`` entry in its long form: ``{function: module:function, approval: ...}``."""

    function: str = Field(min_length=1)
    approval: Literal["none", "required"] = "none"


class TeamFile(_Strict):
    """The whole team file."""

    name: str = "team"
    goal: str | None = None
    model: str | None = None
    model_options: ModelOptionsSpec = ModelOptionsSpec()
    max_concurrency: int = Field(default=4, ge=1)
    store: str | None = None
    input: InputSpec = InputSpec()
    project: str | None = None
    workspace: str | None = None
    isolation: IsolationSpec = IsolationSpec()
    agents: list[AgentSpec] = Field(min_length=1)
    coordinator: AgentSpec | None = None
    tasks: list[TaskSpec] = []
    messages: list[MessageSpec] = []
    memory_groups: list[MemoryGroupSpec] = []
    memory: str | MemorySpec | None = None
    tools: dict[str, str | ToolEntrySpec] = {}

    @property
    def tool_functions(self) -> dict[str, str]:
        """``tools:`` as name to ``module:function`` (the long form's ``function``)."""
        return {n: e if isinstance(e, str) else e.function for n, e in self.tools.items()}

    @property
    def approval_tools(self) -> tuple[str, ...]:
        """Names of the ``tools:`` whose calls require approval."""
        return tuple(
            n for n, e in self.tools.items() if not isinstance(e, str) and e.approval == "required"
        )

    @property
    def memory_settings(self) -> MemorySpec:
        """``memory:`` in its long form (a bare URL becomes ``{url: URL}``)."""
        if isinstance(self.memory, str):
            return MemorySpec(url=self.memory)
        return self.memory or MemorySpec()

    synthesis_from: list[str] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadedTeam:
    """A team file turned into specs.

    Attributes:
        spec: The validated file.
        team: The agents and coordinator.
        tasks: The tasks, with ``for_each_file`` entries expanded (empty: plan from a goal).
        synthesis_from: Ids of the tasks whose results the synthesis sees (``for_each_file``
            templates expanded), or ``None`` for every task's.
        input_root: The folder task files are relative to, or ``None``.
        source: The file's path, for messages.
        project_root: The project folder of isolated tasks (``project:``, else the input
            folder), or ``None``.
    """

    spec: TeamFile
    team: Team
    tasks: tuple[Task, ...]
    input_root: Path | None
    source: str
    project_root: Path | None = None

    def file_caps(self) -> FileCaps:
        """The ``isolation.file_caps`` of the file, as `FileCaps`."""
        return FileCaps(**self.spec.isolation.file_caps.model_dump())

    synthesis_from: tuple[str, ...] | None = None


def resolve_input(value: str) -> Path:
    """Resolve an input folder: a path, or ``python:<package>`` for an installed package.

    ``python:json`` is the folder of the running interpreter's ``json`` package.

    Raises:
        ConfigError: The folder does not exist, or the package is unknown or not a package.
    """
    if value.startswith("python:"):
        name = value.removeprefix("python:")
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"{name!r} is not an installed Python package", field="input")
        return Path(next(iter(spec.submodule_search_locations)))
    path = Path(value).expanduser()
    if not path.is_dir():
        raise ConfigError(f"input folder {value!r} does not exist", field="input")
    return path


def _format_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
    return field, f"{err['msg']}{more}"


def load_team_file(path: str | Path, *, input_dir: str | Path | None = None) -> LoadedTeam:
    """Read, validate and expand a team file.

    Args:
        path: The YAML file.
        input_dir: Overrides ``input.default`` (a folder, or ``python:<package>``).

    Returns:
        The team, its tasks (``for_each_file`` expanded, sorted by path), and input root.

    Raises:
        ConfigError: The file is missing, is not a regular file, is over the size, depth or
            alias-expansion caps of `clearance._core.safe_yaml`, is not YAML, or fails
            validation; the message names the file, the field and the problem.
    """
    source = str(path)
    raw: Any = load_yaml_file(path)
    if not isinstance(raw, dict):
        raise ConfigError("the file must hold a mapping with at least 'agents'", source=source)
    try:
        spec = TeamFile.model_validate(raw)
    except ValidationError as exc:
        field, message = _format_error(exc)
        raise ConfigError(message, source=source, field=field) from exc

    try:
        team = Team(
            agents=tuple(a.to_agent() for a in spec.agents),
            coordinator=spec.coordinator.to_agent() if spec.coordinator else None,
            name=spec.name,
            memory_groups=tuple(g.to_group() for g in spec.memory_groups),
        )
        root_value = str(input_dir) if input_dir is not None else spec.input.default
        input_root = resolve_input(root_value) if root_value else None
        project_root = _project_root(spec.project) if spec.project else input_root
        tasks, groups = _expand_tasks(spec, input_root)
        synthesis_from = _expand_ids(spec.synthesis_from, groups, tasks)
        _check_messages(spec)
        _check_effective(spec, team, tasks)
    except ConfigError as exc:
        raise ConfigError(str(exc), source=source) from exc
    return LoadedTeam(
        spec=spec,
        team=team,
        tasks=tasks,
        input_root=input_root,
        source=source,
        project_root=project_root,
        synthesis_from=synthesis_from,
    )


def _expand_ids(
    ids: list[str] | None, groups: dict[str, list[str]], tasks: tuple[Task, ...]
) -> tuple[str, ...] | None:
    """``synthesis_from`` with ``for_each_file`` templates expanded; unknown ids refused."""
    if ids is None:
        return None
    known = {t.id for t in tasks}
    expanded: list[str] = []
    for entry in ids:
        members = groups.get(entry, [entry])
        unknown = [m for m in members if m not in known]
        if unknown:
            raise ConfigError(f"names unknown task {unknown[0]!r}", field="synthesis_from")
        expanded.extend(members)
    return tuple(dict.fromkeys(expanded))


def _project_root(value: str) -> Path:
    """The ``project:`` folder (a path, or ``python:<package>``).

    Raises:
        ConfigError: It does not exist or is not a folder.
    """
    try:
        return resolve_input(value)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("input folder", "project folder"),
                          field="project") from exc  # fmt: skip


_NEEDS = {
    "max_output_files": ("write_output", "writes no outputs: give it the write_output tool"),
    "max_output_size_bytes": ("write_output", "writes no outputs: give it the write_output tool"),
    "max_children": ("spawn", "spawns no children: give it can_spawn"),
    "spawn_timeout_s": ("spawn", "spawns no children: give it can_spawn"),
    "max_steps": ("tools", "runs no tool loop: give it tools, can_delegate_to or can_spawn"),
    "answer_at_max_steps": (
        "tools",
        "runs no tool loop: give it tools, can_delegate_to or can_spawn",
    ),
}


def _check_effective(spec: TeamFile, team: Team, tasks: tuple[Task, ...]) -> None:
    """Refuse keys that would have no effect: a setting nobody reads is a silent no-op.

    Raises:
        ConfigError: An agent limit its agent never uses (``max_output_files`` without
            ``write_output``, ``max_children`` without ``can_spawn``, ``max_steps`` without a
            tool loop), or ``project``, ``isolation`` or ``workspace`` in a team without
            isolated tasks or spawning.
    """
    specs = [*spec.agents, *((spec.coordinator,) if spec.coordinator else ())]
    for entry in specs:
        agent = entry.to_agent()
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
                    field=f"agents.{agent.name}.limits.{name}",
                )
    isolated = any(t.mode == "isolated" for t in tasks)
    spawns = any(a.can_spawn for a in team.agents)
    for key, used, why in (
        ("project", isolated, "no task has mode: isolated"),
        ("isolation", isolated, "no task has mode: isolated"),
        ("workspace", spawns, "no agent can spawn children (can_spawn)"),
    ):
        if key in spec.model_fields_set and not used:
            raise ConfigError(f"has no effect: {why}", field=key)


def _check_messages(spec: TeamFile) -> None:
    """Refuse a message to an agent the team does not have (it would reach nobody)."""
    names = {a.name for a in spec.agents}
    if spec.coordinator is not None:
        names.add(spec.coordinator.name)
    for i, message in enumerate(spec.messages):
        if message.to != "*" and message.to not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(
                f"message to unknown agent {message.to!r} would reach nobody (agents: {known})",
                field=f"messages.{i}.to",
            )


def _matching_files(root: Path, pattern: str, include: list[str], field: str) -> list[Path]:
    """The files under ``root`` matching ``pattern`` and one of ``include``, sorted.

    Raises:
        ConfigError: The pattern cannot be used, or a matching file's name is not valid
            UTF-8 (it could reach no prompt, ledger or database): the message names the
            file, its bytes escaped, and the field.
    """
    try:
        files = sorted(p for p in root.glob(pattern) if p.is_file())
    except (NotImplementedError, ValueError, OSError) as exc:
        raise ConfigError(f"cannot match {pattern!r}: {exc}", field=field) from exc
    matches = [p for p in files if any(p.match(inc) for inc in include)]
    for path in matches:
        rel = path.relative_to(root).as_posix()
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(rel).decode("utf-8", "backslashreplace")
            raise ConfigError(
                f"the file name '{shown}' under {str(root)!r} is not valid UTF-8: rename "
                "it or narrow the pattern",
                field=field,
            ) from None
    return matches


def _expand_tasks(
    spec: TeamFile, input_root: Path | None
) -> tuple[tuple[Task, ...], dict[str, list[str]]]:
    groups: dict[str, list[str]] = {}
    expanded: list[tuple[TaskSpec, dict[str, str]]] = []
    for i, task in enumerate(spec.tasks):
        if task.for_each_file is None:
            expanded.append((task, {}))
            continue
        if input_root is None:
            raise ConfigError(
                "for_each_file needs an input folder (input.default or --input)",
                field=f"tasks.{i}.for_each_file",
            )
        field = f"tasks.{i}.for_each_file"
        matches = _matching_files(input_root, task.for_each_file, spec.input.include, field)
        if not matches:
            raise ConfigError(
                f"no file under {str(input_root)!r} matches {task.for_each_file!r}",
                field=field,
            )
        ids = groups.setdefault(task.id, [])
        for file in matches:
            rel = file.relative_to(input_root).as_posix()
            values = {
                "path": rel,
                "name": file.name,
                "stem": file.stem,
                "slug": rel.rsplit(".", 1)[0].replace("/", "."),
            }
            ids.append(_fill(task.id, values))
            expanded.append((task, values))

    tasks = []
    for task, values in expanded:
        depends: list[str] = []
        for dep in task.depends_on:
            own = _fill(dep, values)
            if values and own in groups.get(dep, ()):
                depends.append(own)  # a per-file task depends on the same file's copy
            else:
                depends.extend(groups.get(dep, [own]))
        tasks.append(
            Task(
                id=_fill(task.id, values),
                title=_fill(task.title, values),
                description=_fill(task.description, values),
                assignee=task.assignee or "step",
                depends_on=tuple(depends),
                memory_scope=task.memory_scope,
                files=tuple(_fill(f, values) for f in task.files),
                output_schema=_fill_schema(task.output_schema, values),
                mode=task.mode,
                constraints=tuple(_fill(c, values) for c in task.constraints),
                fan_out=FanOut(
                    agent=task.fan_out.agent,
                    goals=tuple(_fill(g, values) for g in task.fan_out.goals),
                )
                if task.fan_out is not None
                else None,
                run=task.run,
                after_failure=task.after_failure,
                approval=task.approval,
            )
        )
    return tuple(tasks), groups


def _fill_schema(schema: Any, values: dict[str, str]) -> Any:
    """``output_schema`` with the placeholders of its strings filled.

    A per-file task's schema can so name its own file (``{"const": "{path}"}``).
    """
    if not values or schema is None:
        return schema
    if isinstance(schema, str):
        return _fill(schema, values)
    if isinstance(schema, list):
        return [_fill_schema(v, values) for v in schema]
    if isinstance(schema, dict):
        return {k: _fill_schema(v, values) for k, v in schema.items()}
    return schema


def _fill(text: str, values: dict[str, str]) -> str:
    """Replace ``{path}``, ``{name}``, ``{stem}``, ``{slug}``; other braces stay as they are."""
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text
