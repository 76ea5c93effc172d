"""`Orchestrator`: runs a task graph, or a team from a goal, with need-to-know context."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jsonschema.exceptions import best_match

from clearance._agents.caller import CallBudget, ModelCaller
from clearance._agents.delegation import DelegationChain
from clearance._agents.files import FileCaps
from clearance._agents.loop import AgentLoop, check_tools
from clearance._agents.retry import RetryPolicy
from clearance._agents.telemetry import agent_span
from clearance._agents.tools import Tool, ToolOutput, tool_name
from clearance._context.answers import mark_answer
from clearance._context.architecture import ArchitecturalContext
from clearance._context.builder import ContextBuilder
from clearance._context.tool_sections import ToolStep
from clearance._core.clock import Clock, utc_now
from clearance._core.errors import (
    ClearanceError,
    ConfigError,
    LedgerError,
    ModelError,
    OutputValidationError,
    PlanError,
)
from clearance._core.ids import new_id
from clearance._core.memory_spec import group_members
from clearance._core.prompt import Prompt, sha256_text
from clearance._core.spec import Agent, Task, Team, schema_validator
from clearance._orchestration.files import read_task_files
from clearance._orchestration.planner import PLAN_SCHEMA, parse_plan
from clearance._orchestration.result import EventKind, RunEvent, RunResult, TaskOutcome
from clearance._orchestration.resume import (
    check_resumable,
    load_recorded_run,
    process_identity,
    recorded_usage,
    restore_messages,
    restore_resources,
)
from clearance._orchestration.run_memory import RunMemory, absolute_url
from clearance._orchestration.scheduler import Scheduler
from clearance._orchestration.steps import resolve_step, run_task_step
from clearance._orchestration.subagents import (
    AskPerson,
    ChildRunner,
    IsolatedRunner,
    TaskContext,
    gather_children,
)
from clearance._orchestration.synthesis import Synthesis, synthesize
from clearance._state.graph import TaskGraph
from clearance._state.ledger import Recorder, RunLedger
from clearance._state.messages import MessageBus, check_recipient
from clearance._state.queue import TaskQueue, TaskState, TaskStatus
from clearance._state.shared_memory import SharedMemory
from clearance._state.store import ContextStore
from clearance.models._base import ChatModel, Usage
from clearance.models._registry import DEFAULT_MODEL_ID, get_model

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

_FENCED_JSON = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.DOTALL)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _validated_json(text: str, schema: dict[str, Any]) -> str:
    """Parse a structured answer and validate it against the task's ``output_schema``.

    Args:
        text: The completion: a JSON value, or a fenced code block (```` ```json ````) holding
            one.
        schema: The task's (already checked) JSON Schema.

    Returns:
        The value re-serialized canonically:
        ``json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)``.

    Raises:
        ValueError: With a one-line reason fit to show the model on the repair attempt
            (empty answer, invalid JSON, or the schema error and the JSON path it is at).
    """
    body = text.strip()
    if not body:
        raise ValueError("the answer is empty; reply with a JSON value only")
    try:
        return _validated_json_value(body, schema)
    except RecursionError as exc:
        raise ValueError("the JSON is nested too deeply") from exc


def _validated_json_value(body: str, schema: dict[str, Any]) -> str:
    try:
        value = json.loads(body, parse_constant=_reject_constant, strict=False)
    except ValueError as exc:
        match = _FENCED_JSON.search(body)
        if match is None:
            raise ValueError(f"the answer is not valid JSON: {exc}") from exc
        try:
            value = json.loads(match.group(1), parse_constant=_reject_constant, strict=False)
        except ValueError as inner:
            raise ValueError(f"the fenced block is not valid JSON: {inner}") from inner
    errors = list(schema_validator(schema).iter_errors(value))
    error = best_match(errors)
    if error is not None:
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise ValueError(
            f"the JSON does not match the output schema at {error.json_path}: {error.message}{more}"
        )
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


def _agent_config(agent: Agent) -> dict[str, Any]:
    """An agent's spec as JSON-ready data, recorded so that a run can be resumed."""
    return {
        "name": agent.name,
        "model": agent.model,
        "instructions": agent.instructions,
        "role": agent.role,
        "limits": dataclasses.asdict(agent.limits),
        "tools": [tool_name(t) for t in agent.tools],
        "can_delegate_to": list(agent.can_delegate_to),
        "can_spawn": list(agent.can_spawn),
        "store_grants": dict(agent.store_grants),
        # Memory hook: memory settings and store-read extension, restored by `resume`.
        "memory": agent.memory.to_dict() if agent.memory else None,
        "store_read_extends_ttl_s": agent.store_read_extends_ttl_s,
    }


def _import_path(entry: Tool | Callable[..., Any]) -> str | None:
    """``module:qualname`` of a plain module-level function (so `resume` can import it)."""
    if isinstance(entry, Tool):
        return None
    module, qualname = getattr(entry, "__module__", None), getattr(entry, "__qualname__", "")
    if not module or "<" in qualname or module == "__main__":
        return None
    return f"{module}:{qualname}"


@dataclass(slots=True)
class _Run:
    run_id: str
    goal: str
    queue: TaskQueue
    shared: SharedMemory
    caller: ModelCaller
    # Usage before this session of the run (the plan's, or a resumed run's earlier calls).
    base_usage: Usage = field(default_factory=Usage)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    # The run's prompt builders, one per model (``id(model)``: the model, its builder); a
    # builder renders each result once for all the prompts it enters (see `ContextBuilder`).
    builders: dict[int, tuple[ChatModel, ContextBuilder]] = field(default_factory=dict)
    # Made when the graph has isolated tasks, or agents that spawn (see `_prepare_subagents`).
    isolated: IsolatedRunner | None = None
    children: ChildRunner | None = None

    @property
    def usage(self) -> Usage:
        """Tokens of every call of the run so far."""
        return self.base_usage + self.caller.usage


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

    Agents with ``tools`` or ``can_delegate_to`` run the tool loop (see
    `clearance._agents.loop`), bounded by ``limits.max_steps``.

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
    ):
        if max_concurrency < 1:
            raise ConfigError("must be at least 1", field="max_concurrency")
        self.team = team
        self.messages = messages if messages is not None else MessageBus(clock=clock)
        self.max_concurrency = max_concurrency
        self.input_root = Path(input_root) if input_root is not None else None
        self._default_model = model
        self._models: dict[str, ChatModel] = dict(models or {})
        self._model_options = checked_model_options(model_options or {})
        self._ledger = ledger
        self._on_event = on_event
        self._clock = clock
        self.retry_policy = retry_policy if retry_policy is not None else RetryPolicy()
        self.store = store
        named = tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools)
        self._tools: dict[str, Tool] = {}
        self._tool_paths: dict[str, str | None] = {}
        for key, entry in named:
            tool = entry if isinstance(entry, Tool) else Tool.from_function(entry, name=key)
            self._tools[key or tool.name] = tool
            self._tool_paths[key or tool.name] = _import_path(entry)
        self.memory = memory
        self._memory_groups = group_members(team.memory_groups)
        if not 0 <= clarification_rounds <= 10:
            raise ConfigError("must be 0 to 10", field="clarification_rounds")
        project = project_root if project_root is not None else self.input_root
        self.project_root = Path(project) if project is not None else None
        self.file_caps = file_caps or FileCaps()
        self.clarification_rounds = clarification_rounds
        self.workspace_root = Path(workspace_root)
        self.ask_person = ask_person
        self.synthesis_from = tuple(synthesis_from) if synthesis_from is not None else None

    # -- public API ---------------------------------------------------------------------

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
            ledger.start_run(
                run_id=run_id,
                team=self.team.name,
                goal=goal,
                graph=graph.to_dict(),
                config=self._config(),
            )
            self._emit("run_started", run_id, detail=f"{len(graph)} tasks")
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
        self._emit("run_started", run_id, detail="planning")
        caller = self._caller(run_id)
        try:
            graph = await self._plan(caller, goal)
        except ClearanceError as exc:
            self.ledger.finish_run(
                run_id, status="failed", synthesis=None, usage=caller.usage, error=str(exc)
            )
            self._emit("run_finished", run_id, detail=str(exc))
            raise
        self.ledger.set_graph(run_id, graph.to_dict())
        self._emit("plan_ready", run_id, detail=f"{len(graph)} tasks")
        return await self._execute(run_id, graph, goal, usage=caller.usage)

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

        Raises:
            StoreError: No run (or several) match ``run_id``, or the database failed.
            ConfigError: The run was recorded without its team's specs (an older version of
                Clearance), or its record is damaged.
        """
        recorded = load_recorded_run(ledger, run_id)
        if recorded.team is None:
            raise ConfigError(
                f"run {recorded.record.run_id} was recorded without its agents' specs; resume it "
                "with Orchestrator(team, ...).resume(run_id)",
                field="run",
            )
        # Resume hook: the store, memory and user tools the run recorded.
        store, memory, restored = restore_resources(
            recorded.record, store=store, memory=memory, tools=tools
        )
        return cls(
            recorded.team,
            store=store,
            memory=memory,
            tools=restored,
            model=model or recorded.default_model or DEFAULT_MODEL_ID,
            models=models,
            model_options=_recorded_model_options(recorded.record.config),
            ledger=ledger,
            max_concurrency=recorded.max_concurrency or 4,
            input_root=recorded.input_root,
            messages=restore_messages(recorded.messages),
            **_recorded_subagent_settings(recorded.record.config),
            on_event=on_event,
            clock=clock,
            retry_policy=retry_policy,
        )

    async def resume(self, run_id: str, *, force: bool = False) -> RunResult:
        """Finish a recorded run that was stopped: keep completed results, run the rest.

        Every task recorded ``completed`` keeps its result and is not run again; every other
        task (``pending``, ``ready``, ``running``, ``interrupted``, ``failed`` or ``skipped``)
        runs again, as soon as its dependencies are completed. Then the coordinator writes the
        synthesis. A run stopped before the coordinator planned is planned again. The run keeps
        its id; new model calls are added to its record, and its usage counts every call.
        Messages recorded with the run are restored onto an empty message bus.

        A run recorded ``running`` is refused while the process that runs it is alive (the
        run records its host and process id): two processes must not run one run. A run
        whose process was killed is ``running`` in the ledger and resumes normally.

        Args:
            run_id: The run's id, or a unique prefix of it.
            force: Resume even a run recorded ``running`` by a live process or by a process
                on another host (which cannot be checked): only when you know it stopped.

        Returns:
            The run's result, as `run_tasks` returns it.

        Raises:
            StoreError: No run (or several) match ``run_id``, or the database failed.
            ConfigError: The run already completed, is still running in a live process on
                this host or was started on another host (without ``force``), a task names an
                agent this team lacks, or the record is damaged.
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
        if recorded.graph is not None:
            self._check_graph(recorded.graph)
        elif record.goal is None:
            raise ConfigError(f"run {run_id} has neither a task graph nor a goal", field="run")
        else:
            self._resolve_models()
        # The run's usage counts every call, those of the earlier sessions included.
        usage, prompt_tokens = recorded_usage(ledger, recorded)
        ledger.reopen_run(run_id, process=process_identity(), force=force)
        total = len(recorded.graph) if recorded.graph is not None else 0
        done = len(recorded.completed)
        self._emit(
            "run_started", run_id, detail=f"resumed: {done} of {total} tasks already completed"
        )
        graph = recorded.graph
        if graph is None:
            assert record.goal is not None
            caller = self._caller(run_id)
            try:
                graph = await self._plan(caller, record.goal)
            except ClearanceError as exc:
                usage = usage + caller.usage
                ledger.finish_run(run_id, status="failed", synthesis=None, usage=usage,
                                  error=str(exc))  # fmt: skip
                raise
            usage = usage + caller.usage
            ledger.set_graph(run_id, graph.to_dict())
        return await self._execute(
            run_id,
            graph,
            record.goal or DEFAULT_GOAL,
            usage=usage,
            completed=recorded.completed,
            prompt_tokens=prompt_tokens,
        )

    # -- planning -----------------------------------------------------------------------

    async def _plan(self, caller: ModelCaller, goal: str) -> TaskGraph:
        """Ask the coordinator for a plan (one repair attempt); its calls go through ``caller``.

        Raises:
            PlanError: The plan is still invalid after the repair attempt.
        """
        coordinator = self.team.coordinator or DEFAULT_COORDINATOR
        model = self._model_for(coordinator)
        builder = ContextBuilder(count_tokens=model.count_tokens, memory_groups=self._memory_groups)
        names = [a.name for a in self.team.agents]
        if not names:
            raise ConfigError("the team has no agents to assign tasks to", field="agents")
        feedback: str | None = None
        for _attempt in range(2):
            prompt = builder.build_plan_prompt(
                goal,
                coordinator=coordinator,
                roster=self.team.agents,
                feedback=feedback,
                max_prompt_tokens=self._budget(coordinator, model),
            )
            response = await caller.call(
                subject="plan", agent=coordinator, model=model, prompt=prompt,
                json_schema=PLAN_SCHEMA,
            )  # fmt: skip
            try:
                return parse_plan(response.text, agents=names)
            except ValueError as exc:
                reason = str(exc)
                feedback = f"Your answer was:\n{response.text}\n\nIt was rejected: {reason}"
        raise PlanError(reason, response=response.text)

    # -- execution ----------------------------------------------------------------------

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
        run = _Run(
            run_id=run_id,
            goal=goal,
            queue=TaskQueue(graph, clock=self._clock, completed=completed),
            shared=SharedMemory(clock=self._clock),
            caller=self._caller(run_id),
            base_usage=usage or Usage(),
            prompt_tokens=dict(prompt_tokens or {}),
        )
        ledger = self.ledger
        # Records are queued and committed in groups by the ledger's writer thread, in order:
        # the ledger always holds a prefix of the run's history (see `RunLedger.write_behind`).
        with ledger.write_behind():
            self._prepare_subagents(run)
            ledger.record_messages(run_id, self.messages.all())
            fresh = []
            for state in run.queue.states():
                if completed and state.task.id in completed:
                    # Kept from the run being resumed: its ledger record stays as it is.
                    run.shared.write(
                        task_id=state.task.id, agent=state.task.assignee, content=state.result or ""
                    )
                else:
                    fresh.append(state)
            ledger.record_tasks(run_id, fresh)  # one transaction for the whole graph
            try:
                return await self._execute_recorded(run)
            except BaseException as exc:
                # Ctrl-C, cancellation or a failing ledger: leave the run resumable.
                self._mark_interrupted(run, exc if isinstance(exc, ClearanceError) else None)
                raise

    def _mark_interrupted(self, run: _Run, cause: ClearanceError | None = None) -> None:
        """Record running tasks as ``interrupted`` and the run as ``interrupted``.

        ``cause`` (a failing ledger write, say) is named in the run's recorded error.
        """
        why = f"{cause}; " if cause is not None else "interrupted; "
        with contextlib.suppress(ClearanceError):
            for state in run.queue.with_status(TaskStatus.RUNNING):
                run.queue.interrupt(state.task.id)
                self.ledger.record_task(run.run_id, run.queue.get(state.task.id))
            self.ledger.record_messages(run.run_id, self.messages.all())
            self.ledger.finish_run(
                run.run_id,
                status="interrupted",
                synthesis=None,
                usage=run.usage,
                error=f"{why}resume with: clearance resume {run.run_id}",
            )
        self._emit("run_finished", run.run_id, detail="interrupted")

    async def _execute_recorded(self, run: _Run) -> RunResult:
        run_id, ledger = run.run_id, self.ledger
        try:
            await self._schedule(run)
        finally:
            if run.children is not None:
                await run.children.aclose()

        synthesis, error = await self._synthesize(run)
        all_completed = all(s.status is TaskStatus.COMPLETED for s in run.queue.states())
        status: Literal["completed", "failed"] = (
            "completed" if synthesis is not None and all_completed else "failed"
        )
        if error is None and not all_completed:
            bad = [s.task.id for s in run.queue.states() if s.status is not TaskStatus.COMPLETED]
            error = f"tasks not completed: {', '.join(bad)}"
        ledger.record_messages(run_id, self.messages.all())
        ledger.finish_run(run_id, status=status, synthesis=synthesis, usage=run.usage, error=error)
        self._emit("run_finished", run_id, detail=status)
        return RunResult(
            run_id=run_id,
            status=status,
            synthesis=synthesis,
            tasks={
                s.task.id: TaskOutcome(
                    task_id=s.task.id,
                    assignee=s.task.assignee,
                    status=s.status,
                    result=s.result,
                    error=s.error,
                    prompt_tokens=run.prompt_tokens.get(s.task.id, 0),
                )
                for s in run.queue.states()
            },
            usage=run.usage,
            error=error,
        )

    async def _schedule(self, run: _Run) -> None:
        """Run the graph's tasks, each as soon as its dependencies are done."""
        await Scheduler(
            run.queue,
            max_concurrency=self.max_concurrency,
            run_task=lambda task: self._run_task_with_memory(run, task),
            settle=lambda task_id, job: self._settle(run, task_id, job),
            on_started=lambda states: self._record_started(run, states),
        ).run()

    def _record_started(self, run: _Run, states: Sequence[TaskState]) -> None:
        """Record tasks that started together, in one ledger write, and announce them."""
        self.ledger.record_tasks(run.run_id, states)
        for state in states:
            self._emit("task_started", run.run_id, task_id=state.task.id)

    def _settle(self, run: _Run, task_id: str, finished: asyncio.Task[str]) -> None:
        """Record a finished task: its result, or its failure and the skipped dependents."""
        queue, ledger = run.queue, self.ledger
        task = queue.get(task_id).task
        exc = finished.exception()
        if exc is None:
            result = finished.result()
            queue.complete(task_id, result)
            run.shared.write(task_id=task_id, agent=task.assignee, content=result)
            ledger.record_task(run.run_id, queue.get(task_id))
            self._emit("task_completed", run.run_id, task_id=task_id)
            return
        if isinstance(exc, LedgerError):
            # The ledger failed, not the task: stop the run, resumable, and say why; the
            # records committed so far stay as they are. (A memory or store backend failing
            # is the task's failure, per its policy.)
            raise exc
        reason = str(exc) if isinstance(exc, ClearanceError) else f"{type(exc).__name__}: {exc}"
        skipped = queue.fail(task_id, reason)
        run.shared.write(task_id=task_id, agent=task.assignee, content=reason, kind="failure")
        ledger.record_task(run.run_id, queue.get(task_id))
        self._emit("task_failed", run.run_id, task_id=task_id, detail=reason)
        for skipped_id in skipped:
            ledger.record_task(run.run_id, queue.get(skipped_id))
            self._emit("task_skipped", run.run_id, task_id=skipped_id, detail=reason)

    async def _run_task_with_memory(self, run: _Run, task: Task) -> str:
        """Run one task; a model task in an OpenTelemetry ``invoke_agent`` span (`agent_span`)."""
        if task.run is not None:  # a non-model step (see `steps.py`)
            return await self._remembered(run, task)
        with agent_span(run_id=run.run_id, task_id=task.id, agent=task.assignee):
            return await self._remembered(run, task)

    async def _remembered(self, run: _Run, task: Task) -> str:
        """Memory hook: recall before the task, record its result after (see `RunMemory`)."""
        if self.memory is None:
            return await self._run_task(run, task)
        agent, groups = self.team.agent(task.assignee), self._memory_groups
        await self.memory.recall(
            run_id=run.run_id, task=task, agent=agent, groups=groups, ledger=self.ledger
        )
        result = await self._run_task(run, task)
        await self.memory.record(
            run_id=run.run_id, task=task, agent=agent, groups=groups, result=result,
            ledger=self.ledger,
        )  # fmt: skip
        return result

    async def _run_task(self, run: _Run, task: Task) -> str:
        if task.run is not None:  # a non-model task (see `steps.py`)
            return await run_task_step(
                task, queue=run.queue, input_root=self.input_root, recorder=self.ledger,
                run_id=run.run_id,
            )  # fmt: skip
        agent = self.team.agent(task.assignee)
        model = self._model_for(agent)
        builder = self._builder(run, model)
        ctx = TaskContext(
            run_id=run.run_id, task=task, agent=agent, model=model, builder=builder,
            queue=run.queue, budget=CallBudget(agent.limits.max_model_calls,
                                               subject=f"task:{task.id}"),
            max_prompt_tokens=self._budget(agent, model),
        )  # fmt: skip
        if task.fan_out is not None:
            assert run.children is not None  # made for every graph with a fan-out
            await gather_children(run.children, ctx)
        if task.mode == "isolated":
            assert run.isolated is not None
            files: dict[str, str] | None = {}
            if task.files:
                assert self.project_root is not None  # checked before the run started
                files = read_task_files(self.project_root, task.files)
            try:
                return await run.isolated.run(ctx, files or {})
            finally:
                run.prompt_tokens[task.id] = ctx.prompt_tokens
        files = None
        if task.files:
            assert self.input_root is not None  # checked before the run started
            files = read_task_files(self.input_root, task.files)
        schema = task.output_schema

        async def attempt(repair: str | None = None) -> str:
            if agent.uses_tools:
                return await self._run_tool_loop(run, ctx, files, repair)
            prompt = self._task_prompt(run, ctx, files, repair)
            response = await run.caller.call(
                subject=f"task:{task.id}", agent=agent, model=model, prompt=prompt,
                json_schema=schema, budget=ctx.budget,
            )  # fmt: skip
            if schema is not None:  # a cut-off JSON answer fails validation and is repaired
                return response.text.strip()
            return self._marked(run, f"task:{task.id}", response.text, response.finish_reason)

        text = await attempt()
        if schema is None:
            if not text:
                raise ModelError("the model returned an empty completion", model_id=model.model_id)
            return text
        # A structured hand-off: one repair attempt that shows the rejected answer and why.
        try:
            return _validated_json(text, schema)
        except ValueError as exc:
            text = await attempt(repair=f"{text}\n\nProblem: {exc}")
        try:
            return _validated_json(text, schema)
        except ValueError as exc:
            raise OutputValidationError(task.id, str(exc)) from exc

    def _marked(self, run: _Run, subject: str, text: str, finish_reason: str | None) -> str:
        """``text`` with cut-off and repetition marks (see `answers.py`); marks are recorded."""
        marked = mark_answer(text, finish_reason=finish_reason)
        if marked.truncated or marked.repetitive:
            self.ledger.record_event(run.run_id, "answer_marked", subject, {
                "truncated": marked.truncated, "repetitive": marked.repetitive,
            })  # fmt: skip
        return marked.text

    def _task_prompt(
        self,
        run: _Run,
        ctx: TaskContext,
        files: Mapping[str, str] | None,
        repair: str | None,
        tools: tuple[dict[str, Any], ...] = (),
        tool_steps: Sequence[ToolStep] = (),
    ) -> Prompt:
        """Build one attempt's task prompt (with the agent's budgets) and note its size."""
        prompt = ctx.builder.build_task_prompt(
            ctx.task,
            agent=ctx.agent,
            queue=run.queue,
            messages=self.messages,
            files=files,
            max_prompt_tokens=ctx.max_prompt_tokens,
            max_dependency_tokens=ctx.agent.limits.max_dependency_tokens,
            repair=repair,
            tools=tools,
            tool_steps=tool_steps,
            child_results=ctx.child_results,
            # Memory hook: the records recalled for this task (`RunMemory.recall`).
            memories=self.memory.recalled(run.run_id, ctx.task.id) if self.memory else (),
        )
        run.prompt_tokens[ctx.task.id] = prompt.manifest.total_tokens
        return prompt

    async def _run_tool_loop(
        self,
        run: _Run,
        ctx: TaskContext,
        files: Mapping[str, str] | None,
        repair: str | None,
    ) -> str:
        """Run a tool-using agent's loop for one task attempt; return its final answer."""

        def build(specs: tuple[dict[str, Any], ...], steps: list[ToolStep]) -> Prompt:
            return self._task_prompt(run, ctx, files, repair, specs, steps)

        children = run.children

        async def spawn(
            agent: Agent, calls: list[tuple[str, dict[str, Any]]]
        ) -> dict[str, ToolOutput]:
            assert children is not None
            return await children.spawn_calls(ctx, calls)

        loop = AgentLoop(
            run_id=run.run_id,
            team=self.team,
            ledger=self.ledger,
            store=self.store,
            user_tools=self._tools,
            model_for=self._model_for,
            caller=run.caller,
            call_budget=ctx.budget,
            budget=self._budget,
            spawn=spawn if children is not None else None,
        )
        chain = DelegationChain(origin=ctx.agent.name)
        return await loop.run(
            agent=ctx.agent, subject=f"task:{ctx.task.id}", chain=chain, build=build
        )

    async def _synthesize(self, run: _Run) -> tuple[str | None, str | None]:
        """Write the synthesis; return ``(text, None)`` or ``(None, error)``."""
        coordinator = self.team.coordinator or DEFAULT_COORDINATOR
        self._emit("synthesis_started", run.run_id)
        try:
            model = self._model_for(coordinator)
            text = await synthesize(
                Synthesis(
                    goal=run.goal, coordinator=coordinator, model=model,
                    builder=self._builder(run, model), caller=run.caller, queue=run.queue,
                    shared_memory=run.shared, budget=self._budget(coordinator, model),
                    include=self.synthesis_from,
                    mark=lambda subject, r: self._marked(run, subject, r.text, r.finish_reason),
                )
            )  # fmt: skip
        except ClearanceError as exc:
            return None, f"synthesis failed: {exc}"
        if not text:
            return None, "synthesis failed: the coordinator returned an empty completion"
        return text, None

    # -- model calls --------------------------------------------------------------------

    def _caller(self, run_id: str) -> ModelCaller:
        """The run's `ModelCaller`: every model call of the run goes through it."""
        return ModelCaller(
            ledger=self.ledger, run_id=run_id, retry_policy=self.retry_policy, clock=self._clock
        )

    # -- isolated tasks and children ---------------------------------------------------

    def _prepare_subagents(self, run: _Run) -> None:
        """Make the run's isolated-task and child runners, when its graph needs them.

        The architectural context is computed once per run from ``project_root`` and
        recorded (event ``architecture``); each run that can spawn gets its own folder under
        ``workspace_root``, created exclusively.
        """
        tasks = [s.task for s in run.queue.states() if s.status is not TaskStatus.COMPLETED]
        if any(t.mode == "isolated" for t in tasks):
            architecture = None
            if self.project_root is not None:
                architecture = ArchitecturalContext.from_project(self.project_root)
                text = architecture.to_text()
                self.ledger.record_event(run.run_id, "architecture", "run", {
                    "project": architecture.project, "text": text, "sha256": sha256_text(text),
                })  # fmt: skip
            coordinator = self.team.coordinator or DEFAULT_COORDINATOR
            coordinator_model = self._model_for(coordinator)
            run.isolated = IsolatedRunner(
                run_id=run.run_id, ledger=self.ledger, caller=run.caller,
                architecture=architecture, project_root=self.project_root,
                file_caps=self.file_caps, max_rounds=self.clarification_rounds,
                coordinator=coordinator, coordinator_model=coordinator_model,
                coordinator_builder=self._builder(run, coordinator_model),
                coordinator_budget=self._budget(coordinator, coordinator_model),
                ask_person=self.ask_person,
            )  # fmt: skip
        spawners = {a.name for a in self.team.agents if a.can_spawn}
        if any(t.fan_out is not None or t.assignee in spawners for t in tasks):
            run.children = ChildRunner(
                run_id=run.run_id, team=self.team, ledger=self.ledger, caller=run.caller,
                store=self.store, user_tools=self._tools, model_for=self._model_for,
                builder_for=lambda model: self._builder(run, model),
                prompt_budget=self._budget, run_dir=_new_run_dir(self.workspace_root, run.run_id),
            )  # fmt: skip

    # -- helpers ------------------------------------------------------------------------

    def _check_graph(self, graph: TaskGraph) -> None:
        """Refuse, before anything runs, a graph that cannot run with this team."""
        self._resolve_models()
        check_tools(self.team, self._tools, self.store)
        with_memory = [a.name for a in self.team.agents if a.memory is not None]
        if with_memory and self.memory is None:
            raise ConfigError(
                f"agents {with_memory} have memory settings but the orchestrator has no memory: "
                "pass memory=RunMemory(url)",
                field="memory",
            )
        names = {a.name for a in self.team.agents}
        unknown = sorted(set(self.synthesis_from or ()) - {t.id for t in graph})
        if unknown:
            raise ConfigError(f"names unknown task {unknown[0]!r}", field="synthesis_from")
        for task in graph:
            if task.run is not None:  # a non-model task: its assignee is only a label
                resolve_step(task)
                if task.files and self.input_root is None:
                    raise ConfigError(
                        f"task {task.id!r} lists files but the orchestrator has no input_root",
                        field="files",
                    )
                continue
            if task.assignee not in names:
                known = ", ".join(sorted(names)) or "none"
                raise ConfigError(
                    f"task {task.id!r} is assigned to unknown agent {task.assignee!r} "
                    f"(agents: {known})",
                    field="assignee",
                )
            root = self.project_root if task.mode == "isolated" else self.input_root
            if task.files and root is None:
                raise ConfigError(
                    f"task {task.id!r} lists files but the orchestrator has no input_root",
                    field="files",
                )
            assignee = self.team.agent(task.assignee)
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
        coordinator = self.team.coordinator
        members = names | ({coordinator.name} if coordinator is not None else set())
        for message in self.messages.all():
            check_recipient(message.recipient, members)

    def _resolve_models(self) -> None:
        """Create every agent's model now, so a bad model id fails before the run starts."""
        for agent in (*self.team.agents, self.team.coordinator or DEFAULT_COORDINATOR):
            self._model_for(agent)

    def _builder(self, run: _Run, model: ChatModel) -> ContextBuilder:
        """The run's prompt builder for ``model`` (made on first use)."""
        kept = run.builders.get(id(model))
        if kept is not None:
            return kept[1]
        builder = ContextBuilder(count_tokens=model.count_tokens, memory_groups=self._memory_groups)
        run.builders[id(model)] = (model, builder)  # holding the model keeps its id unique
        return builder

    def _model_for(self, agent: Agent) -> ChatModel:
        key = agent.model
        if key is None:
            if not isinstance(self._default_model, str):
                return self._default_model
            key = self._default_model
        if key not in self._models:
            self._models[key] = get_model(key, **self._model_options.get(key, {}))
        return self._models[key]

    @staticmethod
    def _budget(agent: Agent, model: ChatModel) -> int | None:
        if agent.limits.max_prompt_tokens is not None:
            return agent.limits.max_prompt_tokens
        if model.context_window is not None:
            return model.context_window - agent.limits.max_output_tokens
        return None

    def _config(self) -> dict[str, Any]:
        default = self._default_model
        return {
            "default_model": default if isinstance(default, str) else default.model_id,
            "max_concurrency": self.max_concurrency,
            "input_root": str(self.input_root) if self.input_root else None,
            "agents": [_agent_config(a) for a in self.team.agents],
            "coordinator": _agent_config(self.team.coordinator or DEFAULT_COORDINATOR),
            "memory_groups": {g: sorted(m) for g, m in self._memory_groups.items()},
            "project_root": str(self.project_root) if self.project_root else None,
            "workspace_root": str(self.workspace_root),
            "file_caps": dataclasses.asdict(self.file_caps),
            "clarification_rounds": self.clarification_rounds,
            # Where memory and store live (passwords masked), for `verify` and `resume`;
            # the full memory groups (shared conversations too) and the user tools' import paths.
            "memory": self.memory.config() if self.memory else None,
            "store": {"url": absolute_url(self.store.url)} if self.store else None,
            "memory_group_specs": [dataclasses.asdict(g) for g in self.team.memory_groups],
            "tool_paths": dict(self._tool_paths),
            "synthesis_from": list(self.synthesis_from) if self.synthesis_from else None,
            "model_options": self._model_options,
            "process": process_identity(),  # `resume` refuses a run whose process is alive
        }

    def _emit(
        self, kind: EventKind, run_id: str, *, task_id: str | None = None, detail: str = ""
    ) -> None:
        """Deliver a `RunEvent` to the ``on_event`` callback; made only when there is one."""
        if self._on_event is not None:
            self._on_event(RunEvent(kind=kind, run_id=run_id, task_id=task_id, detail=detail))


def _new_run_dir(root: Path, run_id: str) -> Path:
    """A new folder for a run's workspaces, created exclusively (never an earlier one).

    ``<root>/<run id>``, or ``<run id>.2``, ``.3``... for the later sessions of a resumed run.

    Raises:
        ConfigError: No folder could be made.
    """
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = root / (run_id if n == 1 else f"{run_id}.{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise ConfigError(
        f"cannot make a workspace folder for run {run_id} in {str(root)!r}",
        field="workspace_root",
    )


MODEL_OPTION_KEYS = frozenset(
    {"context_window", "n_ctx", "n_threads", "n_threads_batch", "n_batch"}
)
"""The `get_model` keyword arguments ``model_options`` may hold (all integers)."""


def checked_model_options(
    options: Mapping[str, Mapping[str, int]],
) -> dict[str, dict[str, int]]:
    """``options`` as plain dicts, once every key is known and every value an integer.

    The values' ranges are checked by the model that receives them.

    Raises:
        ConfigError: A model id is not a string, a setting is not in `MODEL_OPTION_KEYS`, or
            a value is not an integer.
    """
    checked: dict[str, dict[str, int]] = {}
    for model_id, settings in options.items():
        if not isinstance(model_id, str) or not isinstance(settings, Mapping):
            raise ConfigError(
                f"not a model id and its settings: {model_id!r}", field="model_options"
            )
        for key, value in settings.items():
            if key not in MODEL_OPTION_KEYS:
                raise ConfigError(f"unknown model setting {key!r}", field="model_options")
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{key} must be an integer, got {value!r}", field="model_options")
        checked[model_id] = dict(settings)
    return checked


def _recorded_model_options(config: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """The ``model_options`` a run recorded (``{}`` for a run recorded without them).

    Raises:
        ConfigError: The recorded options are damaged.
    """
    recorded = config.get("model_options")
    if recorded is None:
        return {}
    if not isinstance(recorded, Mapping):
        raise ConfigError("the run's recorded model_options are damaged", field="model_options")
    return checked_model_options(recorded)


def _recorded_subagent_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The isolated-task and workspace settings a run recorded, as `Orchestrator` arguments."""
    settings: dict[str, Any] = {}
    if isinstance(config.get("project_root"), str):
        settings["project_root"] = config["project_root"]
    if isinstance(config.get("workspace_root"), str):
        settings["workspace_root"] = config["workspace_root"]
    if isinstance(config.get("file_caps"), dict):
        settings["file_caps"] = FileCaps(**config["file_caps"])
    rounds = config.get("clarification_rounds")
    if isinstance(rounds, int) and not isinstance(rounds, bool):
        settings["clarification_rounds"] = rounds
    return settings
