"""`Orchestrator`: runs a task graph, or a team from a goal, with need-to-know context."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from clearance._agents.caller import ModelCaller
from clearance._agents.files import FileCaps
from clearance._agents.replay import ReplaySource
from clearance._agents.retry import RetryPolicy
from clearance._agents.tools import Tool
from clearance._core.budget import RunBudget
from clearance._core.clock import Clock, utc_now
from clearance._core.errors import BudgetExceeded, ClearanceError, ConfigError, LedgerError
from clearance._core.hooks import HookRunner, RunHooks
from clearance._core.ids import new_id
from clearance._core.memory_spec import group_members
from clearance._core.spec import Agent, Task, Team
from clearance._orchestration.approval import Approver
from clearance._orchestration.execution import RunExecution
from clearance._orchestration.executor import ModelExecutor
from clearance._orchestration.graph_check import check_graph
from clearance._orchestration.model_pool import ModelPool
from clearance._orchestration.planner import plan_tasks
from clearance._orchestration.result import RunEvent, RunEventKind, RunResult
from clearance._orchestration.resume import (
    check_resumable,
    load_recorded_run,
    process_identity,
    recorded_usage,
)
from clearance._orchestration.resume_checks import check_recorded_steps
from clearance._orchestration.run import Run, RunSettings
from clearance._orchestration.run_budget import RunMeters
from clearance._orchestration.run_config import (  # noqa: F401 (MODEL_OPTION_KEYS: old home)
    MODEL_OPTION_KEYS,
    checked_model_options,
    named_tools,
    recorded_arguments,
    recorded_config,
)
from clearance._orchestration.run_dir import new_run_dir as _new_run_dir  # noqa: F401 (old home)
from clearance._orchestration.run_memory import RunMemory
from clearance._orchestration.stream import DEFAULT_MAX_EVENTS, RunStream, call_listener
from clearance._orchestration.subagents import AskPerson
from clearance._state.graph import TaskGraph
from clearance._state.ledger import Recorder, RunLedger
from clearance._state.messages import MessageBus
from clearance._state.queue import TaskQueue
from clearance._state.shared_memory import SharedMemory
from clearance._state.store import ContextStore
from clearance.models._base import ChatModel, Usage
from clearance.models._registry import DEFAULT_MODEL_ID

__all__ = ["DEFAULT_COORDINATOR", "DEFAULT_GOAL", "DEFAULT_WORKSPACE_ROOT", "Orchestrator"]

DEFAULT_WORKSPACE_ROOT = ".clearance/workspaces"
"""Where runs that spawn children get their folders (relative to the working directory)."""

DEFAULT_COORDINATOR = Agent(
    name="coordinator",
    instructions=(
        "You are the coordinator of a team of agents. You plan the team's work, and you "
        "write the final answer from the results your team members report."
    ),
)
"""The coordinator used when a team declares none."""

DEFAULT_GOAL = "Report on the results of the tasks."


class Orchestrator:
    """Runs task graphs with default-deny context, then has the coordinator synthesize.

    Each task's prompt is built by the `ContextBuilder` from its own text plus what its
    clearance admits: the results of its dependencies (or more, if its ``memory_scope``
    opts in), its listed files, and messages addressed to its assignee. A task starts the
    moment its dependencies complete; independent tasks run concurrently, at most
    ``max_concurrency`` at once. A failed task skips its transitive dependents and leaves
    every other branch running. The coordinator alone gets the full view, for synthesis.

    A task with an ``output_schema`` asks its model for JSON matching the schema; an answer
    that does not validate gets exactly one repair attempt (the task prompt plus the rejected
    answer and the validation error), then the task fails with `OutputValidationError`.
    Dependents and the synthesis receive the validated JSON, re-serialized canonically. A
    dependency result over the assignee's ``limits.max_dependency_tokens`` fails the
    dependent task with `DependencyPayloadError`; it is never truncated.

    Args:
        team: The agents, and optionally the coordinator.
        model: Default model (an id such as ``"llama-cpp:smollm2"``, or an instance) for
            agents whose ``model`` is ``None``.
        models: Model instances by id, used instead of creating models from their ids.
        model_options: Settings models are made with, by model id: `get_model` keyword
            arguments whose values are integers (for example
            ``{"llama-cpp:smollm2": {"n_threads_batch": 2}}``; keys are ``context_window``,
            ``n_ctx``, ``n_threads``, ``n_threads_batch`` and ``n_batch``). They are recorded
            with the run, so `from_run` makes the same models; give the instances made with
            them in ``models`` as well to have them used in this run.
        ledger: Where runs are recorded; ``None`` opens the default SQLite ledger
            (``.clearance/runs.db``).
        max_concurrency: Most tasks running at once (at least 1).
        input_root: Folder that task ``files`` are relative to; required when a task lists
            files.
        messages: The team's message bus; a new empty bus if ``None``.
        on_event: Called with a `RunEvent` at each step of a run (for progress displays).
        stream_text: Make every model call stream, and deliver its progress (``model_call``,
            ``text``, ``tool_call`` events) to ``on_event`` as well (see `stream`).
        clock: Source of timestamps (UTC).
        retry_policy: Backoff between attempts of a model call that failed transiently (the
            number of retries is each agent's ``limits.retries``); ``None`` means
            `RetryPolicy()` (1 s doubling to 60 s, up to 1 s jitter).
        store: The context store agents reach through their ``store_grants`` (built-in
            store tools); ``None`` for none.
        tools: User tools agents may opt in to by name: plain typed functions (named by
            ``__name__``) or `Tool` objects, as a list or by name. The import path of each
            module-level function is recorded, so `from_run` can restore it.
        project_root: The project isolated tasks work on: their architectural context is
            computed from it once per run, and their ``files`` (and files they ask for) are
            read from it; ``None`` means ``input_root``.
        file_caps: Size caps on one isolated task's files; ``None`` means `FileCaps()`.
        clarification_rounds: Most times an isolated task's subagent may ask for context
            before the task fails (0 to 10).
        workspace_root: Folder under which each run that spawns children gets its own
            folder (one workspace per child, created exclusively).
        ask_person: Answers isolated subagents' questions instead of the coordinator (an
            interactive run); ``None`` lets the coordinator answer.
        memory: Long-term memory of agents with ``memory`` settings (see `RunMemory`);
            required when an agent has them, ``None`` otherwise.
        synthesis_from: Ids of the tasks whose results the synthesis shows; ``None`` for
            every task's. Failed and skipped tasks are always listed.
        executor: Where model calls are answered (`RayExecutor`: on Ray worker actors);
            ``None`` answers them in this process. Prompts are built here either way.
        approval_tools: Names of the tools whose calls require a person's approval (see
            `clearance._orchestration.approval`); recorded with the run.
        approver: Asks a person about each approval on the spot; ``None`` pauses the run
            instead (`RunResult.status` ``"awaiting_approval"``).
        budget: The run's token and cost budget, checked before each model call (see
            `RunBudget` and `BudgetExceeded`); recorded. ``None`` for no budget.
        hooks: User hooks around the run, tasks, model and tool calls (`RunHooks`).

    Agents with tools run the tool loop (`clearance._agents.loop`), bounded by ``max_steps``.

    Raises:
        ConfigError: ``max_concurrency`` is below 1, or ``model_options`` has a key that is
            not a known setting or a value that is not an integer.
    """

    def __init__(
        self,
        team: Team,
        *,
        model: str | ChatModel = DEFAULT_MODEL_ID,
        models: Mapping[str, ChatModel] | None = None,
        model_options: Mapping[str, Mapping[str, int]] | None = None,
        ledger: Recorder | None = None,
        max_concurrency: int = 4,
        input_root: str | Path | None = None,
        messages: MessageBus | None = None,
        on_event: Callable[[RunEvent], None] | None = None,
        stream_text: bool = False,
        clock: Clock = utc_now,
        retry_policy: RetryPolicy | None = None,
        store: ContextStore | None = None,
        tools: Mapping[str, Tool | Callable[..., Any]] | Iterable[Tool | Callable[..., Any]] = (),
        project_root: str | Path | None = None,
        file_caps: FileCaps | None = None,
        clarification_rounds: int = 2,
        workspace_root: str | Path = DEFAULT_WORKSPACE_ROOT,
        ask_person: AskPerson | None = None,
        memory: RunMemory | None = None,
        synthesis_from: Iterable[str] | None = None,
        executor: ModelExecutor | None = None,
        approval_tools: Iterable[str] = (),
        approver: Approver | None = None,
        budget: RunBudget | None = None,
        hooks: Iterable[RunHooks] = (),
    ):
        if max_concurrency < 1:
            raise ConfigError("must be at least 1", field="max_concurrency")
        self.team = team
        self.messages = messages if messages is not None else MessageBus(clock=clock)
        self.max_concurrency = max_concurrency
        self.input_root = Path(input_root) if input_root is not None else None
        self._models = ModelPool(model, models=models, options=model_options, executor=executor)
        self._ledger = ledger
        self._on_event = on_event
        self.stream_text = stream_text
        self._clock = clock
        self.retry_policy = retry_policy if retry_policy is not None else RetryPolicy()
        self.store = store
        self._tools, self._tool_paths = named_tools(tools)
        self.memory = memory
        self._memory_groups = group_members(team.memory_groups)
        if not 0 <= clarification_rounds <= 10:
            raise ConfigError("must be 0 to 10", field="clarification_rounds")
        project = project_root if project_root is not None else self.input_root
        self.project_root = Path(project) if project is not None else None
        self.file_caps, self.clarification_rounds = file_caps or FileCaps(), clarification_rounds
        self.workspace_root, self.ask_person = Path(workspace_root), ask_person
        self.synthesis_from = tuple(synthesis_from) if synthesis_from is not None else None
        self.executor, self.approval_tools = executor, frozenset(approval_tools)
        self.approver, self.hooks = approver, tuple(hooks)
        self.budget, self._meters = budget, RunMeters()
        self._replay: ReplaySource | None = None  # the last resume's recorded steps

    @property
    def ledger(self) -> Recorder:
        """Where runs are recorded: the given recorder, or a `RunLedger` opened on first use."""
        if self._ledger is None:
            self._ledger = RunLedger()
        return self._ledger

    async def run_tasks(self, tasks: Iterable[Task], *, goal: str | None = None) -> RunResult:
        """Run a task graph, then synthesize.

        Args:
            tasks: The tasks; validated as a `TaskGraph` before anything runs.
            goal: What the synthesis should answer; a generic report if ``None``.

        Returns:
            The run's result. Task failures do not raise: they are in ``RunResult.tasks``.

        Raises:
            GraphError: The tasks do not form a valid graph (nothing is run).
            ConfigError: A task names an unknown agent, or lists files without an
                ``input_root`` (nothing is run).
        """
        graph = TaskGraph(tasks)
        self._check_graph(graph)
        run_id = new_id("run")
        ledger = self.ledger
        # The run's first record is queued like the rest (see `RunLedger.write_behind`).
        with ledger.write_behind():
            ledger.start_run(run_id=run_id, team=self.team.name, goal=goal,
                             graph=graph.to_dict(), config=self._config())  # fmt: skip
            self._emit(RunEventKind.RUN_STARTED, run_id, detail=f"{len(graph)} tasks")
            return await self._execute(run_id, graph, goal or DEFAULT_GOAL)

    async def run_team(self, goal: str) -> RunResult:
        """Have the coordinator plan tasks for ``goal``, run them, then synthesize.

        The coordinator sees the goal and a roster of agent names and role summaries (not
        their instructions) and answers with a JSON plan, which is validated as a
        `TaskGraph` with its dependency edges kept exactly as planned. An invalid plan gets
        one repair attempt that shows the coordinator what was wrong.

        Raises:
            PlanError: The plan is still invalid after the repair attempt.
            ModelError: The coordinator's model failed while planning.
        """
        self._resolve_models()
        run_id = new_id("run")
        self.ledger.start_run(
            run_id=run_id, team=self.team.name, goal=goal, graph=None, config=self._config()
        )
        self._emit(RunEventKind.RUN_STARTED, run_id, detail="planning")
        graph, usage = await self._plan(run_id, goal, Usage())
        self._emit(RunEventKind.PLAN_READY, run_id, detail=f"{len(graph)} tasks")
        return await self._execute(run_id, graph, goal, usage=usage)

    @classmethod
    def from_run(
        cls,
        run_id: str,
        *,
        ledger: RunLedger,
        model: str | ChatModel | None = None,
        models: Mapping[str, ChatModel] | None = None,
        on_event: Callable[[RunEvent], None] | None = None,
        clock: Clock = utc_now,
        retry_policy: RetryPolicy | None = None,
        store: ContextStore | None = None,
        memory: RunMemory | None = None,
        tools: Mapping[str, Tool | Callable[..., Any]] = {},
        executor: ModelExecutor | None = None,
        approver: Approver | None = None,
    ) -> Orchestrator:
        """An orchestrator rebuilt from a recorded run, ready to `resume` it.

        The team (every agent's spec, memory settings and memory groups), default model,
        concurrency, input folder, messages, store, memory and user tools are the ones the
        run recorded when it started: the store and memory are reopened at their recorded
        URLs (close them with ``orchestrator.store.close()`` and ``orchestrator.memory.close()``
        when done) and user tools are imported from their recorded paths, unless given here.

        Args:
            run_id: The run's id, or a unique prefix of it.
            ledger: The ledger the run is recorded in.
            model: Default model instead of the recorded one (``None`` keeps the recorded one).
            models: Model instances by id, used instead of creating models from their ids.
                Other models are made with the ``model_options`` the run recorded.
            on_event: Called with a `RunEvent` at each step.
            clock: Source of timestamps (UTC).
            retry_policy: Backoff between attempts of a failing model call.
            store: The store instead of the recorded one.
            memory: The memory instead of the recorded one.
            tools: User tools by name, instead of importing their recorded paths.
            executor: Where model calls are answered; ``None`` in this process.
            approver: Asks a person about approvals on the spot (the tools that require
                approval are the ones the run recorded); ``None`` pauses instead.

        Raises:
            StoreError: No run (or several) match ``run_id``, or the database failed.
            ConfigError: The run was recorded without its team's specs (an older version of
                Clearance), or its record is damaged.
        """
        team, recorded = recorded_arguments(ledger, run_id, store=store, memory=memory, tools=tools)
        if model is not None:
            recorded["model"] = model
        return cls(
            team, **recorded, models=models, ledger=ledger, on_event=on_event, clock=clock,
            retry_policy=retry_policy, executor=executor, approver=approver,
        )  # fmt: skip

    async def resume(
        self, run_id: str, *, force: bool = False, tasks: Iterable[Task] = ()
    ) -> RunResult:
        """Finish a recorded run that was stopped: keep completed results, run the rest.

        Other tasks run again from their last recorded step (verified answers and tool
        results are replayed, see `clearance._agents.replay`), then the synthesis. A run whose
        recorded process is alive, or whose records fail their hash chain, is refused.

        Args:
            run_id: The run's id, or a unique prefix of it.
            force: Resume a run recorded ``running`` anyway (only when you know it stopped).
            tasks: The team file's tasks; a recorded ``python:`` step must be among them.

        Returns:
            The run's result, as `run_tasks` returns it.

        Raises:
            StoreError: No run (or several) match ``run_id``, or the database failed.
            ConfigError: The run completed or may be running (without ``force``), a task
                names an unknown agent, the record is damaged or fails its chain, or a
                recorded ``python:`` step is not in ``tasks``.
            PlanError: The run had no plan yet, and the coordinator's new plan is invalid.
        """
        ledger = self.ledger
        if not isinstance(ledger, RunLedger):  # a NullLedger, say: nothing to resume from
            raise LedgerError(f"cannot read run {run_id!r}: {ledger!r} keeps no record to resume")
        recorded = load_recorded_run(ledger, run_id)
        record = recorded.record
        run_id = record.run_id
        check_resumable(record, force=force)
        if not self.messages.all():
            for message in recorded.messages:
                self.messages.restore(message)
        check_recorded_steps(recorded.graph, tasks)
        if recorded.graph is not None:
            self._check_graph(recorded.graph)
        elif record.goal is None:
            raise ConfigError(f"run {run_id} has neither a task graph nor a goal", field="run")
        else:
            self._resolve_models()
        # The run's usage counts every call, those of the earlier sessions included.
        usage, prompt_tokens = recorded_usage(ledger, recorded)
        self._replay = ReplaySource.load(ledger, run_id)  # durable resume: verified steps
        ledger.reopen_run(run_id, process=process_identity(), force=force)
        self._meters.resume(self.budget, run_id, ledger)
        total, done = len(recorded.graph or ()), len(recorded.completed)
        detail = f"resumed: {done} of {total} tasks already completed"
        self._emit(RunEventKind.RUN_STARTED, run_id, detail=detail)
        graph = recorded.graph
        if graph is None:
            assert record.goal is not None
            graph, usage = await self._plan(run_id, record.goal, usage)
        return await self._execute(
            run_id, graph, record.goal or DEFAULT_GOAL, usage=usage, completed=recorded.completed,
            prompt_tokens=prompt_tokens,
        )  # fmt: skip

    async def _plan(self, run_id: str, goal: str, usage: Usage) -> tuple[TaskGraph, Usage]:
        """Have the coordinator plan ``goal`` (see `plan_tasks`) and record the graph.

        Returns the graph and ``usage`` plus the planning calls'. A failed plan finishes the
        run ``failed`` (its calls counted) and raises.
        """
        caller = self._caller(run_id)
        coordinator = self.team.coordinator or DEFAULT_COORDINATOR
        try:
            graph = await plan_tasks(
                caller, goal, team=self.team, coordinator=coordinator,
                model=self._models.for_agent(coordinator), memory_groups=self._memory_groups,
            )  # fmt: skip
        except ClearanceError as exc:
            status = "interrupted" if isinstance(exc, BudgetExceeded) else "failed"
            self.ledger.finish_run(
                run_id, status=status, synthesis=None, usage=usage + caller.usage, error=str(exc)
            )
            self._emit(RunEventKind.RUN_FINISHED, run_id, detail=str(exc))
            raise
        self.ledger.set_graph(run_id, graph.to_dict())
        return graph, usage + caller.usage

    async def _execute(
        self,
        run_id: str,
        graph: TaskGraph,
        goal: str,
        *,
        usage: Usage | None = None,
        completed: Mapping[str, str] | None = None,
        prompt_tokens: Mapping[str, int] | None = None,
    ) -> RunResult:
        run = Run(
            run_id=run_id,
            goal=goal,
            queue=TaskQueue(graph, clock=self._clock, completed=completed),
            shared=SharedMemory(clock=self._clock),
            caller=self._caller(run_id),
            memory_groups=self._memory_groups,
            base_usage=usage or Usage(),
            prompt_tokens=dict(prompt_tokens or {}),
        )
        coordinator = self.team.coordinator or DEFAULT_COORDINATOR
        return await RunExecution(self._settings(), run, coordinator=coordinator).execute(completed)

    def _caller(self, run_id: str) -> ModelCaller:
        """The run's `ModelCaller`: every model call of the run goes through it."""
        if self.executor is not None:
            self.executor.attach(functools.partial(self.ledger.record_event, run_id))
        return ModelCaller(
            ledger=self.ledger, run_id=run_id, retry_policy=self.retry_policy, clock=self._clock,
            listener=call_listener(self._emit, run_id) if self.stream_text else None,
            meter=self._meters.for_run(self.budget, run_id), hooks=HookRunner(self.hooks),
            replay=self._replay if self._replay and self._replay.run_id == run_id else None,
        )  # fmt: skip

    def _check_graph(self, graph: TaskGraph) -> None:
        """Refuse, before anything runs, a graph that cannot run with this team."""
        self._resolve_models()
        check_graph(
            graph, team=self.team, tools=self._tools, store=self.store, memory=self.memory,
            messages=self.messages, synthesis_from=self.synthesis_from,
            input_root=self.input_root, project_root=self.project_root,
        )  # fmt: skip

    def _resolve_models(self) -> None:
        """Create every agent's model now, so a bad model id fails before the run starts."""
        agents = (*self.team.agents, self.team.coordinator or DEFAULT_COORDINATOR)
        self._models.resolve(agents)
        self._meters.check_prices(self.budget, map(self._models.for_agent, agents))

    def _config(self) -> dict[str, Any]:
        """The run's configuration as recorded with it (see `recorded_config`)."""
        return recorded_config(
            self._settings(),
            coordinator=self.team.coordinator or DEFAULT_COORDINATOR,
            default_model=self._models.default_id,
            tool_paths=self._tool_paths,
            model_options=self._models.options,
            budget=self.budget,
        )

    def _settings(self) -> RunSettings:
        """What this orchestrator fixes for each of its runs."""
        return RunSettings(
            team=self.team, ledger=self.ledger, messages=self.messages, clock=self._clock,
            model_for=self._models.for_agent, emit=self._emit, memory=self.memory,
            memory_groups=self._memory_groups, store=self.store, tools=self._tools,
            input_root=self.input_root, project_root=self.project_root,
            file_caps=self.file_caps, clarification_rounds=self.clarification_rounds,
            workspace_root=self.workspace_root, ask_person=self.ask_person,
            synthesis_from=self.synthesis_from, max_concurrency=self.max_concurrency,
            approval_tools=self.approval_tools, approver=self.approver,
        )  # fmt: skip

    def _emit(
        self, kind: RunEventKind, run_id: str, *, task_id: str | None = None, detail: str = "",
        subject: str | None = None,
    ) -> None:  # fmt: skip
        """Deliver a `RunEvent` to the ``on_event`` callback; made only when there is one."""
        if self._on_event is not None:
            self._on_event(
                RunEvent(kind=kind, run_id=run_id, task_id=task_id, detail=detail, subject=subject)
            )

    def stream(
        self,
        tasks: Iterable[Task] | None = None,
        *,
        goal: str | None = None,
        resume: str | None = None,
        max_events: int = DEFAULT_MAX_EVENTS,
    ) -> RunStream:
        """Run, and iterate over the run's events as it goes (``async for event in ...``).

        Runs ``tasks`` (`run_tasks`), else plans ``goal`` (`run_team`), else resumes the run
        ``resume``, with every model call streaming; see `RunStream` for the events, the
        bounded queue and its drop policy, and the result.

        Raises:
            ConfigError: Neither tasks, a goal nor a run to resume, or ``max_events`` < 1.
        """
        return RunStream(self, tasks=tasks, goal=goal, resume=resume, max_events=max_events)
