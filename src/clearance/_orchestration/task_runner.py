"""`TaskRunner`: one task of a run, from its prompt to its checked result."""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from functools import partial
from typing import Any

from clearance._agents.caller import CallBudget
from clearance._agents.delegation import DelegationChain
from clearance._agents.telemetry import agent_span
from clearance._agents.tools import ToolOutput
from clearance._context.answers import kept_answer
from clearance._context.authority import Authority
from clearance._context.tool_sections import ToolStep
from clearance._core.errors import ModelError, OutputValidationError
from clearance._core.hooks import TaskInfo
from clearance._core.prompt import Prompt, sha256_text
from clearance._core.schema_enum import narrowed_schema
from clearance._core.spec import Agent, Task
from clearance._core.vocabulary import EventKind
from clearance._orchestration.children import Spawner, gather_children
from clearance._orchestration.files import read_task_files
from clearance._orchestration.review_loop import ReviewLoop
from clearance._orchestration.run import Run, RunSettings, prompt_budget
from clearance._orchestration.run_memory import with_memories_that_fit
from clearance._orchestration.steps import run_task_step
from clearance._orchestration.structured import validated_json
from clearance._orchestration.task_context import TaskContext
from clearance._state.queue import TaskStatus

__all__ = ["TaskRunner"]


class TaskRunner:
    """Runs the tasks of one run, each with the context its clearance admits.

    Args:
        settings: What the orchestrator fixes for the run.
        run: The run's state.
    """

    def __init__(self, settings: RunSettings, run: Run) -> None:
        self.settings = settings
        self.run = run

    async def run_task(self, task: Task) -> str:
        """Run one task; a model task in an OpenTelemetry ``invoke_agent`` span (`agent_span`).

        Returns:
            The task's result (for a task with an ``output_schema``, the validated JSON).

        Raises:
            ClearanceError: The task failed (its model, its files, its output's validation...).
            ApprovalPending: The task waits for a person's approval (see `approval.py`).
        """
        run = self.run
        if run.gate is not None:
            await run.gate.check_task(task)  # approval hook
        hooks = run.caller.hooks  # the user's hooks (`RunHooks`)
        if not hooks:  # none to tell: the task alone
            if task.run is not None:  # a non-model step (see `steps.py`)
                return await self._body(task)
            with agent_span(run_id=run.run_id, task_id=task.id, agent=task.assignee):
                return await self._body(task)
        info = TaskInfo(run_id=run.run_id, task_id=task.id, agent=task.assignee)
        await hooks("before_task", info)
        try:
            if task.run is not None:  # a non-model step (see `steps.py`)
                result = await self._body(task)
            else:
                with agent_span(run_id=run.run_id, task_id=task.id, agent=task.assignee):
                    result = await self._body(task)
        except Exception as exc:
            await hooks("after_task", info, result=None, error=str(exc) or type(exc).__name__)
            raise
        await hooks("after_task", info, result=result, error=None)
        return result

    def _body(self, task: Task) -> Coroutine[Any, Any, str]:
        """The task's run: with the memory hook's recall and record if the run has memory.

        A step (``run:``) is not its assignee's model: it recalls and records nothing.
        """
        if self.settings.memory is None or task.run is not None:
            return self._run_task(task)
        return self._remembered(task)

    async def _remembered(self, task: Task) -> str:
        """Memory hook: recall before the task, record its result after (see `RunMemory`)."""
        memory, run, ledger = self.settings.memory, self.run, self.settings.ledger
        assert memory is not None  # see `_body`
        agent, groups = self.settings.team.agent(task.assignee), self.settings.memory_groups
        # The model the agent calls picks the memory's partition (fake or real records).
        model_id = self.settings.model_for(agent).model_id
        await memory.recall(
            run_id=run.run_id, task=task, agent=agent, model_id=model_id, groups=groups,
            ledger=ledger,
        )  # fmt: skip
        result = await self._run_task(task)
        await memory.record(
            run_id=run.run_id, task=task, agent=agent, model_id=model_id, groups=groups,
            result=result, ledger=ledger,
        )  # fmt: skip
        return result

    async def _run_task(self, task: Task) -> str:
        run, settings = self.run, self.settings
        if task.run is not None:  # a non-model task (see `steps.py`)
            return await run_task_step(
                task, queue=run.queue, input_root=settings.input_root, recorder=settings.ledger,
                run_id=run.run_id,
            )  # fmt: skip
        agent = settings.team.agent(task.assignee)
        model = settings.model_for(agent)
        builder = run.builder(model)
        ctx = TaskContext(
            run_id=run.run_id, task=task, agent=agent, model=model, builder=builder,
            queue=run.queue, budget=CallBudget(agent.limits.max_model_calls,
                                               subject=f"task:{task.id}"),
            max_prompt_tokens=prompt_budget(agent, model),
            # Memory hook: the records recalled for this task (`RunMemory.recall`).
            memories=settings.memory.recalled(run.run_id, task.id) if settings.memory else (),
        )  # fmt: skip
        if task.fan_out is not None:
            assert run.children is not None  # made for every graph with a fan-out
            await gather_children(run.children, ctx)
        if task.mode == "isolated":
            assert run.isolated is not None
            try:  # its files are held to isolation.file_caps, as the files it requests are
                return await run.isolated.run(ctx, run.isolated.listed_files(task.files))
            finally:
                run.prompt_tokens[task.id] = ctx.prompt_tokens
        files = None
        if task.files:
            assert settings.input_root is not None  # checked before the run started
            files = read_task_files(settings.input_root, task.files)
        if run.caller.hooks:  # what the user's hooks offer; not offered to isolated tasks
            ctx.hook_items = await self._hook_context(task)
        if task.review is not None:  # rounds of a fresh implementer, then reviewers
            loop = ReviewLoop(settings, run, ctx)
            # A partial, not a lambda: a lambda here would make cells of every task's locals.
            return await loop.run_rounds(partial(self._implement, ctx, files))
        return await self._implement(ctx, files)

    async def _implement(self, ctx: TaskContext, files: Mapping[str, str] | None) -> str:
        """One answer of the assignee (a tool loop, or one call), checked against the schema."""
        task, model = ctx.task, ctx.model
        schema = task.output_schema
        if schema is not None:  # allowed values from prerequisites' results (x-enum-from)
            schema = narrowed_schema(schema, self._dependency_results(task))

        text = await self._attempt(ctx, files, schema)
        if schema is None:
            if not text.strip():
                raise ModelError("the model returned an empty completion", model_id=model.model_id)
            return text
        # A structured hand-off: one repair attempt that shows the rejected answer and why.
        try:
            return validated_json(text, schema, task.output_type)
        except ValueError as exc:
            text = await self._attempt(ctx, files, schema, repair=f"{text}\n\nProblem: {exc}")
        try:
            return validated_json(text, schema, task.output_type)
        except ValueError as exc:
            raise OutputValidationError(task.id, str(exc)) from exc

    async def _attempt(
        self,
        ctx: TaskContext,
        files: Mapping[str, str] | None,
        schema: dict[str, Any] | None,
        repair: str | None = None,
    ) -> str:
        """One answer of the assignee (a method, not a closure: nothing kept per task)."""
        task, agent = ctx.task, ctx.agent
        if agent.uses_tools:
            return await self._run_tool_loop(ctx, files, repair)
        prompt = self._task_prompt(ctx, files, repair)
        response = await self.run.caller.call(
            subject=f"task:{task.id}", agent=agent, model=ctx.model, prompt=prompt,
            json_schema=schema, budget=ctx.budget,
        )  # fmt: skip
        if schema is not None:  # a cut-off JSON answer fails validation and is repaired
            return response.text.strip()
        return self.marked(f"task:{task.id}", response.text, response.finish_reason)

    async def _hook_context(self, task: Task) -> tuple[tuple[str, str, str], ...]:
        """What the user's hooks offer the task's prompt, recorded (event ``hook_context``)."""
        hooks = self.run.caller.hooks
        if not hooks:
            return ()
        info = TaskInfo(run_id=self.run.run_id, task_id=task.id, agent=task.assignee)
        items = await hooks.context(info)
        if items:
            subject, kind = f"task:{task.id}", EventKind.HOOK_CONTEXT
            self.settings.ledger.record_event(self.run.run_id, kind, subject, {
                "items": [{"ref": r, "title": t, "sha256": sha256_text(x)} for r, t, x in items],
            })  # fmt: skip
        return tuple(items)

    def _dependency_results(self, task: Task) -> list[str]:
        """The results of the task's completed direct prerequisites."""
        found = []
        for dep in task.depends_on:
            state = self.run.queue.get(dep)
            if state.status is TaskStatus.COMPLETED and state.result is not None:
                found.append(state.result)
        return found

    def marked(self, subject: str, text: str, finish_reason: str | None) -> str:
        """``text`` with cut-off and repetition marks (see `answers.py`); marks are recorded."""
        return kept_answer(self.settings.ledger, self.run.run_id, subject, text,
                           finish_reason=finish_reason)  # fmt: skip

    def _task_prompt(
        self,
        ctx: TaskContext,
        files: Mapping[str, str] | None,
        repair: str | None,
        tools: tuple[dict[str, Any], ...] = (),
        tool_steps: Sequence[ToolStep] = (),
    ) -> Prompt:
        """Build one attempt's task prompt (with the agent's budgets) and note its size."""
        run = self.run
        prompt = with_memories_that_fit(  # recalled records only as far as there is room
            lambda memories: ctx.builder.build_task_prompt(
                ctx.task,
                agent=ctx.agent,
                queue=run.queue,
                messages=self.settings.messages,
                files=files,
                max_prompt_tokens=ctx.max_prompt_tokens,
                max_dependency_tokens=ctx.agent.limits.max_dependency_tokens,
                repair=repair,
                tools=tools,
                tool_steps=tool_steps,
                child_results=ctx.child_results,
                child_labels=ctx.child_labels,
                memories=memories,
                findings=ctx.findings,
                hook_items=ctx.hook_items,
            ),
            ctx.memories,
        )
        run.prompt_tokens[ctx.task.id] = prompt.manifest.total_tokens
        return prompt

    async def _run_tool_loop(
        self,
        ctx: TaskContext,
        files: Mapping[str, str] | None,
        repair: str | None,
    ) -> str:
        """Run a tool-using agent's loop for one task attempt; return its final answer."""

        def build(specs: tuple[dict[str, Any], ...], steps: list[ToolStep]) -> Prompt:
            return self._task_prompt(ctx, files, repair, specs, steps)

        run = self.run
        children = run.children

        async def spawn(
            agent: Agent, subject: str, authority: Authority, chain: DelegationChain,
            budget: CallBudget | None, calls: list[tuple[str, dict[str, Any]]],
        ) -> dict[str, ToolOutput]:  # fmt: skip
            assert children is not None
            above = (*chain.above, *chain.agents)
            spawner = Spawner(agent=agent, subject=subject, authority=authority, above=above,
                              budget=budget)  # fmt: skip
            return await children.spawn_calls(ctx, calls, spawner=spawner)

        # The run's agent runtime applies every capability (see `runtime.py`).
        assert run.runtime is not None  # made as the run starts
        loop = run.runtime.loop(
            task_id=ctx.task.id, budget=ctx.budget,
            spawn=spawn if children is not None else None,
        )  # fmt: skip
        chain = DelegationChain(origin=ctx.agent.name)
        return await loop.run(
            agent=ctx.agent, subject=f"task:{ctx.task.id}", chain=chain, build=build
        )
