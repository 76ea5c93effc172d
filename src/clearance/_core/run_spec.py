"""`RunSpec`: the one definition of a run, its team file form and its recorded form.

A run is defined once: the team (agents with their limits, sampling, tools, grants and
memory), the tasks and goal, the run settings (concurrency, synthesis, isolation, workspace,
approvals), the models and their settings, the executor, the MCP servers, the store and
memory, and the input folder. A team file is the YAML form of a `RunSpec`; the ledger records
its JSON form (`to_record`) when a run starts, and ``resume`` reads it back (`from_record`).
Command-line options are ``spec.model_copy(update=...)``.

A new setting of a run is one field here (or in one of the parts in
`clearance._core.teamfile_models`): the team file, the record and resume then carry it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from clearance._core.agent_spec import FileCaps
from clearance._core.budget import ModelPrice, RunBudget
from clearance._core.errors import ConfigError
from clearance._core.masking import MASK, mask_url
from clearance._core.mcp_spec import McpServerSpec
from clearance._core.safe_yaml import gc_paused, load_yaml_file
from clearance._core.spec import Team
from clearance._core.teamfile_models import (
    AgentSpec,
    BudgetSpec,
    InputSpec,
    IsolationSpec,
    MemoryGroupSpec,
    MemorySpec,
    MessageSpec,
    ModelId,
    ModelOptionsSpec,
    PlanRefSpec,
    PriceSpec,
    TaskSpec,
    ToolEntrySpec,
    check_model_id,
)
from clearance._core.vocabulary import ExecutorKind

__all__ = [
    "ANSWER_TIMEOUT_S",
    "MASK",
    "MAX_ANSWER_TIMEOUT_S",
    "MAX_CONCURRENCY",
    "PROMPT_FORMAT",
    "RECORD_KEYS",
    "ExecutorSpec",
    "RunSpec",
    "validation_error",
]

MAX_CONCURRENCY = 100_000
"""Most tasks a run may set to run at once (``max_concurrency``)."""

ANSWER_TIMEOUT_S = 3600.0
"""How long a person (an approver, or the person answering subagents' questions) may take
on one request by default, in seconds (``--answer-timeout``)."""
MAX_ANSWER_TIMEOUT_S = 86_400.0
"""The longest such deadline accepted (a day)."""

RECORD_KEYS = ("process", "synthesis_ids", "tool_ceilings", "prompt_format")
"""Keys a run's recorded config holds beside its spec: the process that runs it (written by
the ledger), the ids of the tasks the synthesis shows (``synthesis_from`` expanded),
``tool_ceilings: true`` for a run whose delegates and children were given only the tools
their callers may call (every run since 2026-11-27; ``verify`` checks it for those), and
the `PROMPT_FORMAT` the run's prompts were built in."""

PROMPT_FORMAT = 5
"""The version of the prompts' format a run records when it starts (``prompt_format``): 1
labels each summary of a hierarchical synthesis with the tasks it covers; 2 leaves a failed
or skipped task that ``synthesis_from`` leaves out out of the synthesis too (its reason may
quote its rejected answer); 3 numbers each task's children from 1 in each session (``a.1``,
``b.1``), where earlier runs numbered all the tasks' children of a session together; 4
labels each child's result with its agent and goal (``Result of a.1 (by helper): <goal>``),
where earlier runs labelled it with its id alone (a resume keeps the run's labels); 5 keeps
a structured result's numbers as the answer wrote them (``3.14159265358979323846``), where
earlier runs read them as floats (``3.141592653589793``), and holds a delegate's spawns to
the fewest ``max_children`` of every agent it acts for (``verify`` checks that for it). A run
recorded without one (before 2026-11-27) may show the plain ``Summary <n>`` label, and one
recorded before format 2 such a task's reason; ``verify`` accepts each only there, and checks
each run's children by the numbering of its format (a resume keeps it)."""

_FROM_ENV = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


class ExecutorSpec(BaseModel):
    """``executor:``: where model calls are answered.

    Attributes:
        kind: ``"local"`` (this process) or ``"ray"`` (Ray worker actors; prompts are still
            built in this process, see ``docs/ray.md``).
        address: Ray cluster (``"auto"``, ``"host:6379"``, ``"ray://host:10001"``); ``None``
            starts a local cluster on 127.0.0.1.
        workers: Ray worker actors (1 to 256; ``None``: 2).
        env: Names of environment variables set in the workers to their value here (an API
            key, a base URL); their values cross the network and are never recorded.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ExecutorKind = ExecutorKind.LOCAL
    address: str | None = Field(default=None, min_length=1)
    workers: int | None = Field(default=None, ge=1, le=256, strict=True)
    env: list[str] = Field(default=[], max_length=64)

    @model_validator(mode="after")
    def _ray_only(self) -> ExecutorSpec:
        if self.kind == ExecutorKind.LOCAL:
            for key in ("address", "workers", "env"):
                if key in self.model_fields_set and getattr(self, key):
                    raise ValueError(f"{key} needs kind: ray")
        return self


class RunSpec(BaseModel):
    """Everything that defines a run; a team file is its YAML form.

    Attributes:
        name: The team's name (shown in the ledger).
        goal: What the synthesis answers (and, without tasks, what the coordinator plans).
        model: Model id of agents that name none (``None``: the embedded default).
        model_options: Settings of the models (context window, threads, per model id).
        max_concurrency: Most tasks running at once.
        store: Context store URL, or ``None`` for none; read and written only by agents'
            store tools (``store_get``...), so a team without one is refused.
        input: The folder task files are read from.
        project: The project folder of isolated tasks (``None``: the input folder).
        workspace: Folder under which runs that spawn children get their folders.
        isolation: Clarification rounds and file caps of isolated tasks.
        agents: The workers.
        coordinator: The agent that plans and synthesizes (``None``: a built-in one named
            ``coordinator``, a name no worker may then take); its ``role`` is refused, and
            so are its ``store_read_extends_ttl_s`` and ``limits.max_dependency_tokens``
            where none of its calls reads them.
        memory_groups: Agents that share a long-term memory; a group none of whose agents has
            ``memory:`` is refused unless it declares a ``shared_conversation``.
        tasks: The tasks (empty: the coordinator plans ``goal``).
        messages: Messages sent before the run starts.
        memory: The long-term memory's URL (or ``{url, on_error}``).
        tools: User tools by name: an import path (``module:function``; the module is found
            among the installed ones, then in the folder ``clearance`` runs from), or
            ``{function, approval}``.
        mcp_servers: MCP tool servers by name.
        report: The report ``clearance run`` writes (``step:code_review_report``); ``None``:
            the generic run report (synthesis and each task's result).
        synthesis_from: Ids of the tasks whose results the synthesis shows (``None``: all).
        executor: Where model calls are answered.
        budget: Most tokens and US dollars the run may spend (``None``: no cap).
        prices: What each model's tokens cost (US dollars per million), for ``budget.cost_usd``.
        plan: The run that planned ``tasks`` (a team file written by ``clearance plan``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "team"
    goal: str | None = None
    model: ModelId | None = None
    model_options: ModelOptionsSpec = ModelOptionsSpec()
    max_concurrency: int = Field(default=4, ge=1, le=MAX_CONCURRENCY, strict=True)
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
    mcp_servers: dict[str, McpServerSpec] = Field(default={}, max_length=64)
    report: str | None = Field(default=None, pattern=r"^step:[a-z_][a-z0-9_]*$")
    synthesis_from: list[str] | None = None
    executor: ExecutorSpec = ExecutorSpec()
    budget: BudgetSpec | None = None
    prices: dict[str, PriceSpec] = {}
    plan: PlanRefSpec | None = None

    @model_validator(mode="after")
    def _plan_needs_tasks(self) -> RunSpec:
        if self.plan is not None and not self.tasks:
            raise ValueError("plan: names the run that planned the tasks: give its tasks")
        return self

    @field_validator("prices")
    @classmethod
    def _prices_name_models(cls, value: dict[str, PriceSpec]) -> dict[str, PriceSpec]:
        for model_id in value:
            check_model_id(model_id)  # a key that is no model id prices no model: no effect
        return value

    @model_validator(mode="after")
    def _prices_need_a_cost_budget(self) -> RunSpec:
        if self.prices and (self.budget is None or self.budget.cost_usd is None):
            raise ValueError("prices: has no effect without budget: {cost_usd: ...}")
        return self

    def run_budget(self) -> RunBudget | None:
        """``budget:`` with ``prices:`` as a `RunBudget`; ``None`` without a budget."""
        if self.budget is None:
            return None
        prices = {m: ModelPrice(**p.model_dump()) for m, p in self.prices.items()}
        return RunBudget(tokens=self.budget.tokens, cost_usd=self.budget.cost_usd, prices=prices)

    @property
    def tool_functions(self) -> dict[str, str | None]:
        """``tools:`` as name to ``module:function`` (``None``: a tool given in code)."""
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

    def team(self) -> Team:
        """The `Team` this spec declares.

        Raises:
            ConfigError: Duplicate agent names, an unknown ``can_spawn`` target, or a bad
                memory group (see `Team`).
        """
        seen: set[str] = set()
        for entry in self.agents:  # as `Team` refuses it, before each entry becomes an Agent
            if entry.name in seen:
                raise ConfigError(f"duplicate agent name {entry.name!r}", field="agents")
            seen.add(entry.name)
        return Team(
            agents=tuple(a.to_agent() for a in self.agents),
            coordinator=self.coordinator.to_agent() if self.coordinator else None,
            name=self.name,
            memory_groups=tuple(g.to_group() for g in self.memory_groups),
        )

    def file_caps(self) -> FileCaps:
        """``isolation.file_caps`` as `FileCaps`."""
        return FileCaps(**self.isolation.file_caps.model_dump())

    def with_model(self, model: str) -> RunSpec:
        """This spec with ``model`` for every agent, the coordinator's included."""
        agents = [a.model_copy(update={"model": None}) for a in self.agents]
        lead = self.coordinator
        coordinator = lead.model_copy(update={"model": None}) if lead else None
        return self.model_copy(
            update={"model": model, "agents": agents, "coordinator": coordinator}
        )

    def with_budget(self, *, tokens: int | None = None, cost_usd: float | None = None) -> RunSpec:
        """This spec with the budget's caps given replaced (``None`` keeps a cap as it is).

        Raises:
            ConfigError: ``cost_usd`` for a spec without ``prices:`` (its cost cannot be
                counted), or a cap out of range (``tokens`` < 1, ``cost_usd`` <= 0).
        """
        if tokens is None and cost_usd is None:
            return self
        if cost_usd is not None and not self.prices:
            raise ConfigError("the run has no prices to count a cost in", field="budget.cost_usd")
        caps = self.budget.model_dump() if self.budget is not None else {}
        caps.update(
            {k: v for k, v in (("tokens", tokens), ("cost_usd", cost_usd)) if v is not None}
        )
        try:
            budget = BudgetSpec.model_validate(caps)
        except ValidationError as exc:
            field, message = validation_error(exc)
            raise ConfigError(message, field=f"budget.{field}") from exc
        return self.model_copy(update={"budget": budget})

    # -- the team file ---------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | Path) -> RunSpec:
        """Read and validate a team file (bounded YAML, see `clearance._core.safe_yaml`).

        Checks across keys and the expansion of ``for_each_file`` tasks happen when the spec
        is prepared for a run (`clearance.prepare_run`).

        Raises:
            ConfigError: The file is missing, is not a regular file, is over the size, depth
                or alias caps, is not YAML, or fails validation; the message names the file,
                the field and the problem.
        """
        source = str(path)
        raw: Any = load_yaml_file(path)
        if not isinstance(raw, dict):
            raise ConfigError("the file must hold a mapping with at least 'agents'", source=source)
        try:
            with gc_paused():  # as the file was loaded: 20,000 entries make no garbage
                spec = cls.model_validate(raw)
        except ValidationError as exc:
            field, message = validation_error(exc)
            raise ConfigError(message, source=source, field=field) from exc
        return spec

    def to_data(self) -> dict[str, Any]:
        """The spec as JSON-ready data, keys left at their defaults omitted (a team file)."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)

    # -- the recorded run --------------------------------------------------------------------

    def to_record(self, *, synthesis_ids: list[str] | None = None) -> dict[str, Any]:
        """The config a run records when it starts: the spec, secrets masked.

        Passwords and secret query values (``?password=``, ``?sslpassword=``...) in the
        store and memory URLs (`clearance._core.masking.mask_url`), literal ``env:`` and
        ``headers:`` values of MCP servers (not ``${NAME}`` references) and the query of an
        MCP server's URL (it may hold a token) are recorded as ``***``: resuming such a run
        needs them given again.

        Args:
            synthesis_ids: The task ids the synthesis shows, ``synthesis_from`` expanded
                (``None``: all).
        """
        data = self.to_data()
        if isinstance(data.get("store"), str):
            data["store"] = mask_url(data["store"])
        memory = data.get("memory")
        if isinstance(memory, str):
            data["memory"] = mask_url(memory)
        elif isinstance(memory, dict) and isinstance(memory.get("url"), str):
            memory["url"] = mask_url(memory["url"])
        for server in data.get("mcp_servers", {}).values():
            for key in ("env", "headers"):
                if key in server:
                    server[key] = {k: _masked(v) for k, v in server[key].items()}
            if isinstance(server.get("url"), str):
                server["url"] = mask_url(server["url"], whole_query=True)
        data["synthesis_ids"] = synthesis_ids
        return data

    @classmethod
    def from_record(cls, config: dict[str, Any], *, run_id: str) -> RunSpec:
        """The spec a run recorded (see `to_record`).

        Raises:
            ConfigError: The record is not a run spec (a run recorded by an older version of
                Clearance, or a damaged record); the message names the run and the field.
        """
        if "default_model" in config:  # the hand-written config of older versions
            raise ConfigError(
                f"run {run_id} was recorded by an older version of Clearance, without its spec; "
                "resume it with Orchestrator(team, ...).resume(run_id)",
            )
        data = {k: v for k, v in config.items() if k not in RECORD_KEYS}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            field, message = validation_error(exc)
            raise ConfigError(
                f"run {run_id} cannot be rebuilt from its recorded spec: {message}", field=field
            ) from exc


def _masked(value: str) -> str:
    """A recorded ``env``/``headers`` value: ``${NAME}`` references kept, the rest masked."""
    return value if _FROM_ENV.fullmatch(value) else MASK


def validation_error(exc: ValidationError) -> tuple[str, str]:
    """The field (dotted path) and the one-line message of a pydantic error's first problem.

    The message says what was given when the value was of the wrong type or out of range
    (``Input should be a valid integer, got true``; a mapping or list is named, not shown),
    and asks for a mapping where a section's keys were expected. A value that fits none of
    a key's forms is said of that key, without pydantic's name for each form: a mapping
    given where a mapping is one of the forms gets that form's own problem
    (``depends_on.0.when: Field required``), any other value the list of forms
    (``tools.x: Input should be a valid string or a mapping of keys, got 5``). Problems of
    several keys of one mapping are not forms: the first is said, and the others counted.
    """
    errors = exc.errors()
    err = errors[0]
    loc = tuple(err["loc"])
    used = [err]
    prefix = loc[:-1]
    forms = [
        e
        for e in errors
        if len(e["loc"]) > len(prefix) and tuple(e["loc"])[: len(prefix)] == prefix
    ]
    shallow = [e for e in forms if len(e["loc"]) == len(prefix) + 1]
    if len({e["loc"][len(prefix)] for e in forms}) > 1 and all(  # the forms of one union
        e.get("input") is err.get("input") and e["type"] not in _KEY_ERRORS for e in shallow
    ):
        used = forms
        nested = [e for e in forms if len(e["loc"]) > len(prefix) + 1]
        if isinstance(err.get("input"), dict) and nested:
            err = nested[0]  # a mapping: the problem in the form that takes one
            loc = prefix + tuple(err["loc"])[len(prefix) + 1 :]
            text = _expected(err, whole=True)
        else:
            loc = prefix
            text = "Input should be " + " or ".join(_expected(e) for e in shallow)
    else:
        text = _expected(err, whole=True)
    # a key holding a line break (or any unprintable character) is quoted: one line
    field = ".".join(str(p) if str(p).isprintable() else repr(p) for p in loc) or "(top level)"
    count = len(errors) - len(used) + 1
    more = f" (and {count - 1} more problems)" if count > 1 else ""
    if "input" in err and err["type"] not in _NOT_GIVEN:
        text = f"{text}, got {_given(err['input'])}"
    message = " ".join(f"{text}{more}".split())
    return field, message


def _expected(error: Any, *, whole: bool = False) -> str:
    """What one error says the value should be (the whole message with ``whole``)."""
    pydantic_type = error["type"]  # pydantic's error type, not one of our kinds
    text = "Input should be a mapping of keys" if pydantic_type == "model_type" else error["msg"]
    text = str(text).removeprefix("Value error, ")  # a validator's own message says it all
    return text if whole else text.removeprefix("Input should be ")


_KEY_ERRORS = frozenset({"missing", "extra_forbidden"})
"""Pydantic error types about one key of a mapping: two of them are two problems of one
mapping (a key left out, a key it does not take), never two forms of one union, which are
each given the same value."""

_NOT_GIVEN = frozenset({"missing", "extra_forbidden", "value_error", "assertion_error"})
"""Pydantic error types whose message needs no "got ...": nothing was given, or the message
is a validator's own."""


def _given(value: Any) -> str:
    """A value from a team file as its message shows it: scalars in YAML's words, bounded."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, (int, float, str)):
        shown = repr(value)
        return shown if len(shown) <= 60 else f"{shown[:57]}..."
    return f"a {type(value).__name__}"
