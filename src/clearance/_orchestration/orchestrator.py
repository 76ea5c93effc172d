"""`Orchestrator`: runs a task graph, or a team from a goal, with need-to-know context."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from clearance._agents.caller import ModelCaller
from clearance._agents.replay import ReplaySource
from clearance._agents.retry import RetryPolicy
from clearance._agents.telemetry_spans import note_run, traced_run
from clearance._agents.tools import Tool
from clearance._core.errors import BudgetExceeded, ClearanceError, ConfigError, LedgerError
from clearance._core.hooks import HookRunner
from clearance._core.ids import new_id
from clearance._core.memory_spec import group_members
from clearance._core.run_spec import RunSpec
from clearance._core.spec import DEFAULT_COORDINATOR, Task, Team
from clearance._core.teamfile import LoadedTeam, prepare_run
from clearance._orchestration.arguments import checked_arguments, checked_tasks
from clearance._orchestration.execution import RunExecution
from clearance._orchestration.graph_check import check_graph, check_new_tasks
from clearance._orchestration.model_pool import ModelPool
from clearance._orchestration.planner import plan_tasks
from clearance._orchestration.result import RunEvent, RunEventKind, RunResult
from clearance._orchestration.resume import (
    check_resumable,
    load_recorded_run,
    process_identity,
    recorded_config,
    recorded_spec,
    recorded_usage,
    restore_messages,
)
from clearance._orchestration.resume_checks import check_recorded_steps
from clearance._orchestration.run import (
    DEFAULT_WORKSPACE_ROOT,
    Run,
    RunOptions,
    RunServices,
    RunSettings,
)
from clearance._orchestration.run_budget import RunMeters
from clearance._orchestration.run_config import derived_spec, named_tools, orchestrator_arguments
from clearance._orchestration.run_memory import RunMemory
from clearance._orchestration.stream import DEFAULT_MAX_EVENTS, RunStream, call_listener
from clearance._state.graph import TaskGraph
from clearance._state.ledger import Recorder, RunLedger, TaskRecord
from clearance._state.messages import MessageBus
from clearance._state.queue import TaskQueue
from clearance._state.shared_memory import SharedMemory
from clearance._state.store import ContextStore
from clearance.models._base import ChatModel, Usage
from clearance.models._registry import DEFAULT_MODEL_ID

__all__ = ["DEFAULT_COORDINATOR", "DEFAULT_GOAL", "DEFAULT_WORKSPACE_ROOT", "Orchestrator"]

DEFAULT_GOAL = "Report on the results of the tasks."

ToolsArg = Mapping[str, Tool | Callable[..., Any]] | Iterable[Tool | Callable[..., Any]]


class Orchestrator:
    """Runs task graphs with default-deny context, then has the coordinator synthesize.

    Each task's prompt is built by the `ContextBuilder` from its own text plus what its
    clearance admits: the results of its dependencies (or more, if its ``memory_scope``
    opts in), its listed files, and messages addressed to its assignee. A task starts the
    moment its dependencies complete; independent tasks run concurrently, at most
    ``max_concurrency`` at once. A failed task skips its transitive dependents and leaves
    every other branch running. The coordinator alone gets the full view, for synthesis.

    A task with an ``output_schema`` asks its model for JSON matching the schema, with one
    repair attempt, then fails with `OutputValidationError`. A dependency result over the
    assignee's ``limits.max_dependency_tokens`` fails the dependent task with
    `DependencyPayloadError`; it is never truncated.

    Args:
        team: The agents, and optionally the coordinator.
        model: Default model (an id such as ``"llama-cpp:smollm2"``, or an instance) for
            agents whose ``model`` is ``None``.
        ledger: Where runs are recorded; ``None`` opens the default SQLite ledger
            (``.clearance/runs.db``).
        store: The context store agents reach through their ``store_grants`` (built-in
            store tools); ``None`` for none.
        memory: Long-term memory of agents with ``memory`` settings (see `RunMemory`);
            required when an agent has them, ``None`` otherwise.
        tools: User tools agents may opt in to by name: plain typed functions (named by
            ``__name__``) or `Tool` objects, as a list or by name. The import path of each
            module-level function is recorded, so `from_run` can restore it.
        options: What the runs are set to do (concurrency, folders, isolation, synthesis,
            approvals, model settings, streaming, retries); ``None`` for `RunOptions()`.
        services: Who the runs work with (model instances, the message bus, the event
            callback, the clock, the executor, the person asked); ``None`` for
            `RunServices()`.

    Every run records the orchestrator's `RunSpec` (the one it was made from with
    `from_spec`, else one written from its arguments), so `from_run` rebuilds it.

    Agents with tools run the tool loop (`clearance._agents.loop`), bounded by ``max_steps``.

    Raises:
        ConfigError: An argument is not of its type (one line naming it), or
            ``options.model_options`` has an unknown key or a value that is not an integer.
    """

    def __init__(
        self,
        team: Team,
        *,
        model: str | ChatModel = DEFAULT_MODEL_ID,
        ledger: Recorder | None = None,
        store: ContextStore | None = None,
        memory: RunMemory | None = None,
        tools: ToolsArg = (),
        options: RunOptions | None = None,
        services: RunServices | None = None,
    ):
        options, services = checked_arguments(team, model, ledger, options, services, tools)
        self.team, self.options, self.services = team, options, services
        self._clock = services.clock
        given = services.messages
        self.messages = given if given is not None else MessageBus(clock=self._clock)
        self._models = ModelPool(
            model, models=services.models, options=options.model_options,
            executor=services.executor,
        )  # fmt: skip
        self._ledger = ledger
        self._on_event = services.on_event
        self.stream_text = options.stream_text
        self.store = store
        self._tools, self._tool_paths = named_tools(tools)
        self.memory = memory
        self._memory_groups = group_members(team.memory_groups)
        self.spec: RunSpec | None = None  # the spec it was made from (`from_spec`), if any
        self._meters = RunMeters()
        self._replay: ReplaySource | None = None  # the last resume's recorded steps

    @property
    def project_root(self) -> Path | None:
        """The folder isolated tasks work on: ``options.project_root``, else the input root."""
        return self.options.project_root or self.options.input_root

    @classmethod
    def from_spec(
        cls,
        spec: RunSpec | LoadedTeam,
        *,
        ledger: Recorder | None = None,
        store: ContextStore | None = None,
        memory: RunMemory | None = None,
        tools: Mapping[str, Tool | Callable[..., Any]] | None = None,
        services: RunServices | None = None,
        stream_text: bool = False,
        retry_policy: RetryPolicy | None = None,
    ) -> Orchestrator:
        """An orchestrator for a run's spec (a team file, see `clearance.load_team_file`).

        The spec is checked and its tasks expanded (`prepare_run`) unless given prepared;
        its tools, store, memory and messages are made as `orchestrator_arguments` says
        (close a store or memory opened here). The runs record the spec as it is.

        Args:
            spec: The run's spec, or one prepared with `prepare_run`.
            ledger: Where runs are recorded; ``None`` opens the default ledger.
            store: The store instead of opening the spec's.
            memory: The memory instead of opening the spec's.
            tools: User tools by name, instead of importing or looking them up.
            services: Model instances, message bus, callbacks, clock, executor, person.
            stream_text: Make every model call stream its text to ``services.on_event``.
            retry_policy: Backoff between attempts of a failing model call.

        Raises:
            ConfigError: The spec fails a check of `prepare_run`, a tool cannot be imported
                or looked up, or a URL holds a masked password.
            StoreError: The store cannot be opened.
        """
        loaded = spec if isinstance(spec, LoadedTeam) else prepare_run(spec)
        return cls._made_from(
            loaded.spec, loaded.team, loaded.synthesis_from, ledger=ledger, store=store,
            memory=memory, tools=tools, services=services, stream_text=stream_text,
            retry_policy=retry_policy,
        )  # fmt: skip

    @classmethod
    def _made_from(
        cls, spec: RunSpec, team: Team, synthesis_from: Iterable[str] | None, *,
        model: str | ChatModel | None = None, ledger: Recorder | None,
        store: ContextStore | None, memory: RunMemory | None,
        tools: Mapping[str, Tool | Callable[..., Any]] | None, services: RunServices | None,
        stream_text: bool = False, retry_policy: RetryPolicy | None = None,
    ) -> Orchestrator:  # fmt: skip
        arguments = orchestrator_arguments(
            spec, synthesis_from, store=store, memory=memory, tools=tools, services=services,
            stream_text=stream_text, retry_policy=retry_policy,
        )  # fmt: skip
        orchestrator = cls(team, model=model or spec.model or DEFAULT_MODEL_ID, ledger=ledger,
                           **arguments)  # fmt: skip
        orchestrator.spec = spec
        return orchestrator

    @property
    def ledger(self) -> Recorder:
        """Where runs are recorded: the given recorder, or a `RunLedger` opened on first use."""
        if self._ledger is None:
            self._ledger = RunLedger()
        return self._ledger

    @traced_run
    async def run_tasks(self, tasks: Iterable[Task], *, goal: str | None = None) -> RunResult:
        """Run a task graph, then synthesize.

        Args:
            tasks: The tasks; validated as a `TaskGraph` before anything runs.
            goal: What the synthesis should answer; a generic report if ``None``.

        Returns:
            The run's result. Task failures do not raise: they are in ``RunResult.tasks``.

        Raises:
            GraphError: The tasks do not form a valid graph (nothing is run).
            ConfigError: An item of ``tasks`` is not a `Task`, or the tasks fail `check_new_tasks`
                (titles, children's ids) or `check_graph` (nothing is run).
        """
        check_new_tasks(graph := TaskGraph(checked_tasks(tasks)), self.team)  # not on resume
        self._check_graph(graph)
        run_id, ledger = new_id("run"), self.ledger
        # The run's first record is queued like the rest (see `RunLedger.write_behind`).
        with ledger.write_behind():
            ledger.start_run(run_id=run_id, team=self.team.name, goal=goal,
                             graph=graph.to_dict(), config=self._config())  # fmt: skip
            self._emit(RunEventKind.RUN_STARTED, run_id, detail=f"{len(graph)} tasks")
            return await self._execute(run_id, graph, goal or DEFAULT_GOAL)

    @traced_run
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
        run_id, graph, usage = await self.plan(goal)
        return await self._execute(run_id, graph, goal, usage=usage)

    @traced_run
    async def plan(self, goal: str) -> tuple[str, TaskGraph, Usage]:
        """Start a run of ``goal``, have the coordinator plan it as `run_team` does; run nothing.

        Returns:
            The run's id, the validated graph (recorded with the run) and the planning's usage.

        Raises:
            PlanError: As `run_team` (the run is recorded ``failed``).
            ModelError: As `run_team`.
        """
        self._resolve_models()
        run_id = new_id("run")
        self.ledger.start_run(run_id=run_id, team=self.team.name, goal=goal, graph=None,
                              config=self._config())  # fmt: skip
        self._emit(RunEventKind.RUN_STARTED, run_id, detail="planning")
        graph, usage = await self._plan(run_id, goal, Usage())
        self._emit(RunEventKind.PLAN_READY, run_id, detail=f"{len(graph)} tasks")
        return run_id, graph, usage

    @classmethod
    def from_run(
        cls,
        run_id: str,
        *,
        ledger: RunLedger,
        spec: RunSpec | None = None,
        model: str | ChatModel | None = None,
        store: ContextStore | None = None,
        memory: RunMemory | None = None,
        tools: Mapping[str, Tool | Callable[..., Any]] | None = None,
        services: RunServices | None = None,
        retry_policy: RetryPolicy | None = None,
    ) -> Orchestrator:
        """An orchestrator rebuilt from a recorded run, ready to `resume` it.

        The run's recorded `RunSpec` (`RunSpec.from_record`) defines it: the team (every
        agent's spec, sampling, memory settings and memory groups), default model and its
        settings, concurrency, folders and the rest; its messages are the recorded ones. The
        store and memory are reopened at their recorded URLs (close them with
        ``orchestrator.store.close()`` and ``orchestrator.memory.close()`` when done) and
        user tools are imported from their recorded paths, unless given here.

        Args:
            run_id: The run's id, or a unique prefix of it.
            ledger: The ledger the run is recorded in.
            spec: The run's spec with changes (read it with `recorded_run_spec`, then
                ``spec.model_copy(update=...)``); ``None`` for the recorded one.
            model: Default model instead of the spec's (an id, or an instance).
            store: The store instead of the recorded one.
            memory: The memory instead of the recorded one.
            tools: User tools by name, instead of importing their recorded paths.
            services: Model instances, callbacks, clock, executor, approver (the tools that
                require approval are the ones the run recorded); the message bus is the
                recorded messages.
            retry_policy: Backoff between attempts of a failing model call.

        Raises:
            StoreError: No run (or several) match ``run_id``, or the database failed.
            ConfigError: The run was recorded without its spec (an older version of
                Clearance: resume it with ``Orchestrator(team, ...).resume(run_id)``), or
                its record is damaged.
        """
        recorded = load_recorded_run(ledger, run_id)
        recorded_one, synthesis_ids = recorded_spec(recorded.record)
        spec = spec if spec is not None else recorded_one
        services = dataclasses.replace(
            services or RunServices(), messages=restore_messages(recorded.messages)
        )
        return cls._made_from(
            spec, spec.team(), synthesis_ids, model=model, ledger=ledger, store=store,
            memory=memory, tools=tools, services=services, retry_policy=retry_policy,
        )  # fmt: skip

    @traced_run
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
        check_resumable(record, now=ledger.server_time(), force=force)
        if not self.messages.all():
            for message in recorded.messages:
                self.messages.restore(message)
        check_recorded_steps(recorded.graph, tasks)
        if recorded.graph is not None:
            self._check_graph(recorded.graph)
        elif record.goal is None:
            raise ConfigError(f"run {run_id} has neither a task graph nor a goal")
        else:
            self._resolve_models()
        # The run's usage counts every call, those of the earlier sessions included.
        usage, prompt_tokens = recorded_usage(ledger, recorded)
        self._replay = ReplaySource.load(ledger, run_id)  # durable resume: verified steps
        ledger.reopen_run(run_id, process=process_identity(), force=force, seen=recorded.chain_head)
        self._meters.resume(self.options.budget, run_id, ledger)
        total, done = len(recorded.graph or ()), len(recorded.completed)
        detail = f"resumed: {done} of {total} tasks already completed"
        self._emit(RunEventKind.RUN_STARTED, run_id, detail=detail)
        graph = recorded.graph
        if graph is None:
            assert record.goal is not None
            graph, usage = await self._plan(run_id, record.goal, usage)
        return await self._execute(
            run_id, graph, record.goal or DEFAULT_GOAL, usage=usage, completed=recorded.completed,
            prompt_tokens=prompt_tokens, recorded=recorded.tasks,
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
        self, run_id: str, graph: TaskGraph, goal: str, *, usage: Usage | None = None,
        completed: Mapping[str, str] | None = None, prompt_tokens: Mapping[str, int] | None = None,
        recorded: Mapping[str, TaskRecord] | None = None,
    ) -> RunResult:  # fmt: skip
        run = Run(
            run_id=run_id, goal=goal, shared=SharedMemory(clock=self._clock),
            queue=TaskQueue(graph, clock=self._clock, completed=completed),
            caller=self._caller(run_id), memory_groups=self._memory_groups,
            base_usage=usage or Usage(), prompt_tokens=dict(prompt_tokens or {}), recorded=recorded,
        )  # fmt: skip
        coordinator = self.team.coordinator or DEFAULT_COORDINATOR
        return await RunExecution(self._settings(), run, coordinator=coordinator).execute(completed)

    def _caller(self, run_id: str) -> ModelCaller:
        """The run's `ModelCaller`: every model call of the run goes through it."""
        executor = self.services.executor
        if executor is not None:
            executor.attach(functools.partial(self.ledger.record_event, run_id))
        note_run(run_id, resumed=bool(self._replay and self._replay.run_id == run_id))
        return ModelCaller(
            ledger=self.ledger, run_id=run_id, retry_policy=self.options.retry_policy,
            clock=self._clock,
            listener=call_listener(self._emit, run_id) if self.stream_text else None,
            meter=self._meters.for_run(self.options.budget, run_id),
            hooks=HookRunner(self.services.hooks),
            replay=self._replay if self._replay and self._replay.run_id == run_id else None,
        )  # fmt: skip

    def _check_graph(self, graph: TaskGraph) -> None:
        """Refuse, before anything runs, a graph that cannot run with this team."""
        self._resolve_models()
        check_graph(
            graph, team=self.team, tools=self._tools, store=self.store, memory=self.memory,
            messages=self.messages, synthesis_from=self.options.synthesis_from,
            input_root=self.options.input_root, project_root=self.project_root,
        )  # fmt: skip

    def _resolve_models(self) -> None:
        """Create every agent's model now, so a bad model id fails before the run starts."""
        agents = (*self.team.agents, self.team.coordinator or DEFAULT_COORDINATOR)
        self._models.resolve(agents)
        self._meters.check_prices(self.options.budget, map(self._models.for_agent, agents))

    def _config(self) -> dict[str, Any]:
        """The run's configuration as recorded with it: its spec (`recorded_config`)."""
        spec = self.spec or derived_spec(
            self.team, model_id=self._models.default_id, options=self.options,
            tool_paths=self._tool_paths, store=self.store, memory=self.memory,
        )  # fmt: skip
        return recorded_config(spec, self.options.synthesis_from)

    def _settings(self) -> RunSettings:
        """What this orchestrator fixes for each of its runs."""
        options, services = self.options, self.services
        return RunSettings(
            team=self.team, ledger=self.ledger, messages=self.messages, clock=self._clock,
            model_for=self._models.for_agent, emit=self._emit, memory=self.memory,
            tools=self._tools, input_include=options.input_include,
            memory_groups=self._memory_groups, store=self.store, approver=services.approver,
            input_root=options.input_root, project_root=self.project_root,
            file_caps=options.file_caps, clarification_rounds=options.clarification_rounds,
            workspace_root=options.workspace_root, ask_person=services.ask_person,
            synthesis_from=options.synthesis_from, max_concurrency=options.max_concurrency,
            approval_tools=options.approval_tools, answer_timeout_s=services.answer_timeout_s,
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
        self, tasks: Iterable[Task] | None = None, *, goal: str | None = None,
        resume: str | None = None, max_events: int = DEFAULT_MAX_EVENTS,
    ) -> RunStream:  # fmt: skip
        """Run, and iterate over the run's events as it goes (``async for event in ...``).

        Runs ``tasks`` (`run_tasks`), else plans ``goal`` (`run_team`), else resumes the run
        ``resume``, with every model call streaming; see `RunStream` for the events, the
        bounded queue and its drop policy, and the result.

        Raises:
            ConfigError: Neither tasks, a goal nor a run to resume, or ``max_events`` < 1.
        """
        return RunStream(self, tasks=tasks, goal=goal, resume=resume, max_events=max_events)
