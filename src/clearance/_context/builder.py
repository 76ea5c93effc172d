"""`ContextBuilder`: the one place where prompts are made.

Every byte that reaches a model passes through here. The builder admits an item only when
the task's `Clearance` allows its origin, renders each item in its own fenced block, and
returns a `Prompt` whose `ContextManifest` lists each item's origin and token count.
Budgets are enforced with `LimitExceeded`, never by silent truncation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from clearance._context.architecture import ArchitecturalContext
from clearance._context.clearance import Clearance
from clearance._context.isolated import (
    ISOLATED_TRAILER,
    SECTION_CHILDREN,
    SECTION_CONSTRAINTS,
    IsolatedContext,
)
from clearance._context.memory_items import (
    CONVERSATION_TRAILER,
    MEMORY_SECTION,
    SUMMARY_PROMPT,
    TURNS_SECTION,
    memory_title,
    turn_title,
)
from clearance._context.render import fence_block, one_line, render_parts
from clearance._context.tool_sections import (
    DELEGATED_SECTION,
    TOOL_RESULTS_SECTION,
    TOOL_TRAILER,
    TOOLS_SECTION,
    ToolStep,
    store_heading,
    tool_heading,
    tool_spec_text,
)
from clearance._core.errors import ContextViolation, DependencyPayloadError, LimitExceeded
from clearance._core.memory_spec import memory_scopes_of
from clearance._core.prompt import (
    ChatMessage,
    ContextItem,
    ContextManifest,
    Prompt,
    messages_sha256,
)
from clearance._core.spec import Agent, Task
from clearance._state.messages import MessageBus
from clearance._state.queue import TaskQueue, TaskStatus
from clearance._state.shared_memory import SharedMemory

if TYPE_CHECKING:
    from clearance._state.conversation import Turn
    from clearance._state.memory import MemoryRecord

__all__ = ["ContextBuilder", "TokenCounter"]

TokenCounter = Callable[[str], int]
"""A function returning how many tokens a text takes for the target model."""

TASK_TRAILER = "Complete the task above. Reply with your result only."
SYNTHESIS_TRAILER = (
    "Write the final answer to the goal, using the task results above. Say which results "
    "you relied on, and mention any failed or skipped task whose result is missing."
)
SYNTHESIS_MAP = "synthesis_map"
"""Subject prefix of a hierarchical synthesis' map steps (``synthesis_map:<n>``)."""
SUMMARIES_SECTION = "## Summaries of completed tasks"
SYNTHESIS_MAP_TRAILER = (
    "Summarize the material above for the final answer to the goal. Keep every fact, figure "
    "and conclusion the goal needs, say which task each comes from, and leave out the rest."
)
SYNTHESIS_REDUCE_TRAILER = (
    "Write the final answer to the goal, using the summaries of the task results above. Say "
    "which tasks you relied on, and mention any failed or skipped task whose result is missing."
)
PLAN_INSTRUCTIONS = (
    "You are planning work for a team. Break the goal into a small number of tasks, each "
    "assigned to one team member by name. A task lists the ids of the tasks whose results it "
    "needs in depends_on; tasks without dependencies run in parallel. Reply with JSON only, "
    'of the form {"tasks": [{"id": "...", "title": "...", "description": "...", '
    '"assignee": "...", "depends_on": ["..."]}]}.'
)


SECTION_RESULTS = "## Context from prerequisite tasks"
FAILED_PREREQUISITES = "## Prerequisite tasks that did not complete"
QUESTION_SECTION = "## Question from the subagent"
CHILD_GOAL_SECTION = "# Your goal"
CLARIFICATION_TRAILER = (
    "A subagent working on the task above asked the question above. Answer it from the "
    "material above, briefly and precisely. If the material does not hold the answer, say so."
)

_Block = tuple[ContextItem, str]
"""An admitted item and its block, rendered (`render_block`)."""


class _Section(NamedTuple):
    heading: str
    blocks: tuple[_Block, ...]


class ContextBuilder:
    """Builds every prompt of a run, admitting only what each task is cleared to see.

    Prompt layout: the system message holds the agent's instructions. The user message holds
    ``# Task`` (the task's own text), then ``## Files``, ``## Context from prerequisite
    tasks`` (one block per admitted result, headed ``### <title> (by <assignee>)``), and
    ``## Messages from team members``; on the repair attempt of a structured hand-off, a last
    section ``## Your previous answer was rejected``. Each block is fenced (see
    `render_block`).

    Long-term memory records (``memory:<id>``) enter only in a ``## From memory`` section,
    admitted when their scope is in the prompt's clearance (the agent's own, or a declared
    memory group it belongs to).

    A task's result usually enters several prompts (each dependent's, then the synthesis).
    A builder renders it once: it keeps the block of each result it rendered and renders
    the result again only if its text or heading changed. Use one builder per run and
    token counter; the kept blocks hold about as much text as the results themselves.

    Args:
        count_tokens: Token counter of the target model (see `clearance.tokens`); manifests
            and budgets use it.
        memory_groups: ``{group name: members}`` declared in the team file; ``None`` for none.
    """

    def __init__(
        self,
        *,
        count_tokens: TokenCounter,
        memory_groups: Mapping[str, Iterable[str]] | None = None,
    ):
        self._count = count_tokens
        self._memory_groups = {g: frozenset(m) for g, m in (memory_groups or {}).items()}
        # ``task_result:<id>`` -> (heading, content, block): see `_result_block`.
        self._results: dict[str, tuple[str, str, _Block]] = {}

    # -- public builders ---------------------------------------------------------------

    def build_task_prompt(
        self,
        task: Task,
        *,
        agent: Agent,
        queue: TaskQueue,
        messages: MessageBus | None = None,
        files: Mapping[str, str] | None = None,
        max_prompt_tokens: int | None = None,
        max_dependency_tokens: int | None = None,
        repair: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
        tool_steps: Sequence[ToolStep] = (),
        memories: Sequence[MemoryRecord] = (),
        child_results: Mapping[str, str] | None = None,
    ) -> Prompt:
        """Build the prompt of one task: its text plus exactly what its clearance admits.

        Results are read from ``queue`` (completed tasks only), never from `SharedMemory`.
        Without dependencies and messages the prompt is a clean slate: instructions and task.
        A result is never truncated: one over ``max_dependency_tokens`` fails the build.

        Args:
            task: The task; it must belong to ``queue.graph``.
            agent: Its assignee (``agent.name == task.assignee``).
            queue: The run's state; results of completed tasks come from here.
            messages: The team's message bus; messages addressed to the assignee are admitted.
            files: Contents of files by path; only the task's listed ``files`` are admitted.
            max_prompt_tokens: Token budget of the whole prompt, ``None`` for no limit.
            max_dependency_tokens: Most tokens each admitted result (``task_result:<id>``)
                may hold, counted on the result text with ``count_tokens``; ``None`` for no
                limit.
            repair: For the repair attempt of a task with an ``output_schema``: the rejected
                answer, a blank line, then ``Problem: <why it was rejected>``. Rendered as
                the last section, ``## Your previous answer was rejected``, in one block
                with origin ``repair:<task id>``. ``None`` on a first attempt.
            tools: For a tool-using agent, its tools (OpenAI function format), listed under
                ``## Tools you can call`` (origin ``tool_spec:<name>``); the prompt then
                closes with the tool-using trailer.
            tool_steps: The agent's finished tool calls, in order, under ``## Results of your
                tool calls``: per call a block ``tool:<call id>``, then one block
                ``store:<namespace>/<key>`` per store entry it read.
            memories: Long-term memory records retrieved for this task; each must be in the
                clearance's ``memory_scopes``. Rendered under ``## From memory``.
            child_results: Final results of the children this task spawned (child id →
                text, as aggregated), under ``## Results from subagents`` (origin
                ``child_result:<child id>``); never the children's steps.

        Returns:
            The prompt, with a manifest of every admitted item.

        Raises:
            ContextViolation: An offered item is outside the task's clearance (for example a
                file the task does not list, an agent that is not the assignee, or another
                agent's memory).
            DependencyPayloadError: An admitted result exceeds ``max_dependency_tokens``; the
                error names the dependency, its size and the limit.
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        clearance = Clearance.for_task(
            queue.graph, task.id, agent=agent, memory_groups=self._memory_groups
        )
        if child_results:
            clearance = replace(clearance, children=frozenset(child_results))
        if agent.name != task.assignee:
            raise ContextViolation(task.id, f"instructions:{agent.name}")
        subject = f"task:{task.id}"
        task_item = self._block(
            f"task:{task.id}", f"{task.title} (task {task.id})", task.description
        )

        file_blocks = []
        for path, content in (files or {}).items():
            origin = f"file:{path}"
            if not clearance.admits(origin):
                raise ContextViolation(task.id, origin)
            file_blocks.append(self._block(origin, path, content))

        result_blocks = self._result_blocks(task, clearance, queue, max_dependency_tokens)
        failed_blocks = self._failed_blocks(task, clearance, queue)

        message_blocks = []
        for message in messages.for_agent(agent.name) if messages else ():
            origin = f"message:{message.id}"
            if not clearance.admits(origin, message=message):
                raise ContextViolation(task.id, origin)
            message_blocks.append(
                self._block(origin, f"From {message.sender} ({message.id})", message.content)
            )

        sections = [
            _Section("# Task", (task_item,)),
            _Section("## Files", tuple(file_blocks)),
            _Section("## Context from prerequisite tasks", tuple(result_blocks)),
            _Section(FAILED_PREREQUISITES, failed_blocks),
            _Section("## Messages from team members", tuple(message_blocks)),
            _Section(MEMORY_SECTION, self._memory_blocks(clearance, task.id, memories)),
            _Section(SECTION_CHILDREN, self._child_blocks(task.id, clearance, child_results)),
        ]
        if repair is not None:
            origin = f"repair:{task.id}"
            if not clearance.admits(origin):  # pragma: no cover - a task's own repair
                raise ContextViolation(task.id, origin)
            sections.append(
                _Section(
                    "## Your previous answer was rejected",
                    (self._block(origin, "Previous answer and validation error", repair),),
                )
            )
        sections.extend(self._tool_sections(clearance, tools, tool_steps))
        return self._assemble(
            subject,
            agent,
            sections,
            TOOL_TRAILER if tools else TASK_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
            clearance=clearance,
        )

    def build_delegation_prompt(
        self,
        tool_call_id: str,
        task_text: str,
        *,
        agent: Agent,
        tools: Sequence[dict[str, Any]] = (),
        tool_steps: Sequence[ToolStep] = (),
        max_prompt_tokens: int | None = None,
    ) -> Prompt:
        """Build a delegate's prompt: a fresh context holding the delegated task text only.

        Nothing of the delegator's task, context or conversation enters: the user message
        holds ``# Delegated task`` (origin ``delegation:<tool call id>``), then the delegate's
        own tools and tool results (see `build_task_prompt`). The manifest's subject is
        ``delegation:<tool call id>``.

        Args:
            tool_call_id: The ``delegate`` call this run serves.
            task_text: The delegated task, verbatim.
            agent: The delegate.
            tools: The delegate's tools (OpenAI function format).
            tool_steps: The delegate's finished tool calls.
            max_prompt_tokens: Token budget, ``None`` for no limit.

        Raises:
            ContextViolation: A tool result is outside the delegate's clearance (a store
                entry of a namespace it may not read).
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        clearance = Clearance.for_delegation(tool_call_id, agent)
        origin = f"delegation:{tool_call_id}"
        sections = [_Section(DELEGATED_SECTION, (self._block(origin, "Task", task_text),))]
        sections.extend(self._tool_sections(clearance, tools, tool_steps))
        return self._assemble(
            origin,
            agent,
            sections,
            TOOL_TRAILER if tools else TASK_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
            clearance=clearance,
        )

    def _tool_sections(
        self,
        clearance: Clearance,
        tools: Sequence[dict[str, Any]],
        tool_steps: Sequence[ToolStep],
    ) -> list[_Section]:
        """The ``## Tools you can call`` and ``## Results of your tool calls`` sections."""
        if not tools and not tool_steps:
            return []  # both would be empty, and empty sections are left out
        subject = clearance.task_id
        spec_blocks = []
        for spec in tools:
            name = str(spec["function"]["name"])
            origin = f"tool_spec:{name}"
            if not clearance.admits(origin):
                raise ContextViolation(subject, origin)
            spec_blocks.append(self._block(origin, name, tool_spec_text(spec)))
        result_blocks = []
        for step in tool_steps:
            origin = f"tool:{step.call_id}"
            if not clearance.admits(origin):
                raise ContextViolation(subject, origin)
            result_blocks.append(self._block(origin, tool_heading(step), step.content))
            for entry in step.store_reads:
                origin = f"store:{entry.namespace}/{entry.key}"
                if not clearance.admits_store(entry.namespace):
                    raise ContextViolation(subject, origin)
                result_blocks.append(self._block(origin, store_heading(entry), entry.value))
        return [
            _Section(TOOLS_SECTION, tuple(spec_blocks)),
            _Section(TOOL_RESULTS_SECTION, tuple(result_blocks)),
        ]

    def build_synthesis_prompt(
        self,
        goal: str,
        *,
        coordinator: Agent,
        queue: TaskQueue,
        shared_memory: SharedMemory,
        max_prompt_tokens: int | None = None,
        include: Collection[str] | None = None,
    ) -> Prompt:
        """Build the coordinator's synthesis prompt: the full view of the run.

        Holds the goal, every completed result (untruncated) or those of ``include``, every
        failed and skipped task with its reason, and the shared memory's summary (in graph
        order) of the tasks whose result or reason is not already shown, so each result
        enters the prompt once.

        Args:
            goal: What the synthesis answers.
            coordinator: The agent that writes it.
            queue: The run's state.
            shared_memory: The run's shared memory.
            max_prompt_tokens: Token budget, ``None`` for no limit.
            include: Ids of the tasks whose results are shown (the team file's
                ``synthesis_from``); ``None`` for all. The other completed tasks are left
                out, from the summary too.

        Raises:
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        completed, failed, skipped, memory = self._synthesis_view(queue, shared_memory, include)
        sections = [
            _Section("# Goal", (self._block("goal", "Goal", goal),)),
            _Section("## Completed tasks", completed),
            _Section("## Failed tasks", failed),
            _Section("## Skipped tasks", skipped),
            _Section("## Shared memory", memory),
        ]
        return self._assemble(
            "synthesis",
            coordinator,
            sections,
            SYNTHESIS_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
        )

    def build_synthesis_map_prompt(
        self,
        step: int,
        goal: str,
        *,
        coordinator: Agent,
        queue: TaskQueue,
        task_ids: Sequence[str] = (),
        summaries: Mapping[int, str] | None = None,
        max_prompt_tokens: int | None = None,
    ) -> Prompt:
        """Build one map step of a hierarchical synthesis: the goal and one group to summarize.

        Used when the full view does not fit the coordinator's budget. The user message holds
        ``# Goal``, then ``## Completed tasks`` (the results of ``task_ids``, origin
        ``task_result:<id>``, each untruncated) and ``## Summaries of completed tasks``
        (earlier map steps' summaries, origin ``summary_of:<step>``), then a request to
        summarize them. Subject ``synthesis_map:<step>``; the manifest's clearance lists
        exactly the results and summaries the step may hold.

        Args:
            step: The map step's number (from 1, unique in the run).
            goal: What the synthesis answers.
            coordinator: The agent that writes the summary.
            queue: The run's state; each of ``task_ids`` must be completed.
            task_ids: Tasks whose results the step summarizes, in graph order.
            summaries: Earlier map steps' summaries by step number (a summary of summaries).
            max_prompt_tokens: Token budget, ``None`` for no limit.

        Raises:
            ContextViolation: A task of ``task_ids`` is not completed.
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        subject = f"{SYNTHESIS_MAP}:{step}"
        results = []
        for tid in task_ids:
            state = queue.get(tid)
            if state.status is not TaskStatus.COMPLETED:
                raise ContextViolation(subject, f"task_result:{tid}")
            results.append(self._synthesis_result(state.task, state.result or ""))
        kept = dict(summaries or {})
        sections = [
            _Section("# Goal", (self._block("goal", "Goal", goal),)),
            _Section("## Completed tasks", tuple(results)),
            _Section(SUMMARIES_SECTION, self._summary_blocks(kept)),
        ]
        step_clearance = {"step": subject, "task_results": list(task_ids), "summaries": list(kept)}
        return self._assemble(
            subject,
            coordinator,
            sections,
            SYNTHESIS_MAP_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
            clearance_dict=step_clearance,
        )

    def build_synthesis_reduce_prompt(
        self,
        goal: str,
        *,
        coordinator: Agent,
        queue: TaskQueue,
        shared_memory: SharedMemory,
        summaries: Mapping[int, str],
        max_prompt_tokens: int | None = None,
        include: Collection[str] | None = None,
    ) -> Prompt:
        """Build the reduce step of a hierarchical synthesis: the goal and the map summaries.

        As `build_synthesis_prompt`, with ``## Summaries of completed tasks`` (origin
        ``summary_of:<step>``, each the response of map step ``<step>``) in place of the
        completed results; failed and skipped tasks and the shared memory are shown as there.
        Subject ``synthesis``; the manifest's clearance lists the summaries.

        Args:
            goal: What the synthesis answers.
            coordinator: The agent that writes it.
            queue: The run's state.
            shared_memory: The run's shared memory.
            summaries: The last map steps' summaries by step number.
            max_prompt_tokens: Token budget, ``None`` for no limit.
            include: As in `build_synthesis_prompt`.

        Raises:
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        _, failed, skipped, memory = self._synthesis_view(queue, shared_memory, include)
        kept = dict(summaries)
        sections = [
            _Section("# Goal", (self._block("goal", "Goal", goal),)),
            _Section(SUMMARIES_SECTION, self._summary_blocks(kept)),
            _Section("## Failed tasks", failed),
            _Section("## Skipped tasks", skipped),
            _Section("## Shared memory", memory),
        ]
        return self._assemble(
            "synthesis",
            coordinator,
            sections,
            SYNTHESIS_REDUCE_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
            clearance_dict={"step": "synthesis", "task_results": [], "summaries": list(kept)},
        )

    def synthesis_result_tokens(self, queue: TaskQueue, task_id: str) -> int:
        """Tokens of a completed task's block in a synthesis prompt (heading and fence too)."""
        state = queue.get(task_id)
        return self._synthesis_result(state.task, state.result or "")[0].tokens

    def summary_tokens(self, step: int, text: str) -> int:
        """Tokens of map step ``step``'s summary as a block of a later synthesis prompt."""
        return self._summary_blocks({step: text})[0][0].tokens

    def _synthesis_result(self, task: Task, result: str) -> _Block:
        return self._result_block(f"task_result:{task.id}", f"{task.title} (by {task.assignee})",
                                  result)  # fmt: skip

    def _summary_blocks(self, summaries: Mapping[int, str]) -> tuple[_Block, ...]:
        return tuple(
            self._block(f"summary_of:{step}", f"Summary {step}", text)
            for step, text in summaries.items()
        )

    def _synthesis_view(
        self, queue: TaskQueue, shared_memory: SharedMemory, include: Collection[str] | None
    ) -> tuple[tuple[_Block, ...], tuple[_Block, ...], tuple[_Block, ...], tuple[_Block, ...]]:
        """The synthesis' completed, failed and skipped blocks, and its shared-memory block."""
        completed, failed, skipped = [], [], []
        shown: set[str] = set()
        for state in queue.states():
            t = state.task
            heading = f"{t.title} (by {t.assignee})"
            if state.status.is_final:
                shown.add(t.id)
            if state.status is TaskStatus.COMPLETED:
                if include is not None and t.id not in include:
                    continue
                completed.append(self._synthesis_result(t, state.result or ""))
            elif state.status is TaskStatus.FAILED:
                failed.append(self._block(f"task_status:{t.id}", heading, state.error or "failed"))
            elif state.status is TaskStatus.SKIPPED:
                skipped.append(
                    self._block(f"task_status:{t.id}", heading, state.error or "skipped")
                )
        # In graph order: the prompt must not depend on which concurrent task finished first.
        summary = shared_memory.get_summary(
            [s.task.id for s in queue.states() if s.task.id not in shown]
        )
        memory = (
            (self._block("shared_memory", "Summary of all results", summary),) if summary else ()
        )
        return tuple(completed), tuple(failed), tuple(skipped), memory

    def build_plan_prompt(
        self,
        goal: str,
        *,
        coordinator: Agent,
        roster: Sequence[Agent],
        feedback: str | None = None,
        max_prompt_tokens: int | None = None,
    ) -> Prompt:
        """Build the coordinator's planning prompt: the goal and a bounded roster.

        The roster gives each agent's name and short role summary, never its instructions.

        Args:
            goal: What the team must achieve.
            coordinator: The planning agent.
            roster: The agents tasks may be assigned to.
            feedback: For the repair attempt: the previous answer and why it was rejected.
            max_prompt_tokens: Token budget, ``None`` for no limit.

        Raises:
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        roster_blocks = tuple(self._block(f"agent:{a.name}", a.name, a.summary) for a in roster)
        sections = [
            _Section("# Goal", (self._block("goal", "Goal", goal),)),
            _Section("## Team members", roster_blocks),
        ]
        if feedback is not None:
            sections.append(
                _Section(
                    "## Your previous plan was rejected",
                    (self._block("plan_feedback", "What was wrong", feedback),),
                )
            )
        example = json.dumps(
            {
                "tasks": [
                    {
                        "id": "t1",
                        "title": "...",
                        "description": "...",
                        "assignee": roster[0].name if roster else "...",
                        "depends_on": [],
                    }
                ]
            }
        )
        trailer = f"{PLAN_INSTRUCTIONS} Example: {example}"
        return self._assemble(
            "plan", coordinator, sections, trailer, max_prompt_tokens=max_prompt_tokens
        )

    def build_isolated_prompt(
        self,
        context: IsolatedContext,
        *,
        agent: Agent,
        max_prompt_tokens: int | None = None,
    ) -> Prompt:
        """Build the prompt of a fresh subagent from an `IsolatedContext`, and nothing else.

        The user message is exactly ``context.to_prompt()``; the system message is the
        agent's instructions. Manifest origins: ``arch``, ``task:<id>``, ``file:<path>``,
        ``constraint:<n>``, ``clarification:<n>``, ``child_result:<id>``. The subject is
        ``isolated:<task id>``; the clearance records the task, the agent and the file paths.

        Raises:
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        grouped: dict[str, list[_Block]] = {}
        for part in context.parts():
            grouped.setdefault(part.section, []).append(
                self._block(part.origin, part.heading, part.content)
            )
        sections = [_Section(heading, tuple(blocks)) for heading, blocks in grouped.items()]
        clearance = {
            "task_id": context.task_id,
            "agent": agent.name,
            "result_task_ids": [],
            "files": sorted(context.file_contents),
            "isolated": True,
        }
        return self._assemble(
            f"isolated:{context.task_id}",
            agent,
            sections,
            ISOLATED_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
            clearance_dict=clearance,
        )

    def build_isolated_task_prompt(
        self,
        task: Task,
        *,
        agent: Agent,
        queue: TaskQueue,
        architecture: ArchitecturalContext | None,
        files: Mapping[str, str] | None = None,
        clarifications: Sequence[str] = (),
        child_results: Mapping[str, str] | None = None,
        max_prompt_tokens: int | None = None,
        max_dependency_tokens: int | None = None,
    ) -> Prompt:
        """Build the prompt of a fresh subagent for an isolated task of a run.

        Layout (the `IsolatedContext` layout, with the task's admitted results added):
        ``## Project architecture`` (``arch``), ``# Task`` (``task:<id>``), ``## Files``
        (``file:<path>``), ``## Context from prerequisite tasks`` (``task_result:<id>``,
        exactly as for a standard task), ``## Constraints`` (``constraint:<n>``),
        ``## Clarifications`` (``clarification:<n>``), ``## Results from subagents``
        (``child_result:<id>``), then the closing instruction asking for a ``STATUS:`` line.
        Nothing about sibling tasks: no other ids, no other results, no count of tasks.

        Args:
            task: The task (``mode == "isolated"``); it must belong to ``queue.graph``.
            agent: Its assignee.
            queue: The run's state (admitted results come from here).
            architecture: The run's architectural context, or ``None``.
            files: File contents by path: the task's own files and those served on request.
            clarifications: Answers to the subagent's earlier questions, in order.
            child_results: Final results of the task's children.
            max_prompt_tokens: Token budget of the whole prompt, ``None`` for no limit.
            max_dependency_tokens: Most tokens of each admitted result.

        Raises:
            ContextViolation: An item outside the task's clearance.
            DependencyPayloadError: An admitted result over ``max_dependency_tokens``.
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        clearance = replace(
            Clearance.for_task(queue.graph, task.id, agent=agent,
                               memory_groups=self._memory_groups),
            files=frozenset(task.files) | frozenset(files or {}),
            clarifications=len(clarifications),
            children=frozenset(child_results or {}),
        )  # fmt: skip
        if agent.name != task.assignee or not clearance.isolated:
            raise ContextViolation(task.id, f"instructions:{agent.name}")
        context = IsolatedContext(
            task_id=task.id,
            task_description=task.description,
            architectural_context=architecture,
            file_contents=dict(files or {}),
            constraints=task.constraints,
            clarifications=tuple(clarifications),
            child_results=dict(child_results or {}),
        )
        grouped: dict[str, list[_Block]] = {}
        for part in context.parts():
            if part.section == SECTION_CONSTRAINTS and SECTION_RESULTS not in grouped:
                grouped[SECTION_RESULTS] = list(
                    self._result_blocks(task, clearance, queue, max_dependency_tokens)
                )
            if not clearance.admits(part.origin):
                raise ContextViolation(task.id, part.origin)
            grouped.setdefault(part.section, []).append(
                self._block(part.origin, part.heading, part.content)
            )
        if SECTION_RESULTS not in grouped:
            grouped[SECTION_RESULTS] = list(
                self._result_blocks(task, clearance, queue, max_dependency_tokens)
            )
        sections = [_Section(heading, tuple(blocks)) for heading, blocks in grouped.items()]
        return self._assemble(
            f"isolated:{task.id}",
            agent,
            sections,
            ISOLATED_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
            clearance=clearance,
        )

    def build_clarification_prompt(
        self,
        task: Task,
        question: str,
        *,
        coordinator: Agent,
        queue: TaskQueue,
        max_prompt_tokens: int | None = None,
        max_dependency_tokens: int | None = None,
    ) -> Prompt:
        """Build the coordinator's prompt to answer an isolated subagent's question.

        The coordinator sees what the task is cleared for, and no more: ``# Task``
        (``task:<id>``), ``## Context from prerequisite tasks`` (the task's admitted
        results) and ``## Question from the subagent`` (``question:<task id>``). Its answer
        becomes the subagent's next ``clarification:<n>`` item. Subject
        ``clarification:<task id>``; the manifest's clearance is the task's.

        Raises:
            ContextViolation: The task is not isolated.
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        clearance = Clearance.for_task(queue.graph, task.id, memory_groups=self._memory_groups)
        origin = f"question:{task.id}"
        if not clearance.admits(origin):
            raise ContextViolation(task.id, origin)
        task_block = self._block(f"task:{task.id}", f"{task.title} (task {task.id})",
                                 task.description)  # fmt: skip
        sections = [
            _Section("# Task", (task_block,)),
            _Section(
                SECTION_RESULTS,
                self._result_blocks(task, clearance, queue, max_dependency_tokens),
            ),
            _Section(QUESTION_SECTION, (self._block(origin, "Question", question),)),
        ]
        return self._assemble(
            f"clarification:{task.id}",
            coordinator,
            sections,
            CLARIFICATION_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
            clearance=clearance,
        )

    def build_child_prompt(
        self,
        child_id: str,
        goal: str,
        *,
        agent: Agent,
        tools: Sequence[dict[str, Any]] = (),
        tool_steps: Sequence[ToolStep] = (),
        max_prompt_tokens: int | None = None,
    ) -> Prompt:
        """Build a spawned child's prompt: its goal, and its own tool calls' results only.

        Layout: the child agent's instructions; ``# Your goal`` (``child_goal:<child
        id>``); its tools and their results, as in a task prompt. Subject ``child:<id>``.
        Nothing of the parent's context reaches it.

        Raises:
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        clearance = Clearance.for_child(child_id, agent)
        sections = [
            _Section(CHILD_GOAL_SECTION, (self._block(f"child_goal:{child_id}", "Goal", goal),)),
            *self._tool_sections(clearance, tools, tool_steps),
        ]
        return self._assemble(
            f"child:{child_id}",
            agent,
            sections,
            TOOL_TRAILER if tools else TASK_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
            clearance=clearance,
        )

    def build_conversation_prompt(
        self,
        *,
        agent: Agent,
        turns: Sequence[Turn],
        memories: Sequence[MemoryRecord] = (),
        compression: Mapping[str, Any] | None = None,
        max_prompt_tokens: int | None = None,
        summarize: bool = False,
    ) -> Prompt:
        """Build an agent's prompt for the next turn of its conversation.

        Layout: the agent's instructions; ``## Conversation so far`` with one block per turn
        (origin ``turn:<id>``, or ``summary:<id>`` for a summary written by compression),
        headed with its author for attribution; ``## From memory`` with admitted records;
        then the closing instruction. The manifest's clearance is ``{"agent",
        "memory_scopes"}``.

        Args:
            agent: The agent whose conversation it is.
            turns: The turns to show, oldest first (the agent's `ConversationMemory`, after
                any compression).
            memories: Long-term memory records (the agent's own or its groups', including a
                group's shared conversation).
            compression: What the context-window monitor dropped or summarized before this
                prompt; recorded in the manifest.
            max_prompt_tokens: Token budget, ``None`` for no limit.
            summarize: Build the monitor's summarizing prompt instead: the turns, then a
                request to summarize them (subject ``summary:<agent>``).

        Raises:
            ContextViolation: A memory record outside the agent's memory scopes.
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        subject = f"{'summary' if summarize else 'conversation'}:{agent.name}"
        clearance = Clearance(
            task_id=subject,
            agent=agent.name,
            result_task_ids=frozenset(),
            files=frozenset(),
            memory_scopes=memory_scopes_of(agent.name, self._memory_groups),
        )
        turn_blocks = tuple(
            self._block(
                f"{'summary' if t.id.startswith('summary_') else 'turn'}:{t.id}",
                turn_title(t),
                t.content,
            )
            for t in turns
        )
        sections = [
            _Section(TURNS_SECTION, turn_blocks),
            _Section(MEMORY_SECTION, self._memory_blocks(clearance, subject, memories)),
        ]
        return self._assemble(
            subject,
            agent,
            sections,
            SUMMARY_PROMPT if summarize else CONVERSATION_TRAILER,
            max_prompt_tokens=max_prompt_tokens,
            clearance=clearance,
            compression=compression,
        )

    # -- internals -----------------------------------------------------------------------

    def _result_blocks(
        self,
        task: Task,
        clearance: Clearance,
        queue: TaskQueue,
        max_dependency_tokens: int | None,
    ) -> tuple[_Block, ...]:
        """The blocks of the completed results ``clearance`` admits, in graph order."""
        blocks = []
        # Only the admitted tasks are looked at (not every task of the run), in graph order.
        for tid in sorted(clearance.result_task_ids, key=queue.graph.position):
            state = queue.get(tid)
            if state.status is not TaskStatus.COMPLETED:
                continue
            origin = f"task_result:{tid}"
            if not clearance.admits(origin):  # pragma: no cover - guarded by the filter above
                raise ContextViolation(task.id, origin)
            content = state.result or ""
            if max_dependency_tokens is not None:
                tokens = self._count(content)
                if tokens > max_dependency_tokens:
                    raise DependencyPayloadError(
                        dependency=tid,
                        task_id=task.id,
                        tokens=tokens,
                        maximum=max_dependency_tokens,
                    )
            heading = f"{state.task.title} (by {state.task.assignee})"
            blocks.append(self._result_block(origin, heading, content))
        return tuple(blocks)

    def _failed_blocks(
        self, task: Task, clearance: Clearance, queue: TaskQueue
    ) -> tuple[_Block, ...]:
        """Admitted tasks that failed or were skipped, for a task that proceeds after failures.

        Each is one ``task_status:<id>`` block holding its recorded reason, never a result.
        """
        if task.after_failure != "proceed":
            return ()
        blocks = []
        for tid in sorted(clearance.result_task_ids, key=queue.graph.position):
            state = queue.get(tid)
            if state.status not in (TaskStatus.FAILED, TaskStatus.SKIPPED):
                continue
            origin = f"task_status:{tid}"
            if not clearance.admits(origin):  # pragma: no cover - guarded by the filter above
                raise ContextViolation(task.id, origin)
            heading = f"{state.task.title} (by {state.task.assignee}): {state.status}"
            blocks.append(self._block(origin, heading, state.error or str(state.status)))
        return tuple(blocks)

    def _child_blocks(
        self, task_id: str, clearance: Clearance, child_results: Mapping[str, str] | None
    ) -> tuple[_Block, ...]:
        blocks = []
        for child_id, text in (child_results or {}).items():
            origin = f"child_result:{child_id}"
            if not clearance.admits(origin):
                raise ContextViolation(task_id, origin)
            blocks.append(self._block(origin, f"Result of {child_id}", text))
        return tuple(blocks)

    def _memory_blocks(
        self, clearance: Clearance, subject: str, memories: Sequence[MemoryRecord]
    ) -> tuple[_Block, ...]:
        blocks = []
        for record in memories:
            if not clearance.admits(record.origin, memory=record):
                raise ContextViolation(subject, record.origin)
            blocks.append(self._block(record.origin, memory_title(record), record.content))
        return tuple(blocks)

    def _result_block(self, origin: str, heading: str, content: str) -> _Block:
        """`_block` of a task's result (``task_result:<id>``), rendered once per builder.

        A kept block is reused only for the same heading and content (compared by value),
        so a result that changed (a task run again) is rendered again.
        """
        kept = self._results.get(origin)
        if kept is not None and kept[0] == heading and kept[1] == content:
            return kept[2]
        block = self._block(origin, heading, content)
        self._results[origin] = (heading, content, block)
        return block

    def _block(self, origin: str, heading: str, content: str) -> _Block:
        """The item and its rendered block; the item's tokens are those of the block."""
        heading = one_line(heading)
        text = fence_block(heading, content)
        item = ContextItem(origin=origin, title=heading, content=content, tokens=self._count(text))
        return item, text

    def _assemble(
        self,
        subject: str,
        agent: Agent,
        sections: Sequence[_Section],
        trailer: str,
        *,
        max_prompt_tokens: int | None,
        clearance: Clearance | None = None,
        clearance_dict: dict[str, Any] | None = None,
        compression: Mapping[str, Any] | None = None,
    ) -> Prompt:
        system = agent.instructions.strip()
        system_tokens = self._count(system)
        items = [
            ContextItem(
                origin="instructions", title=agent.name, content=system, tokens=system_tokens
            )
        ]
        rendered: list[tuple[str, list[str]]] = []
        for section in sections:
            texts = []
            for item, text in section.blocks:
                items.append(item)
                texts.append(text)
            rendered.append((section.heading, texts))
        user = render_parts(rendered, trailer)
        messages = (
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=user),
        )
        total = system_tokens + self._count(user)
        if max_prompt_tokens is not None and total > max_prompt_tokens:
            raise LimitExceeded(
                "max_prompt_tokens", value=total, maximum=max_prompt_tokens, subject=subject
            )
        manifest = ContextManifest(
            subject=subject,
            agent=agent.name,
            items=tuple(items),
            total_tokens=total,
            prompt_sha256=messages_sha256(messages),
            clearance=_clearance_dict(clearance) if clearance is not None else clearance_dict,
            compression=dict(compression) if compression is not None else None,
        )
        return Prompt(messages=messages, manifest=manifest)


def _clearance_dict(clearance: Clearance | None) -> dict[str, Any] | None:
    if clearance is None:
        return None
    if clearance.task_id.startswith(("conversation:", "summary:")):
        return {"agent": clearance.agent, "memory_scopes": sorted(clearance.memory_scopes)}
    return clearance.to_dict()
