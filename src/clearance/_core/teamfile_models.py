"""The parts of a run's spec (`RunSpec`): pydantic models of its keys, so errors name fields."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)
from pydantic_core import to_jsonable_python

from clearance._core.agent_spec import (
    LIMIT_RANGES,
    MAX_TOKENS,
    MAX_TOOL_TIMEOUT_S,
    TOOL_TIMEOUT_S,
)
from clearance._core.budget import MAX_BUDGET_TOKENS, MAX_BUDGET_USD, MAX_PRICE_PER_MTOK
from clearance._core.errors import ConfigError
from clearance._core.memory_spec import (
    MAX_RECALL,
    AgentMemory,
    MemoryGroup,
    SharedConversation,
)
from clearance._core.names import check_label
from clearance._core.review import MAX_REVIEW_ROUNDS, Review
from clearance._core.spec import (
    MAX_FAN_OUT,
    Agent,
    AgentLimits,
    Sampling,
)

__all__ = [
    "MODEL_OPTION_KEYS",
    "ModelId",
    "AgentMemorySpec",
    "AgentSpec",
    "BudgetSpec",
    "DependencySpec",
    "FanOutSpec",
    "FileCapsSpec",
    "InputSpec",
    "IsolationSpec",
    "LimitsSpec",
    "MemoryGroupSpec",
    "MemorySpec",
    "MessageSpec",
    "ModelOptionsSpec",
    "PlanRefSpec",
    "PriceSpec",
    "ReviewSpec",
    "SamplingSpec",
    "SharedConversationSpec",
    "TaskSpec",
    "ToolEntrySpec",
]


MODEL_OPTION_KEYS = frozenset(
    {"context_window", "n_ctx", "n_threads", "n_threads_batch", "n_batch"}
)
"""The `get_model` keyword arguments ``model_options.by_model`` may hold (all integers)."""


_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}:[^\s\x00-\x1f\x7f-\x9f]{1,256}")

MAX_MODEL_ID_CHARS = 256
"""Most characters of a model id: the ledger records each call's (``calls.model_id``)."""


def check_model_id(value: str) -> str:
    """``value`` if it looks like a model id, ``provider:name`` (no space, no control).

    Raises:
        ValueError: It does not (the message shows it and an example), or it is longer
            than `MAX_MODEL_ID_CHARS` characters.
    """
    if len(value) > MAX_MODEL_ID_CHARS:  # shown cut: the line stays one short line
        raise ValueError(
            f"model id {value[:40]!r}... is {len(value)} characters long, at most "
            f"{MAX_MODEL_ID_CHARS}"
        )
    if not _MODEL_ID.fullmatch(value):
        raise ValueError(
            f"model id {value!r} must look like 'provider:name' "
            "(for example 'llama-cpp:smollm2' or 'openai:gpt-4o-mini')"
        )
    return value


ModelId = Annotated[str, AfterValidator(check_model_id)]
"""A model id in a team file: checked when the file is read, not when the model is made."""


def _one_line(value: str) -> str:
    """A title a person wrote: one line (`check_label`); the field is the key's own."""
    try:
        check_label("title", value)
    except ConfigError as exc:
        raise ValueError(exc.message) from None
    return value


Title = Annotated[str, AfterValidator(_one_line)]
"""A task's title in a team file: one line of at most `MAX_LABEL_CHARS` characters. (A title
the coordinator's plan writes is shown on one line by the context builder instead.)"""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _fresh(factory: Callable[[], Any], **constraints: Any) -> Any:
    """A field whose default ``factory`` makes for each entry, shown in the schema as it is.

    A shared default that is a list, a dict or a model holding one would be deep-copied by
    pydantic for every entry that leaves the key out: for a file of 20,000 tasks or agents
    that copying cost more than validating the entries themselves.
    """
    shown = to_jsonable_python(factory())
    return Field(default_factory=factory, json_schema_extra={"default": shown}, **constraints)


def _limit(name: str, default: int | None) -> Any:
    """The field of an integer limit, bounded as `LIMIT_RANGES` says."""
    least, most = LIMIT_RANGES[name]
    return Field(default=default, ge=least, le=most, strict=True)


class LimitsSpec(_Strict):
    """``limits:`` of an agent."""

    max_output_tokens: int = _limit("max_output_tokens", 512)
    max_prompt_tokens: int | None = _limit("max_prompt_tokens", None)
    timeout_s: float | None = Field(default=600.0, gt=0, lt=10**7, strict=True)
    attempt_timeout_s: float | None = Field(default=None, gt=0, lt=10**7, strict=True)
    max_dependency_tokens: int | None = _limit("max_dependency_tokens", 4000)
    max_steps: int | None = _limit("max_steps", None)
    max_tokens_per_step: int | None = _limit("max_tokens_per_step", None)
    max_model_calls: int | None = _limit("max_model_calls", 64)
    max_tool_calls_per_step: int = _limit("max_tool_calls_per_step", 32)
    max_children: int = _limit("max_children", 8)
    spawn_timeout_s: float = Field(default=300.0, gt=0, lt=10**7, strict=True)
    max_output_files: int | None = _limit("max_output_files", None)
    max_output_size_bytes: int | None = _limit("max_output_size_bytes", None)
    answer_at_max_steps: bool = False
    retries: int = _limit("retries", 2)
    compact_tool_steps: int | None = _limit("compact_tool_steps", None)


class AgentMemorySpec(_Strict):
    """``memory:`` of an agent: recall before a task, record after (see `AgentMemory`)."""

    recall: int = Field(default=3, ge=0, le=MAX_RECALL, strict=True)
    record: Literal["none", "result", "task_and_result"] = "result"
    record_to: str | None = Field(default=None, min_length=1)


class SamplingSpec(_Strict):
    """``sampling:`` of an agent: how its model decodes (see `Sampling`)."""

    temperature: float | None = Field(default=None, ge=0, le=2, strict=True)
    top_p: float | None = Field(default=None, gt=0, le=1, strict=True)
    repeat_penalty: float | None = Field(default=None, ge=1, le=2, strict=True)
    stop: list[str] = _fresh(list, max_length=8)


class ModelOptionsSpec(_Strict):
    """``model_options:`` of the team: settings of its models.

    ``context_window`` is the tokens the models can attend to: for ``openai:``,
    ``anthropic:`` (whose servers do not say) and ``fake:`` models it bounds each prompt at
    the window minus the agent's ``max_output_tokens``; for the embedded ``llama-cpp:`` model
    it is the context it is loaded with (``n_ctx``, 128 to 131072); a team with a model of
    another provider (one a package adds) has it refused, as it would not reach that model.
    ``threads`` (generation), ``threads_batch`` (prompt evaluation, or prefill; 1 to 256
    each) and ``batch_size`` (prompt tokens per step, 1 to 8192) apply to ``llama-cpp:``
    models only, and are refused when no agent uses one. ``by_model`` gives one model id its
    own `get_model` settings (``context_window``, ``n_ctx``, ``n_threads``,
    ``n_threads_batch``, ``n_batch``), over the team-wide ones.
    """

    context_window: int | None = Field(default=None, ge=1, le=MAX_TOKENS, strict=True)
    threads: int | None = Field(default=None, ge=1, le=256, strict=True)
    threads_batch: int | None = Field(default=None, ge=1, le=256, strict=True)
    batch_size: int | None = Field(default=None, ge=1, le=8192, strict=True)
    by_model: dict[str, dict[str, StrictInt]] = {}

    @field_validator("by_model")
    @classmethod
    def _known_settings(cls, value: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        """Only `MODEL_OPTION_KEYS`: a value's range is checked by the model it is given to."""
        for model_id, settings in value.items():
            check_model_id(model_id)  # a key that is no model id named no model: no effect
            unknown = sorted(set(settings) - MODEL_OPTION_KEYS)
            if unknown:
                raise ValueError(f"unknown model setting {unknown[0]!r} for {model_id!r}")
        return value


class AgentSpec(_Strict):
    """One entry of ``agents:`` (or the ``coordinator:``)."""

    name: str = Field(min_length=1)
    instructions: str = Field(min_length=1)
    role: str = ""
    model: ModelId | None = None
    limits: LimitsSpec = LimitsSpec()
    tools: list[str] = _fresh(list)
    can_delegate_to: list[str] = _fresh(list)
    can_spawn: list[str] = _fresh(list)
    store_grants: dict[str, Literal["read", "write", "read_write"]] = _fresh(dict)
    memory: AgentMemorySpec | None = None
    store_read_extends_ttl_s: float | None = Field(default=None, gt=0, lt=10**10, strict=True)
    sampling: SamplingSpec = _fresh(SamplingSpec)

    @classmethod
    def from_agent(cls, agent: Agent) -> AgentSpec:
        """The entry that declares ``agent``; a tool given as a function is named by its name."""
        sampling = agent.sampling
        return cls(
            name=agent.name,
            instructions=agent.instructions,
            role=agent.role,
            model=agent.model,
            limits=LimitsSpec(**dataclasses.asdict(agent.limits)),
            tools=[t if isinstance(t, str) else getattr(t, "__name__", "") for t in agent.tools],
            can_delegate_to=list(agent.can_delegate_to),
            can_spawn=list(agent.can_spawn),
            store_grants=dict(agent.store_grants),  # type: ignore[arg-type]  # checked by Agent
            memory=AgentMemorySpec(**agent.memory.to_dict()) if agent.memory else None,  # type: ignore[arg-type]
            store_read_extends_ttl_s=agent.store_read_extends_ttl_s,
            sampling=SamplingSpec(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                repeat_penalty=sampling.repeat_penalty,
                stop=list(sampling.stop),
            ),
        )

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


class DependencySpec(_Strict):
    """A ``depends_on`` entry in its long form: ``{task: ID, when: {"/pointer": value}}``.

    ``when`` is a condition on the dependency's structured result (see `EdgeCondition`).
    """

    task: str = Field(min_length=1)
    when: dict[str, Any] = Field(min_length=1, max_length=32)


class ReviewSpec(_Strict):
    """``review:`` of a task: a bounded review loop (see `Review`)."""

    by: list[str] = Field(min_length=1, max_length=8)
    rounds: int = Field(default=3, ge=1, le=MAX_REVIEW_ROUNDS, strict=True)
    accept_when: dict[str, Any] = Field(default={"/verdict": "accept"}, min_length=1)

    def to_review(self) -> Review:
        """The `Review` this entry declares."""
        return Review(by=tuple(self.by), rounds=self.rounds, accept_when=self.accept_when)


class TaskSpec(_Strict):
    """One entry of ``tasks:``."""

    id: str = Field(min_length=1)
    title: Title = Field(min_length=1)
    description: str = Field(min_length=1)
    assignee: str | None = Field(default=None, min_length=1)
    depends_on: list[str | DependencySpec] = _fresh(list)
    memory_scope: Literal["dependencies", "transitive", "all"] = "dependencies"
    files: list[str] = _fresh(list)
    output_schema: dict[str, Any] | None = None
    for_each_file: str | None = None
    mode: Literal["standard", "isolated"] = "standard"
    constraints: list[str] = _fresh(list)
    fan_out: FanOutSpec | None = None
    run: str | None = None
    after_failure: Literal["skip", "proceed"] = "skip"
    approval: Literal["none", "required"] = "none"
    review: ReviewSpec | None = None

    @property
    def dependency_ids(self) -> list[str]:
        """The ids of ``depends_on`` (of long-form entries too)."""
        return [d if isinstance(d, str) else d.task for d in self.depends_on]

    @property
    def conditions(self) -> dict[str, dict[str, Any]]:
        """The ``when:`` of each long-form ``depends_on`` entry, by dependency id."""
        return {d.task: d.when for d in self.depends_on if not isinstance(d, str)}

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

    window: int = Field(default=10, ge=1, strict=True)
    retrieval: Literal["recency", "relevance"] = "recency"


class MemoryGroupSpec(_Strict):
    """One entry of ``memory_groups:``: agents that share one long-term memory."""

    name: str = Field(min_length=1)
    agents: list[str] = Field(min_length=2)
    shared_conversation: SharedConversationSpec | None = None

    @classmethod
    def from_group(cls, group: MemoryGroup) -> MemoryGroupSpec:
        """The entry that declares ``group``."""
        shared = group.shared_conversation
        return cls(
            name=group.name,
            agents=list(group.agents),
            shared_conversation=SharedConversationSpec(**dataclasses.asdict(shared))
            if shared
            else None,
        )

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
    include: list[Annotated[str, Field(min_length=1)]] = ["*"]  # "": no glob (pathlib refuses)


class FileCapsSpec(_Strict):
    """``isolation.file_caps:``: size caps on the files of one isolated task."""

    max_file_bytes: int = Field(default=64 * 1024, ge=1, le=64 * 1024 * 1024, strict=True)
    max_total_bytes: int = Field(default=256 * 1024, ge=1, le=256 * 1024 * 1024, strict=True)
    on_oversize: Literal["error", "truncate"] = "error"


class IsolationSpec(_Strict):
    """``isolation:``: how isolated tasks are run."""

    max_rounds: int = Field(default=2, ge=0, le=10, strict=True)
    file_caps: FileCapsSpec = FileCapsSpec()


class MemorySpec(_Strict):
    """``memory:`` of the team, in its long form (the short form is the URL alone)."""

    url: str | None = Field(default=None, min_length=1)
    on_error: Literal["fail", "continue"] = "fail"


class ToolEntrySpec(_Strict):
    """A ``tools:`` entry in its long form: ``{function: module:function, approval: ...}``.

    ``idempotent: true`` lets a resume run again a call the stopped run may have run;
    ``replay: false`` runs a call again on resume instead of replaying its recorded result
    (a live value). See `clearance._agents.replay`.

    ``timeout_s`` is the deadline of one call in seconds (past it the model is told so and
    the run goes on).

    ``function`` is ``None`` for a tool that is given in code (``tools=``) rather than
    imported: a run records such a tool by name, and resuming it needs the tool given again.
    The options an entry sets apply to its tool either way; those it leaves out stay as the
    tool has them (`mark_tool`).
    """

    function: str | None = Field(default=None, min_length=1)
    approval: Literal["none", "required"] = "none"
    idempotent: bool = False
    replay: bool = True
    timeout_s: float = Field(
        default=TOOL_TIMEOUT_S, gt=0, le=MAX_TOOL_TIMEOUT_S, allow_inf_nan=False, strict=True
    )


class PriceSpec(_Strict):
    """A ``prices:`` entry: what one model's tokens cost, in US dollars per million."""

    input_per_mtok: float = Field(ge=0, le=MAX_PRICE_PER_MTOK, allow_inf_nan=False, strict=True)
    output_per_mtok: float = Field(ge=0, le=MAX_PRICE_PER_MTOK, allow_inf_nan=False, strict=True)


class BudgetSpec(_Strict):
    """``budget:`` of a run: most tokens (prompt plus completion) and most US dollars."""

    tokens: int | None = Field(default=None, ge=1, le=MAX_BUDGET_TOKENS, strict=True)
    cost_usd: float | None = Field(
        default=None, gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False, strict=True
    )

    @model_validator(mode="after")
    def _some_cap(self) -> BudgetSpec:
        if self.tokens is None and self.cost_usd is None:
            raise ValueError("give tokens, cost_usd or both")
        return self


class PlanRefSpec(_Strict):
    """``plan:`` of a team file written by ``clearance plan``: the run that planned it."""

    run_id: str = Field(min_length=1, max_length=200)
    tasks_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
