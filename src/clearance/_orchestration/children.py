"""Spawned children, as the orchestrator runs them.

**Children** (Loom's spawn/aggregate pattern): a task's ``fan_out`` or its agent's ``spawn``
tool calls create children. Each child gets its own workspace folder under the run's folder
(created exclusively), a goal-only prompt (`ContextBuilder.build_child_prompt`), its agent's
limits and sampling, and its calls charged to its own ``max_model_calls`` and to its
spawner's call budget: the parent task's, or a delegate's (itself within the task's).
Requests and results travel over the `EventBus` with correlation ids (`SpawnWorker`,
`Aggregator`); the parent waits for all of them or until its ``spawn_timeout_s`` (a child
still running is cancelled). What the parent receives is each child's final answer, as a
``child_result:<child id>`` item through the builder; a child that failed or timed out is
shown as such, never passed off as done.

Recorded as events: ``spawn`` (each child's request), ``child`` (its outcome), ``step`` (a
child's session steps) and ``limit_exceeded``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from clearance._agents.aggregator import Aggregator, ChildOutcome
from clearance._agents.caller import CallBudget
from clearance._agents.delegation import DelegationChain
from clearance._agents.session import AgentSession
from clearance._agents.spawn import SpawnRequest, SpawnWorker
from clearance._agents.telemetry import agent_span
from clearance._agents.tools import ToolOutput
from clearance._context.answers import kept_answer
from clearance._context.authority import Authority
from clearance._context.builder import ContextBuilder
from clearance._context.labels import child_result_label, legacy_child_label
from clearance._context.tool_sections import ToolStep
from clearance._context.verify_children import LABELLED_FORMAT, PER_TASK_FORMAT, child_prefix
from clearance._context.verify_children import child_id as make_child_id
from clearance._context.verify_subagents import child_shown
from clearance._core.errors import ApprovalPending, ConfigError, LimitExceeded, ModelError
from clearance._core.prompt import Prompt, sha256_text
from clearance._core.run_spec import PROMPT_FORMAT
from clearance._core.spec import Agent
from clearance._core.task_spec import MAX_GOAL_CHARS
from clearance._core.vocabulary import EventKind
from clearance._orchestration.runtime import AgentRuntime
from clearance._orchestration.task_context import TaskContext
from clearance._state.events import EventBus
from clearance._state.ledger.recorder import record_breach
from clearance.models._base import ChatModel

__all__ = ["ChildRunner", "Spawner", "gather_children"]


@dataclass(frozen=True, slots=True)
class Spawner:
    """The agent that asks for children, as it acts: a task's assignee, or a delegate of it.

    Attributes:
        agent: The spawning agent: its ``can_spawn`` decides which children it may have.
        subject: The subject it runs under (``task:<id>``, or ``delegation:<tool call id>``
            for a delegate), recorded with each spawn so ``verify`` can rebuild whom the
            child acts for.
        authority: Its effective store grants and tools (its own, intersected with those of
            every agent it acts for): the ceiling of its children's (`Authority`).
        above: The agents of the delegation chain it acts in (`DelegationChain.above` of
            each child): no child may delegate to one of them.
        budget: Its call budget (a delegate's own ``max_model_calls``, within its
            delegator's and the task's): each child's calls count toward it too, so what a
            delegation causes stays within the delegate's cap; ``None`` for the task's.
    """

    agent: Agent
    subject: str
    authority: Authority
    above: tuple[str, ...] = ()
    budget: CallBudget | None = None

    @classmethod
    def of_task(cls, parent: TaskContext) -> Spawner:
        """A task's assignee, acting for nobody (a task's ``fan_out``)."""
        return cls(
            agent=parent.agent,
            subject=f"task:{parent.task.id}",
            authority=Authority.of(parent.agent, None),
            above=(parent.agent.name,),
            budget=parent.budget,
        )


class ChildRunner:
    """Spawns and runs the children of a run's tasks, over the run's `EventBus`.

    A child's agent comes from the run's `AgentRuntime` like any other: its tools (only those
    its parent may call too), a store view of at most its parent's grants, its workspace (the
    child's session folder), and the approval gate (a child's call of a tool that needs
    approval is a request of its parent's task: the parent task pauses until a person
    decides, then runs again).

    Args:
        runtime: The run's agent runtime (team, ledger, caller, store, tools, gate).
        builder_for: The run's builder for a model.
    """

    def __init__(
        self, runtime: AgentRuntime, *, builder_for: Callable[[ChatModel], ContextBuilder]
    ) -> None:
        self.runtime = runtime
        self.run_id = runtime.run_id
        self.team = runtime.team
        self.ledger = runtime.ledger
        self.caller = runtime.caller
        self.model_for = runtime.model_for
        self.builder_for = builder_for
        self.prompt_budget = runtime.prompt_budget
        self.bus = EventBus()
        # One worker serves every fan-out of the run: two workers on one bus would both run
        # each requested child.
        self._worker = SpawnWorker(self.bus, self._run_child)
        # Children numbered so far this session, by id prefix (`child_id`): from
        # prompt_format 3 each task's own (a resume gives a task's children the ids they
        # had, whichever tasks run again); run-wide ("") for a run recorded before.
        replay = self.caller.replay
        fmt = replay.prompt_format if replay is not None else PROMPT_FORMAT
        self._per_task = fmt >= PER_TASK_FORMAT
        # From prompt_format 4 a child's result is labelled with its agent and goal.
        self._labelled = fmt >= LABELLED_FORMAT
        self._count: dict[str, int] = {}
        self._pending: dict[str, tuple[TaskContext, Agent, Spawner]] = {}
        self._spawned: dict[str, int] = {}
        self._paused: dict[str, list[str]] = {}  # task id: approval requests its children await
        self._paused_children: set[str] = set()  # children stopped awaiting a person: not ended

    async def fan_out(
        self,
        parent: TaskContext,
        agent_name: str,
        goals: Sequence[str],
        *,
        spawner: Spawner | None = None,
    ) -> list[ChildOutcome]:
        """Run one child of ``agent_name`` per goal, together; return their outcomes.

        The shown result of each (its final answer, or why it has none) is added to
        ``parent.child_results``.

        Args:
            parent: The task the children work for (their results reach its prompt).
            agent_name: The children's agent.
            goals: One goal per child.
            spawner: Who asks for them: ``None`` for the task's assignee, else a delegate
                acting within the task, whose own ``can_spawn``, ``max_children`` and
                effective authority applies (a delegate never spawns more than it may).

        Raises:
            ConfigError: The spawning agent may not spawn ``agent_name`` (``can_spawn``).
            LimitExceeded: The task would have more than its agent's (or the spawning
                agent's, or any agent's it acts for) ``max_children``.
            ApprovalPending: A child called a tool that awaits a person's approval: the
                parent task stops, like any task awaiting approval.
        """
        spawner = spawner or Spawner.of_task(parent)
        agent = spawner.agent
        if agent_name not in agent.can_spawn:
            allowed = ", ".join(agent.can_spawn) or "nobody"
            raise ConfigError(
                f"agent {agent.name!r} may not spawn {agent_name!r} (can_spawn: {allowed})",
                field=f"agents.{agent.name}.can_spawn",
            )
        used = self._spawned.get(parent.task.id, 0)
        # The fewest of the spawning agent's, the task's assignee's and (acting for others)
        # every agent's above it (`Authority.max_children`): a cap is never lent either.
        maximum = min(agent.limits.max_children, parent.agent.limits.max_children)
        if spawner.authority.max_children is not None:
            maximum = min(maximum, spawner.authority.max_children)
        if used + len(goals) > maximum:
            exc = LimitExceeded("max_children", value=used + len(goals), maximum=maximum,
                                subject=f"task:{parent.task.id}")  # fmt: skip
            record_breach(self.ledger, self.run_id, f"task:{parent.task.id}", exc)
            raise exc
        self._spawned[parent.task.id] = used + len(goals)
        child_agent = self.team.agent(agent_name)
        ids: dict[str, str] = {}
        # Tasks whose ids give one prefix (``x:y``, ``x_y``) share its numbers: no two
        # children of a session share an id.
        prefix = child_prefix(parent.task.id) if self._per_task else ""
        for goal in goals:
            self._count[prefix] = number = self._count.get(prefix, 0) + 1
            child_id = make_child_id(parent.task.id, number)  # verify reads it back
            ids[child_id] = goal
            self._pending[child_id] = (parent, child_agent, spawner)
            self.ledger.record_event(self.run_id, EventKind.SPAWN, f"task:{parent.task.id}", {
                "child_id": child_id, "agent": agent_name, "goal": goal,
                "parent_agent": agent.name, "parent_subject": spawner.subject,
            })  # fmt: skip
        timeout = agent.limits.spawn_timeout_s
        self._worker.start()  # subscribes once; later calls do nothing
        result = await Aggregator(self.bus, parent.task.id).fan_out(ids, timeout_s=timeout)
        for outcome in result.outcomes:
            if outcome.child_id in self._paused_children:
                # Not ended: it resumes (its steps replayed) once a person decides. A
                # ``failed`` outcome would have a resume send its answered calls again.
                self._paused_children.discard(outcome.child_id)
                self._pending.pop(outcome.child_id, None)
                continue
            shown = child_shown(outcome.status, outcome.result, outcome.error)
            parent.child_results[outcome.child_id] = shown
            parent.child_labels[outcome.child_id] = (
                child_result_label(outcome.child_id, agent_name, ids[outcome.child_id])
                if self._labelled
                else legacy_child_label(outcome.child_id)
            )
            self.ledger.record_event(self.run_id, EventKind.CHILD, f"task:{parent.task.id}", {
                "child_id": outcome.child_id, "agent": agent_name, "status": outcome.status,
                "result": outcome.result, "error": outcome.error, "shown": shown,
                "shown_sha256": sha256_text(shown),
            })  # fmt: skip
            self._pending.pop(outcome.child_id, None)
        waiting = self._paused.pop(parent.task.id, [])
        if waiting:
            raise ApprovalPending(sorted(set(waiting)))
        return list(result.outcomes)

    async def aclose(self) -> None:
        """Stop serving spawn requests and cancel children still running."""
        await self._worker.aclose()

    async def spawn_calls(
        self,
        parent: TaskContext,
        calls: list[tuple[str, dict[str, Any]]],
        *,
        spawner: Spawner | None = None,
    ) -> dict[str, ToolOutput]:
        """Serve the ``spawn`` tool calls of one model turn (run together).

        ``spawner`` is the agent whose turn it is (``None``: the task's assignee); see
        `fan_out`.

        Returns:
            Each call's tool output: which child it started and how it ended; the child's
            result itself reaches the next prompt as a ``child_result:`` item. A call without
            an agent it may spawn, or a goal (at most `MAX_GOAL_CHARS` characters), is a tool
            error naming what is wrong, and starts (and records) no child.
        """
        by = spawner or Spawner.of_task(parent)
        # A delegate's prompt has no 'Results from subagents' section: it gets each result
        # in its tool output (the task's prompt lists them too, as its children's).
        inline = by.subject != f"task:{parent.task.id}"
        outputs: dict[str, ToolOutput] = {}
        by_agent: dict[str, list[tuple[str, str]]] = {}
        for call_id, arguments in calls:
            target, goal = arguments.get("agent"), arguments.get("goal")
            if not isinstance(target, str) or not isinstance(goal, str) or not goal.strip():
                outputs[call_id] = ToolOutput(
                    content="error: spawn needs 'agent' (a name) and 'goal' (text)", is_error=True
                )
            elif len(goal) > MAX_GOAL_CHARS:  # it would head the child's result: refused whole
                outputs[call_id] = ToolOutput(
                    content=f"error: a spawn goal may have at most {MAX_GOAL_CHARS:,} characters "
                    f"(this one has {len(goal):,}): shorten it",
                    is_error=True,
                )
            elif target not in by.agent.can_spawn:
                allowed = ", ".join(by.agent.can_spawn)
                outputs[call_id] = ToolOutput(
                    content=f"error: {target!r} is not in can_spawn ({allowed})", is_error=True
                )
            else:
                by_agent.setdefault(target, []).append((call_id, goal))
        for target, entries in by_agent.items():
            before = set(parent.child_results)
            outcomes = await self.fan_out(parent, target, [goal for _, goal in entries], spawner=by)
            new = [o for o in outcomes if o.child_id not in before]
            for (call_id, _goal), outcome in zip(entries, new, strict=True):
                ended = f"child {outcome.child_id} ({target}) ended: {outcome.status}"
                where = (
                    f"; its result:\n{parent.child_results[outcome.child_id]}"
                    if inline
                    else "; its result is under 'Results from subagents'"
                )
                outputs[call_id] = ToolOutput(
                    content=ended + where, is_error=outcome.status != "ok"
                )
        return outputs

    async def _run_child(self, request: SpawnRequest) -> str:
        """Run one child: a fresh session in its own workspace, on its goal only.

        With tracing, the child is an ``invoke_agent`` span under its parent's agent span.
        """
        parent, agent, spawner = self._pending[request.child_id]
        subject = f"child:{request.child_id}"
        # Its own max_model_calls, within its spawner's budget (the task's, in the end).
        calls = CallBudget(agent.limits.max_model_calls, subject=subject,
                           within=spawner.budget or parent.budget)  # fmt: skip

        def make(folder: str) -> AgentSession:
            return AgentSession(request.child_id, base_dir=self.runtime.run_dir,
                                goal=request.goal, limits=agent.limits, caller=self.caller,
                                folder=folder)  # fmt: skip

        session = self.runtime.fresh(request.child_id, make, what=f"child {request.child_id}")
        model = self.model_for(agent)
        builder = self.builder_for(model)
        budget = self.prompt_budget(agent, model)
        try:
            with agent_span(run_id=self.run_id, agent=agent.name, subject=subject):
                if agent.uses_tools:
                    answer = await self._child_loop(request, parent, agent, spawner, session,
                                                    calls)  # fmt: skip
                else:
                    prompt = builder.build_child_prompt(
                        request.child_id, request.goal, agent=agent, max_prompt_tokens=budget
                    )
                    response = await session.call_model(
                        model, prompt, subject=subject, budget=calls, agent=agent
                    )
                    # A cut-off answer is marked (and recorded), never passed on as whole.
                    answer = kept_answer(self.ledger, self.run_id, subject, response.text,
                                         finish_reason=response.finish_reason)  # fmt: skip
                    if not answer.strip():
                        raise ModelError("the model returned an empty completion",
                                         model_id=model.model_id)  # fmt: skip
        except LimitExceeded as exc:
            record_breach(self.ledger, self.run_id, subject, exc)
            raise
        except ApprovalPending as exc:
            self._paused.setdefault(parent.task.id, []).extend(exc.call_ids)
            self._paused_children.add(request.child_id)
            raise
        finally:
            self._record_steps(session)
        session.finish(answer)
        return answer

    async def _child_loop(
        self,
        request: SpawnRequest,
        parent: TaskContext,
        agent: Agent,
        spawner: Spawner,
        session: AgentSession,
        calls: CallBudget,
    ) -> str:
        model = self.model_for(agent)
        builder = self.builder_for(model)
        prompt_budget = self.prompt_budget(agent, model)

        def build(specs: tuple[dict[str, Any], ...], steps: list[ToolStep]) -> Prompt:
            return builder.build_child_prompt(request.child_id, request.goal, agent=agent,
                                              tools=specs, tool_steps=steps,
                                              max_prompt_tokens=prompt_budget)  # fmt: skip

        # The runtime's loop, under the spawning agent's effective authority and its task's
        # approvals.
        loop = self.runtime.loop(
            task_id=parent.task.id, budget=calls, workspace=session.workspace,
            ceiling=spawner.authority,
        )  # fmt: skip
        chain = DelegationChain(origin=agent.name, above=spawner.above)
        return await loop.run(agent=agent, subject=f"child:{request.child_id}", chain=chain,
                              build=build)  # fmt: skip

    def _record_steps(self, session: AgentSession) -> None:
        for step in session.steps:
            self.ledger.record_event(self.run_id, EventKind.STEP, f"child:{session.agent_id}", {
                "index": step.index, "kind": step.kind, "ok": step.ok,
                "content_sha256": sha256_text(step.content), "data": dict(step.data),
            })  # fmt: skip


async def gather_children(runner: ChildRunner, ctx: TaskContext) -> None:
    """Run a task's static ``fan_out`` (if any) before its own agent answers."""
    fan_out = ctx.task.fan_out
    if fan_out is not None:
        await runner.fan_out(ctx, fan_out.agent, fan_out.goals)
