"""Isolated tasks and spawned children, as the orchestrator runs them.

**Isolated tasks** (``mode: isolated``) follow the "fresh subagent per task" controller
pattern (obra/superpowers' subagent-driven development): each dispatch is a fresh prompt
built by `ContextBuilder.build_isolated_task_prompt` from the task's full text, the run's
architectural context, the contents of its files, its constraints and admitted results.
The subagent ends with a ``STATUS:`` line. ``needs_context`` with ``FILE: <path>`` asks for a
project file, served here within confinement and the run's file caps; any other question is
answered by the coordinator (a recorded call whose prompt holds the question and what the
task is cleared for) or, in an interactive run, by the person at the terminal. The subagent
is then dispatched again, fresh, with the answer as a ``clarification:<n>`` item. After
``max_rounds`` rounds the task fails with `SubagentError`.

**Children** (Loom's spawn/aggregate pattern): a task's ``fan_out`` or its agent's ``spawn``
tool calls create children. Each child gets its own workspace folder under the run's folder
(created exclusively), a goal-only prompt (`ContextBuilder.build_child_prompt`), its agent's
limits, and its calls charged to the parent task's call budget. Requests and results travel
over the `EventBus` with correlation ids (`SpawnWorker`, `Aggregator`); the parent waits for
all of them or until its ``spawn_timeout_s`` (a child still running is cancelled). What the
parent receives is each child's final answer, as a ``child_result:<child id>`` item through
the builder; a child that failed or timed out is shown as such, never passed off as done.

Everything is recorded in the ledger as events: ``architecture``, ``clarification`` (each
round), ``spawn`` (each child's request), ``child`` (its outcome), ``step`` (a child's
session steps) and ``limit_exceeded``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clearance._agents.aggregator import Aggregator, ChildOutcome
from clearance._agents.caller import CallBudget, ModelCaller
from clearance._agents.delegation import DelegationChain
from clearance._agents.files import FileCaps, load_text_file
from clearance._agents.loop import AgentLoop
from clearance._agents.session import AgentSession
from clearance._agents.spawn import SpawnRequest, SpawnWorker
from clearance._agents.tools import Tool, ToolOutput
from clearance._context.architecture import ArchitecturalContext
from clearance._context.builder import ContextBuilder
from clearance._context.isolated import parse_status, subagent_result
from clearance._context.tool_sections import ToolStep
from clearance._core.errors import (
    ClearanceError,
    ConfigError,
    LimitExceeded,
    ModelError,
    SubagentError,
)
from clearance._core.prompt import Prompt, sha256_text
from clearance._core.spec import Agent, Task, Team
from clearance._core.vocabulary import ClarificationKind, EventKind
from clearance._state.events import EventBus
from clearance._state.ledger import Recorder
from clearance._state.queue import TaskQueue
from clearance._state.store import ContextStore
from clearance.models._base import ChatModel

__all__ = ["AskPerson", "ChildRunner", "IsolatedRunner", "TaskContext", "gather_children"]

AskPerson = Callable[[str, str], Awaitable[str]]
"""Asks the person at the terminal: ``(task id, question)`` to the answer."""

_FILE_REQUEST = re.compile(r"^\W*file\W*:\s*(\S.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(kw_only=True, slots=True)
class TaskContext:
    """What one task's run needs: its spec, model, builder, run state and call budget.

    Attributes:
        run_id: The run.
        task: The task.
        agent: Its assignee.
        model: The assignee's model.
        builder: The run's builder for that model.
        queue: The run's state.
        budget: The task's model-call budget (children and clarifications included).
        max_prompt_tokens: The assignee's prompt budget, ``None`` for none.
        child_results: Results of the task's children so far (child id → shown text).
        prompt_tokens: Tokens of the task's latest prompt (0 until one is built).
    """

    run_id: str
    task: Task
    agent: Agent
    model: ChatModel
    builder: ContextBuilder
    queue: TaskQueue
    budget: CallBudget
    max_prompt_tokens: int | None
    child_results: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int = 0


class ChildRunner:
    """Spawns and runs the children of a run's tasks, over the run's `EventBus`.

    Args:
        run_id: The run.
        team: The team (children's agents are its agents).
        ledger: Where spawns, outcomes and steps are recorded.
        caller: The run's `ModelCaller`.
        store: The run's context store (children's store tools), or ``None``.
        user_tools: Tools registered with the orchestrator.
        model_for: An agent's model.
        builder_for: The run's builder for a model.
        prompt_budget: An agent's prompt token budget for a model.
        run_dir: The run's folder; each child's workspace is created in it.
    """

    def __init__(
        self,
        *,
        run_id: str,
        team: Team,
        ledger: Recorder,
        caller: ModelCaller,
        store: ContextStore | None,
        user_tools: Mapping[str, Tool],
        model_for: Callable[[Agent], ChatModel],
        builder_for: Callable[[ChatModel], ContextBuilder],
        prompt_budget: Callable[[Agent, ChatModel], int | None],
        run_dir: Path,
    ) -> None:
        self.run_id = run_id
        self.team = team
        self.ledger = ledger
        self.caller = caller
        self.store = store
        self.user_tools = dict(user_tools)
        self.model_for = model_for
        self.builder_for = builder_for
        self.prompt_budget = prompt_budget
        self.run_dir = run_dir
        self.bus = EventBus()
        # One worker serves every fan-out of the run: two workers on one bus would both run
        # each requested child.
        self._worker = SpawnWorker(self.bus, self._run_child)
        self._count = 0
        self._pending: dict[str, tuple[TaskContext, Agent]] = {}
        self._spawned: dict[str, int] = {}

    async def fan_out(
        self, parent: TaskContext, agent_name: str, goals: Sequence[str]
    ) -> list[ChildOutcome]:
        """Run one child of ``agent_name`` per goal, together; return their outcomes.

        The shown result of each (its final answer, or why it has none) is added to
        ``parent.child_results``.

        Raises:
            ConfigError: The parent's agent may not spawn ``agent_name`` (``can_spawn``).
            LimitExceeded: The task would have more than its agent's ``max_children``.
        """
        agent = parent.agent
        if agent_name not in agent.can_spawn:
            allowed = ", ".join(agent.can_spawn) or "nobody"
            raise ConfigError(
                f"agent {agent.name!r} may not spawn {agent_name!r} (can_spawn: {allowed})",
                field=f"agents.{agent.name}.can_spawn",
            )
        used = self._spawned.get(parent.task.id, 0)
        maximum = agent.limits.max_children
        if used + len(goals) > maximum:
            exc = LimitExceeded("max_children", value=used + len(goals), maximum=maximum,
                                subject=f"task:{parent.task.id}")  # fmt: skip
            self._record_breach(f"task:{parent.task.id}", exc)
            raise exc
        self._spawned[parent.task.id] = used + len(goals)
        child_agent = self.team.agent(agent_name)
        ids: dict[str, str] = {}
        for goal in goals:
            self._count += 1
            child_id = f"{_SLUG.sub('_', parent.task.id)}.{self._count}"
            ids[child_id] = goal
            self._pending[child_id] = (parent, child_agent)
            self.ledger.record_event(self.run_id, EventKind.SPAWN, f"task:{parent.task.id}", {
                "child_id": child_id, "agent": agent_name, "goal": goal,
                "parent_agent": agent.name,
            })  # fmt: skip
        timeout = agent.limits.spawn_timeout_s
        self._worker.start()  # subscribes once; later calls do nothing
        result = await Aggregator(self.bus, parent.task.id).fan_out(ids, timeout_s=timeout)
        for outcome in result.outcomes:
            shown = outcome.result if outcome.status == "ok" else _missing(outcome)
            parent.child_results[outcome.child_id] = shown
            self.ledger.record_event(self.run_id, EventKind.CHILD, f"task:{parent.task.id}", {
                "child_id": outcome.child_id, "agent": agent_name, "status": outcome.status,
                "result": outcome.result, "error": outcome.error, "shown": shown,
                "shown_sha256": sha256_text(shown),
            })  # fmt: skip
            self._pending.pop(outcome.child_id, None)
        return list(result.outcomes)

    async def aclose(self) -> None:
        """Stop serving spawn requests and cancel children still running."""
        await self._worker.aclose()

    async def spawn_calls(
        self, parent: TaskContext, calls: list[tuple[str, dict[str, Any]]]
    ) -> dict[str, ToolOutput]:
        """Serve the ``spawn`` tool calls of one model turn (run together).

        Returns:
            Each call's tool output: which child it started and how it ended; the child's
            result itself reaches the next prompt as a ``child_result:`` item.
        """
        outputs: dict[str, ToolOutput] = {}
        by_agent: dict[str, list[tuple[str, str]]] = {}
        for call_id, arguments in calls:
            target, goal = arguments.get("agent"), arguments.get("goal")
            if not isinstance(target, str) or not isinstance(goal, str) or not goal.strip():
                outputs[call_id] = ToolOutput(
                    content="error: spawn needs 'agent' (a name) and 'goal' (text)", is_error=True
                )
            elif target not in parent.agent.can_spawn:
                allowed = ", ".join(parent.agent.can_spawn)
                outputs[call_id] = ToolOutput(
                    content=f"error: {target!r} is not in can_spawn ({allowed})", is_error=True
                )
            else:
                by_agent.setdefault(target, []).append((call_id, goal))
        for target, entries in by_agent.items():
            before = set(parent.child_results)
            outcomes = await self.fan_out(parent, target, [goal for _, goal in entries])
            new = [o for o in outcomes if o.child_id not in before]
            for (call_id, _goal), outcome in zip(entries, new, strict=True):
                outputs[call_id] = ToolOutput(
                    content=f"child {outcome.child_id} ({target}) ended: {outcome.status}; "
                    "its result is under 'Results from subagents'",
                    is_error=outcome.status != "ok",
                )
        return outputs

    async def _run_child(self, request: SpawnRequest) -> str:
        """Run one child: a fresh session in its own workspace, on its goal only."""
        parent, agent = self._pending[request.child_id]
        session = AgentSession(request.child_id, base_dir=self.run_dir, goal=request.goal,
                               limits=agent.limits, caller=self.caller)  # fmt: skip
        model = self.model_for(agent)
        builder = self.builder_for(model)
        budget = self.prompt_budget(agent, model)
        subject = f"child:{request.child_id}"
        try:
            if agent.uses_tools:
                answer = await self._child_loop(request, agent, session, parent.budget)
            else:
                prompt = builder.build_child_prompt(request.child_id, request.goal, agent=agent,
                                                    max_prompt_tokens=budget)  # fmt: skip
                response = await session.call_model(
                    model, prompt, subject=subject, budget=parent.budget
                )
                answer = response.text.strip()
                if not answer:
                    raise ModelError("the model returned an empty completion",
                                     model_id=model.model_id)  # fmt: skip
        except LimitExceeded as exc:
            self._record_breach(subject, exc)
            raise
        finally:
            self._record_steps(session)
        session.finish(answer)
        return answer

    async def _child_loop(
        self, request: SpawnRequest, agent: Agent, session: AgentSession, budget: CallBudget
    ) -> str:
        model = self.model_for(agent)
        builder = self.builder_for(model)
        prompt_budget = self.prompt_budget(agent, model)

        def build(specs: tuple[dict[str, Any], ...], steps: list[ToolStep]) -> Prompt:
            return builder.build_child_prompt(request.child_id, request.goal, agent=agent,
                                              tools=specs, tool_steps=steps,
                                              max_prompt_tokens=prompt_budget)  # fmt: skip

        loop = AgentLoop(
            run_id=self.run_id, team=self.team, ledger=self.ledger, store=self.store,
            user_tools=self.user_tools, model_for=self.model_for, caller=self.caller,
            call_budget=budget, budget=self.prompt_budget, workspace=session.workspace,
        )  # fmt: skip
        chain = DelegationChain(origin=agent.name)
        return await loop.run(agent=agent, subject=f"child:{request.child_id}", chain=chain,
                              build=build)  # fmt: skip

    def _record_steps(self, session: AgentSession) -> None:
        for step in session.steps:
            self.ledger.record_event(self.run_id, EventKind.STEP, f"child:{session.agent_id}", {
                "index": step.index, "kind": step.kind, "ok": step.ok,
                "content_sha256": sha256_text(step.content), "data": dict(step.data),
            })  # fmt: skip

    def _record_breach(self, subject: str, exc: LimitExceeded) -> None:
        self.ledger.record_event(self.run_id, EventKind.LIMIT_EXCEEDED, subject, {
            "limit": exc.limit, "value": exc.value, "maximum": exc.maximum, "error": str(exc),
        })  # fmt: skip


def _missing(outcome: ChildOutcome) -> str:
    """What a parent is shown for a child without a result: never passed off as done."""
    return f"[no result: the child {outcome.status.replace('_', ' ')}: {outcome.error}]"


class IsolatedRunner:
    """Runs the isolated tasks of one run (see the module docstring).

    Args:
        run_id: The run.
        ledger: Where clarification rounds are recorded.
        caller: The run's `ModelCaller`.
        architecture: The run's architectural context (computed once), or ``None``.
        project_root: The folder file requests are served from, or ``None`` for none.
        file_caps: Size caps on one task's files, requested ones included.
        max_rounds: Most clarification rounds before the task fails.
        coordinator: The agent that answers questions.
        coordinator_model: Its model.
        coordinator_builder: The run's builder for that model.
        coordinator_budget: Its prompt token budget.
        ask_person: Asks the person at the terminal instead of the coordinator, or ``None``.
    """

    def __init__(
        self,
        *,
        run_id: str,
        ledger: Recorder,
        caller: ModelCaller,
        architecture: ArchitecturalContext | None,
        project_root: Path | None,
        file_caps: FileCaps,
        max_rounds: int,
        coordinator: Agent,
        coordinator_model: ChatModel,
        coordinator_builder: ContextBuilder,
        coordinator_budget: int | None,
        ask_person: AskPerson | None = None,
    ) -> None:
        self.run_id = run_id
        self.ledger = ledger
        self.caller = caller
        self.architecture = architecture
        self.project_root = project_root
        self.file_caps = file_caps
        self.max_rounds = max_rounds
        self.coordinator = coordinator
        self.coordinator_model = coordinator_model
        self.coordinator_builder = coordinator_builder
        self.coordinator_budget = coordinator_budget
        self.ask_person = ask_person

    async def run(self, ctx: TaskContext, files: Mapping[str, str]) -> str:
        """Dispatch fresh subagents until one answers ``done`` (or the rounds run out).

        Returns:
            The answer without its status and question lines (``done_with_concerns``: the
            concerns follow after a ``Concerns:`` line).

        Raises:
            SubagentError: The subagent is blocked, or still needs context after
                ``max_rounds`` rounds.
            LimitExceeded: A limit of a call, a prompt over budget, or the task's calls.
            ModelError: The model failed.
        """
        task = ctx.task
        files = dict(files)
        self.ledger.record_event(self.run_id, EventKind.FILES, f"task:{task.id}", {
            "files": {path: sha256_text(text) for path, text in files.items()},
        })  # fmt: skip
        clarifications: list[str] = []
        for round_no in range(self.max_rounds + 1):
            prompt = ctx.builder.build_isolated_task_prompt(
                task, agent=ctx.agent, queue=ctx.queue, architecture=self.architecture,
                files=files, clarifications=clarifications, child_results=ctx.child_results,
                max_prompt_tokens=ctx.max_prompt_tokens,
                max_dependency_tokens=ctx.agent.limits.max_dependency_tokens,
            )  # fmt: skip
            ctx.prompt_tokens = prompt.manifest.total_tokens
            response = await self.caller.call(subject=f"isolated:{task.id}", agent=ctx.agent,
                                              model=ctx.model, prompt=prompt,
                                              budget=ctx.budget)  # fmt: skip
            status, result, question, concerns = parse_status(response.text)
            if status == "done" or status == "done_with_concerns":
                if not result.strip():
                    raise ModelError("the subagent's answer is empty", model_id=ctx.model.model_id)
                answer = subagent_result(response.text)
                assert answer is not None
                return answer
            if status == "blocked":
                raise SubagentError(task.id, "blocked", concerns or result or "no reason given")
            asked = question or "(no question given)"
            if round_no == self.max_rounds:
                raise SubagentError(task.id, "needs_context",
                                    f"{asked} (after {self.max_rounds} rounds)")  # fmt: skip
            answer = await self._answer(ctx, asked, files, round_no + 1)
            if answer is not None:
                clarifications.append(answer)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _answer(
        self, ctx: TaskContext, question: str, files: dict[str, str], round_no: int
    ) -> str | None:
        """Serve a file request (``None``: the file joins ``files``) or answer a question."""
        task = ctx.task
        match = _FILE_REQUEST.search(question)
        subject = f"task:{task.id}"
        if match is not None:
            path = match.group(1).strip().strip("'\"`")
            reason = self._serve_file(path, files)
            answer = None if reason is None else f"The file {path!r} cannot be given: {reason}"
            self.ledger.record_event(self.run_id, EventKind.CLARIFICATION, subject, {
                "round": round_no, "kind": ClarificationKind.FILE, "path": path,
                "served": reason is None,
                "sha256": sha256_text(files[path]) if reason is None else None,
                "answer": answer,
            })  # fmt: skip
            return answer
        if self.ask_person is not None:
            answer, by = (await self.ask_person(task.id, question)).strip(), "person"
        else:
            prompt = self.coordinator_builder.build_clarification_prompt(
                task, question, coordinator=self.coordinator, queue=ctx.queue,
                max_prompt_tokens=self.coordinator_budget,
                max_dependency_tokens=self.coordinator.limits.max_dependency_tokens,
            )  # fmt: skip
            response = await self.caller.call(
                subject=f"clarification:{task.id}", agent=self.coordinator,
                model=self.coordinator_model, prompt=prompt, budget=ctx.budget,
            )  # fmt: skip
            answer, by = response.text.strip(), "coordinator"
        answer = answer or "(no answer was given)"
        self.ledger.record_event(self.run_id, EventKind.CLARIFICATION, subject, {
            "round": round_no, "kind": ClarificationKind.QUESTION, "question": question,
            "answer": answer, "answered_by": by,
        })  # fmt: skip
        return answer

    def _serve_file(self, path: str, files: dict[str, str]) -> str | None:
        """Load ``path`` into ``files`` within confinement and caps; why not, or ``None``."""
        if self.project_root is None:
            return "the run has no project folder"
        if path in files:
            return "it is already above"
        used = sum(len(c.encode("utf-8")) for c in files.values())
        try:
            text = load_text_file(self.project_root, path, caps=self.file_caps,
                                  budget=self.file_caps.max_total_bytes - used)  # fmt: skip
        except ClearanceError as exc:
            return str(exc)
        files[path] = text
        return None


async def gather_children(runner: ChildRunner, ctx: TaskContext) -> None:
    """Run a task's static ``fan_out`` (if any) before its own agent answers."""
    fan_out = ctx.task.fan_out
    if fan_out is not None:
        await runner.fan_out(ctx, fan_out.agent, fan_out.goals)
