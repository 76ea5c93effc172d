"""Task specs: what a task is (`Task`), its fan-out (`FanOut`), and its output schema."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from clearance._core.errors import ConfigError
from clearance._core.json_answer import deeper_than
from clearance._core.names import check_name, check_text, check_utf8, text_tuple
from clearance._core.review import Review
from clearance._core.routing import EdgeCondition
from clearance._core.schema_check import schema_problem, schema_validator

if TYPE_CHECKING:  # jsonschema is imported when a schema is first checked
    from pydantic import BaseModel

__all__ = [
    "MAX_FAN_OUT",
    "MAX_GOAL_CHARS",
    "AfterFailure",
    "FanOut",
    "MemoryScope",
    "Task",
    "TaskMode",
    "goal_too_long",
    "schema_validator",
]

MemoryScope = Literal["dependencies", "transitive", "all"]
"""Which earlier results a task may see.

- ``"dependencies"`` (default): the results of its direct dependencies only.
- ``"transitive"``: the results of every ancestor in the graph.
- ``"all"``: opt-in full view of every completed result of the run.
"""

_SCOPES = frozenset(get_args(MemoryScope))
MAX_SCHEMA_DEPTH = 128
"""Most levels of nesting (objects and lists) an ``output_schema`` may have."""

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
_STR = frozenset({str})
"""The one type of a task's ids, paths and constraints kept as given (`text_tuple`)."""
_RUN = re.compile(r"^(python:[A-Za-z_][\w.]*:[A-Za-z_]\w*|step:[a-z][a-z0-9_]*)$")
MAX_FAN_OUT = 32
"""Most goals one task's ``fan_out`` may list."""

MAX_GOAL_CHARS = 4_000
"""Most characters of a spawned child's goal (a ``fan_out`` goal, or a ``spawn`` call's).

A goal is all a child is given, so it has room for a full brief (about 1,000 tokens); it also
heads the child's result in its parent's prompt, on one line (``Result of p.1 (by helper):
<goal>``), once per child, so a parent with its 8 children by default reads at most about
8,000 tokens of headings, however its goals were written.
"""


def goal_too_long(goal: str, what: str) -> str:
    """Why ``goal`` (named ``what``) is refused: it is over `MAX_GOAL_CHARS`."""
    return (
        f"{what} has {len(goal):,} characters: a child's goal may have at most "
        f"{MAX_GOAL_CHARS:,} (it heads the child's result in its parent's prompt)"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class FanOut:
    """Children a task spawns before its own agent answers (a static fan-out).

    Each goal becomes one child of agent ``agent``, which sees only that goal; the results
    reach the task's prompt as ``child_result:<child id>`` items.

    Attributes:
        agent: The children's agent; the task's assignee must list it in ``can_spawn``.
        goals: One goal per child (1 to `MAX_FAN_OUT`; a new run refuses one over
            `MAX_GOAL_CHARS`, a recorded run keeps its own).

    Raises:
        ConfigError: No goals, too many, or an empty goal.
    """

    agent: str
    goals: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "goals", text_tuple("fan_out.goals", self.goals))
        if not 1 <= len(self.goals) <= MAX_FAN_OUT:
            raise ConfigError(f"must list 1 to {MAX_FAN_OUT} goals", field="fan_out.goals")
        if any(not isinstance(g, str) or not g.strip() for g in self.goals):
            raise ConfigError("a goal is empty", field="fan_out.goals")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"agent": self.agent, "goals": list(self.goals)}


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
        review: A bounded review loop (`Review`): reviewers accept the result, or send
            it back to a fresh implementer round with their findings; ``None`` for none.
        when: Conditions on dependency edges (`EdgeCondition`, at most one per
            dependency): the task runs only if each holds for its dependency's result;
            otherwise it is ``skipped`` with the reason (conditional routing).
        output_schema: JSON Schema the result must validate against (a structured hand-off),
            or ``None`` for a free-text result. The model is asked for JSON matching it; an
            invalid answer gets one repair attempt, then the task fails with
            `OutputValidationError`. Dependents receive the validated JSON, re-serialized
            canonically. The dialect is taken from ``$schema`` (draft 2020-12 when absent or
            unknown); ``format`` is an annotation, not checked. Stored as a deep copy and
            left out of the hash, so a task stays hashable.
        output_type: A pydantic model class the result must validate as (a typed result):
            its JSON Schema becomes ``output_schema``, the answer is validated by the schema
            and then by the model (its validators too; a failure gets the same one repair),
            and `TaskOutcome.output` holds the parsed instance. Dependents still receive the
            recorded JSON text. Give ``output_type`` or ``output_schema``, not both.

    Raises:
        ConfigError: An invalid id, scope or title, text that is not valid UTF-8 (a lone
            surrogate), or an ``output_schema`` that is not a valid JSON Schema or not
            JSON-serializable (``field`` is ``tasks.<id>.output_schema``; the message gives
            the problem and where it is), or both ``output_type`` and ``output_schema``, or an
            ``output_type`` that is not a pydantic model class.
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
    when: tuple[EdgeCondition, ...] = ()
    review: Review | None = field(default=None, hash=False)
    output_type: type[BaseModel] | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        # Each check's field name (``tasks.<id>.<name>``) is only made when the check fails:
        # a run builds every task of its graph, and the names cost more than the checks.
        check_name("task id", self.id)
        for name in ("title", "description", "assignee"):
            if not isinstance(getattr(self, name), str):
                check_text(f"tasks.{self.id}.{name}", getattr(self, name))
        if self.run is not None:
            check_text(f"tasks.{self.id}.run", self.run)
        for name in ("depends_on", "files", "constraints"):
            value = getattr(self, name)
            # A tuple of exact strings is kept as it is (`text_tuple`); checked in C.
            if type(value) is not tuple or not _STR.issuperset(map(type, value)):
                object.__setattr__(self, name, text_tuple(f"tasks.{self.id}.{name}", value))
        self._schema_from_output_type()
        # Lists from callers are stored as tuples (a tuple given is kept as it is).
        if type(self.when) is not tuple:
            object.__setattr__(self, "when", tuple(self.when))
        if self.review is not None and (self.run is not None or self.mode != "standard"):
            raise ConfigError(
                "a review loop reviews a model's answer: not for a 'run' step or an isolated task",
                field=f"tasks.{self.id}.review",
            )
        conditioned = [c.task for c in self.when]
        if conditioned and (
            any(t not in self.depends_on for t in conditioned)
            or len(set(conditioned)) < len(conditioned)
        ):
            raise ConfigError(
                "a condition must be on a dependency, at most one per dependency",
                field=f"tasks.{self.id}.depends_on",
            )
        if self.run is not None and not _RUN.fullmatch(self.run):
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
        # ASCII text is valid UTF-8: only other text is encoded to be checked.
        for name in ("title", "description"):
            if not getattr(self, name).isascii():
                check_utf8(f"tasks.{self.id}.{name}", getattr(self, name))
        for name in ("files", "constraints"):
            value = getattr(self, name)
            if not all(map(str.isascii, value)):
                check_utf8(f"tasks.{self.id}.{name}", *value)
        # Accept lists from callers but store tuples, so the spec stays hashable and frozen;
        # dependencies once each.
        if len(set(self.depends_on)) < len(self.depends_on):
            object.__setattr__(self, "depends_on", tuple(dict.fromkeys(self.depends_on)))
        if self.output_schema is not None:
            object.__setattr__(self, "output_schema", _checked_schema(self.id, self.output_schema))

    def _schema_from_output_type(self) -> None:
        if self.output_type is None:
            return
        from pydantic import BaseModel  # with the first typed task, not on import

        where = f"tasks.{self.id}.output_type"
        if not (isinstance(self.output_type, type) and issubclass(self.output_type, BaseModel)):
            raise ConfigError(
                f"must be a pydantic model class, got {self.output_type!r}", field=where
            )
        if self.output_schema is not None:
            raise ConfigError("give output_type or output_schema, not both", field=where)
        object.__setattr__(self, "output_schema", self.output_type.model_json_schema())


def _checked_schema(task_id: str, schema: Any) -> dict[str, Any]:
    """A deep copy of ``schema`` once it is known to be a valid, JSON-ready JSON Schema."""
    where = f"tasks.{task_id}.output_schema"
    if not isinstance(schema, dict):
        raise ConfigError(
            f"must be a JSON Schema object (a mapping), got {type(schema).__name__}",
            field=where,
        )
    if deeper_than(schema, MAX_SCHEMA_DEPTH):
        raise ConfigError(
            f"nests objects and lists over {MAX_SCHEMA_DEPTH} levels deep", field=where
        )
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"not JSON-serializable: {exc}", field=where) from exc
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import Draft202012Validator, validator_for

    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        raise ConfigError(
            f"not a valid JSON Schema: {exc.message} (at {exc.json_path})",
            field=where,
        ) from exc
    except RecursionError as exc:
        raise ConfigError("nested too deeply to check", field=where) from exc
    if (problem := schema_problem(schema)) is not None:
        raise ConfigError(problem, field=where)
    return copy.deepcopy(schema)
