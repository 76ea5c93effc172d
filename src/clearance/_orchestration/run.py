"""A run: its options, services and settings, and its state (`Run`).

What a run is set to do (`RunOptions`), who it works with (`RunServices`), and what its
orchestrator fixes for it (`RunSettings`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from clearance._agents.caller import ModelCaller
from clearance._agents.files import FileCaps
from clearance._agents.retry import RetryPolicy
from clearance._agents.tools import Tool
from clearance._context.builder import ContextBuilder
from clearance._core.budget import RunBudget
from clearance._core.clock import Clock, utc_now
from clearance._core.errors import ConfigError
from clearance._core.hooks import RunHooks, check_hook_timeouts
from clearance._core.names import check_count, text_tuple
from clearance._core.run_spec import MAX_CONCURRENCY
from clearance._core.spec import Agent, Team
from clearance._core.teamfile_models import MODEL_OPTION_KEYS
from clearance._core.vocabulary import RunEventKind
from clearance._core.workspace_reach import DEFAULT_WORKSPACE_ROOT
from clearance._orchestration.approval import (
    ANSWER_TIMEOUT_S,
    ApprovalGate,
    Approver,
    check_answer_timeout,
)
from clearance._orchestration.children import ChildRunner
from clearance._orchestration.executor import ModelExecutor
from clearance._orchestration.result import RunEvent
from clearance._orchestration.run_memory import RunMemory
from clearance._orchestration.runtime import AgentRuntime
from clearance._orchestration.subagents import AskPerson, IsolatedRunner
from clearance._state.ledger import Recorder, TaskRecord
from clearance._state.messages import MessageBus
from clearance._state.queue import TaskQueue
from clearance._state.shared_memory import SharedMemory
from clearance._state.store import ContextStore
from clearance.models._base import ChatModel, Usage, framing_tokens

__all__ = [
    "DEFAULT_WORKSPACE_ROOT",
    "Emit",
    "Run",
    "RunOptions",
    "RunServices",
    "RunSettings",
    "prompt_budget",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    """What an `Orchestrator`'s runs are set to do: the run settings of a `RunSpec`.

    Attributes:
        max_concurrency: Most tasks running at once (at least 1).
        input_root: Folder that task ``files`` are relative to; required when a task lists
            files.
        project_root: The project isolated tasks work on: their architectural context is
            computed from it once per run, and their ``files`` (and files they ask for) are
            read from it; ``None`` means ``input_root``.
        input_include: Globs (``input.include``) every file a task reads from the input folder
            must match, the files an isolated task requests included when its project
            folder is the input folder (right-anchored, as `pathlib.PurePath.match`).
        file_caps: Size caps on one isolated task's files.
        clarification_rounds: Most times an isolated task's subagent may ask for context
            before the task fails (0 to 10).
        workspace_root: Folder under which each run that spawns children gets its own
            folder (one workspace per child, created exclusively).
        synthesis_from: Ids of the tasks whose results the synthesis shows; ``None`` for
            every task's. Failed and skipped tasks are always listed.
        approval_tools: Names of the tools whose calls require a person's approval (see
            `clearance._orchestration.approval`); recorded with the run.
        model_options: Settings models are made with, by model id: `get_model` keyword
            arguments whose values are integers (for example
            ``{"llama-cpp:smollm2": {"n_threads_batch": 2}}``; keys are ``context_window``,
            ``n_ctx``, ``n_threads``, ``n_threads_batch`` and ``n_batch``). They are recorded
            with the run, so `Orchestrator.from_run` makes the same models.
        stream_text: Make every model call stream, and deliver its progress (``model_call``,
            ``text``, ``tool_call`` events) to ``on_event`` as well.
        retry_policy: Backoff between attempts of a model call that failed transiently (the
            number of retries is each agent's ``limits.retries``).
        budget: The run's token and cost budget, checked before each model call (see
            `RunBudget` and `BudgetExceeded`); ``None`` for no budget.

    Raises:
        ConfigError: ``max_concurrency`` below 1 or ``clarification_rounds`` outside 0 to 10.
    """

    max_concurrency: int = 4
    input_root: Path | None = None
    project_root: Path | None = None
    input_include: tuple[str, ...] = ("*",)
    file_caps: FileCaps = field(default_factory=FileCaps)
    clarification_rounds: int = 2
    workspace_root: Path = Path(DEFAULT_WORKSPACE_ROOT)
    synthesis_from: tuple[str, ...] | None = None
    approval_tools: frozenset[str] = frozenset()
    model_options: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    stream_text: bool = False
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    budget: RunBudget | None = None

    def __post_init__(self) -> None:
        check_count("max_concurrency", self.max_concurrency, least=1, most=MAX_CONCURRENCY)
        check_count("clarification_rounds", self.clarification_rounds, least=0, most=10)
        for model_id, options in self.model_options.items():
            for key, value in options.items():
                if key not in MODEL_OPTION_KEYS:
                    raise ConfigError(
                        f"unknown setting {key!r}; known: {', '.join(sorted(MODEL_OPTION_KEYS))}",
                        field=f"model_options.{model_id}",
                    )
                check_count(f"model_options.{model_id}.{key}", value, least=1)
        for name in ("input_root", "project_root", "workspace_root"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        if self.synthesis_from is not None:
            object.__setattr__(
                self, "synthesis_from", text_tuple("synthesis_from", self.synthesis_from)
            )
        object.__setattr__(
            self, "approval_tools", frozenset(text_tuple("approval_tools", self.approval_tools))
        )
        object.__setattr__(self, "input_include", text_tuple("input_include", self.input_include))


@dataclass(frozen=True, kw_only=True, slots=True)
class RunServices:
    """Who an `Orchestrator`'s runs work with: live objects, never recorded.

    Attributes:
        models: Model instances by id, used instead of creating models from their ids.
        messages: The team's message bus; a new empty bus if ``None``.
        on_event: Called with a `RunEvent` at each step of a run (for progress displays).
        clock: Source of timestamps (UTC).
        executor: Where model calls are answered (`RayExecutor`: on Ray worker actors);
            ``None`` answers them in this process. Prompts are built here either way.
        ask_person: Answers isolated subagents' questions instead of the coordinator (an
            interactive run); ``None`` lets the coordinator answer.
        approver: Asks a person about each approval on the spot; ``None`` pauses the run
            instead (`RunResult.status` ``"awaiting_approval"``).
        hooks: User hooks around the run, tasks, model and tool calls (`RunHooks`).
        answer_timeout_s: Most seconds ``approver`` or ``ask_person`` may take on one
            request (an hour by default; at most a day). Past it an approval stays open,
            its task pausing as without an approver, and a question gets no answer
            (``"(no answer was given)"``).

    Raises:
        ConfigError: ``answer_timeout_s``, or a hook's ``timeout_s``, is not a number of
            seconds above 0 and at most a day.
    """

    models: Mapping[str, ChatModel] = field(default_factory=dict)
    messages: MessageBus | None = None
    on_event: Callable[[RunEvent], None] | None = None
    clock: Clock = utc_now
    executor: ModelExecutor | None = None
    ask_person: AskPerson | None = None
    approver: Approver | None = None
    hooks: tuple[RunHooks, ...] = ()
    answer_timeout_s: float = ANSWER_TIMEOUT_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "hooks", tuple(self.hooks))
        object.__setattr__(self, "answer_timeout_s", check_answer_timeout(self.answer_timeout_s))
        check_hook_timeouts(self.hooks)  # refused before a run is recorded, not at its start


class Emit(Protocol):
    """Delivers a `RunEvent` to the orchestrator's ``on_event`` callback, if it has one."""

    def __call__(
        self,
        kind: RunEventKind,
        run_id: str,
        *,
        task_id: str | None = None,
        detail: str = "",
        subject: str | None = None,
    ) -> None:
        """Announce one step of run ``run_id`` (of task ``task_id``, if given)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """What an `Orchestrator` fixes for each of its runs (see its arguments)."""

    team: Team
    ledger: Recorder
    messages: MessageBus
    clock: Clock
    model_for: Callable[[Agent], ChatModel]
    emit: Emit
    memory: RunMemory | None
    memory_groups: Mapping[str, frozenset[str]]
    store: ContextStore | None
    tools: Mapping[str, Tool]
    input_root: Path | None
    project_root: Path | None
    file_caps: FileCaps
    clarification_rounds: int
    workspace_root: Path
    ask_person: AskPerson | None
    synthesis_from: tuple[str, ...] | None
    max_concurrency: int
    approval_tools: frozenset[str] = frozenset()
    approver: Approver | None = None
    answer_timeout_s: float = ANSWER_TIMEOUT_S
    input_include: tuple[str, ...] = ("*",)

    def __post_init__(self) -> None:
        # Fixed as the run starts: a step (or tool) that changes the process's working
        # directory must not move the folders later tasks read and children write in.
        for name in ("input_root", "project_root", "workspace_root"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).absolute())


@dataclass(slots=True)
class Run:
    """The state of one session of a run."""

    run_id: str
    goal: str
    queue: TaskQueue
    shared: SharedMemory
    caller: ModelCaller
    memory_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Usage before this session of the run (the plan's, or a resumed run's earlier calls).
    base_usage: Usage = field(default_factory=Usage)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    # A resumed run's tasks as the ledger read them (`RunLedger.tasks`); ``None``: a new run.
    recorded: Mapping[str, TaskRecord] | None = None
    # The run's prompt builders, one per model (``id(model)``: the model, its builder); a
    # builder renders each result once for all the prompts it enters (see `ContextBuilder`).
    builders: dict[int, tuple[ChatModel, ContextBuilder]] = field(default_factory=dict)
    # Made when the graph has isolated tasks, or agents that spawn (see `RunExecution`).
    isolated: IsolatedRunner | None = None
    children: ChildRunner | None = None
    gate: ApprovalGate | None = None  # approvals (see `approval.py`)
    runtime: AgentRuntime | None = None  # every agent's capabilities (see `runtime.py`)

    @property
    def usage(self) -> Usage:
        """Tokens of every call of the run so far."""
        return self.base_usage + self.caller.usage

    def builder(self, model: ChatModel) -> ContextBuilder:
        """The run's prompt builder for ``model`` (made on first use)."""
        kept = self.builders.get(id(model))
        if kept is not None:
            return kept[1]
        builder = ContextBuilder(count_tokens=model.count_tokens, memory_groups=self.memory_groups)
        self.builders[id(model)] = (model, builder)  # holding the model keeps its id unique
        return builder


def prompt_budget(agent: Agent, model: ChatModel) -> int | None:
    """An agent's prompt token budget with ``model``; ``None`` for no limit.

    Its ``limits.max_prompt_tokens`` if set, else the model's context window less the
    agent's ``limits.max_output_tokens`` and the tokens the model's chat template adds around
    a prompt (`framing_tokens`), else ``None``.

    Raises:
        ConfigError: The model declares a framing that is no token count.
    """
    if agent.limits.max_prompt_tokens is not None:
        return agent.limits.max_prompt_tokens
    if model.context_window is not None:
        return model.context_window - agent.limits.max_output_tokens - framing_tokens(model)
    return None
