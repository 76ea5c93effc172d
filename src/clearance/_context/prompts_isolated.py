"""Prompts of fresh isolated subagents: an `IsolatedContext`, or an isolated task of a run.

The architectural context comes first (the same for every subagent of a run, so the prompts
share a prefix), then the task and what it is cleared for, then the ``STATUS:`` trailer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from clearance._context import layout as L
from clearance._context.architecture import ArchitecturalContext
from clearance._context.assemble import Part
from clearance._context.clearance import Clearance
from clearance._context.isolated import IsolatedContext
from clearance._context.prompts_coordinator import CoordinatorPrompts
from clearance._core.errors import ContextViolation
from clearance._core.origins import Subject
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Task
from clearance._core.vocabulary import PromptKind
from clearance._state.memory import MemoryRecord
from clearance._state.queue import TaskQueue

__all__ = ["IsolatedPrompts"]


def _grouped(context: IsolatedContext) -> dict[str, list[Part]]:
    sections: dict[str, list[Part]] = {}
    for part in context.parts():
        sections.setdefault(part.section, []).append(Part(part.origin, part.heading, part.content))
    return sections


class IsolatedPrompts(CoordinatorPrompts):
    """`ContextBuilder`'s prompts for isolated subagents."""

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
        clearance = {
            "task_id": context.task_id,
            "agent": agent.name,
            "result_task_ids": [],
            "files": sorted(context.file_contents),
            "isolated": True,
        }
        return self._assemble(
            str(Subject(PromptKind.ISOLATED, context.task_id)), agent, PromptKind.ISOLATED,
            _grouped(context), max_prompt_tokens=max_prompt_tokens, clearance_dict=clearance,
        )  # fmt: skip

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
        child_labels: Mapping[str, str] | None = None,
        max_prompt_tokens: int | None = None,
        max_dependency_tokens: int | None = None,
        memories: Sequence[MemoryRecord] = (),
    ) -> Prompt:
        """Build the prompt of a fresh subagent for an isolated task of a run.

        Layout (the `IsolatedContext` layout, with the task's admitted results added):
        ``## Project architecture`` (``arch``), ``# Task`` (``task:<id>``), ``## Files``
        (``file:<path>``), ``## Context from prerequisite tasks`` (``task_result:<id>``,
        exactly as for a standard task), ``## Constraints`` (``constraint:<n>``),
        ``## Clarifications`` (``clarification:<n>``), ``## Results from subagents``
        (``child_result:<id>``), ``## From memory`` (``memory:<id>``, as for a standard
        task), then the closing instruction asking for a ``STATUS:`` line.
        Nothing about sibling tasks: no other ids, no other results, no count of tasks.

        Args:
            task: The task (``mode == "isolated"``); it must belong to ``queue.graph``.
            agent: Its assignee.
            queue: The run's state (admitted results come from here).
            architecture: The run's architectural context, or ``None``.
            files: File contents by path: the task's own files and those served on request.
            clarifications: Answers to the subagent's earlier questions, in order.
            child_results: Final results of the task's children.
            child_labels: The label of each child's result (see `build_task_prompt`).
            max_prompt_tokens: Token budget of the whole prompt, ``None`` for no limit.
            max_dependency_tokens: Most tokens of each admitted result.
            memories: Long-term memory records recalled for this task; each must be in the
                agent's memory scopes.

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
            child_labels=dict(child_labels or {}),
        )
        sections = _grouped(context)
        for parts in sections.values():
            for part in parts:
                self._admit(clearance, part)
        sections[L.RESULTS] = self._result_parts(task, clearance, queue, max_dependency_tokens)
        sections[L.MEMORY] = self._memory_parts(clearance, task.id, memories)
        return self._assemble(
            str(Subject(PromptKind.ISOLATED, task.id)), agent, PromptKind.ISOLATED, sections,
            max_prompt_tokens=max_prompt_tokens, clearance=clearance,
        )  # fmt: skip
