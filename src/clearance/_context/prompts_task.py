"""Prompts of agents at work: a task, a delegated task, a spawned child, a conversation.

Each builder computes the prompt's clearance, admits every offered item through it (or fails
with `ContextViolation`) and hands the admitted parts to `PromptAssembler` by section, in the
layout of its kind (`layout`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from clearance._context import layout as L
from clearance._context.assemble import Part, PromptAssembler
from clearance._context.clearance import Clearance
from clearance._context.memory_items import memory_title, message_title, turn_title
from clearance._context.tool_sections import ToolStep, store_heading, tool_heading, tool_spec_text
from clearance._core.errors import ContextViolation, DependencyPayloadError
from clearance._core.memory_spec import memory_scopes_of
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Task
from clearance._core.vocabulary import OriginKind, PromptKind
from clearance._state.messages import MessageBus
from clearance._state.queue import TaskQueue, TaskStatus

if TYPE_CHECKING:
    from clearance._state.conversation import Turn
    from clearance._state.memory import MemoryRecord

__all__ = ["TaskPrompts"]


class TaskPrompts(PromptAssembler):
    """`ContextBuilder`'s prompts for agents at work (see `ContextBuilder` for the layout)."""

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
        child_labels: Mapping[str, str] | None = None,
        findings: Sequence[tuple[int, str, str]] = (),
        hook_items: Sequence[tuple[str, str, str]] = (),
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
                answer, a blank line, then ``Problem: <why it was rejected>``. Rendered
                under ``## Your previous answer was rejected``, in one block with origin
                ``repair:<task id>``. ``None`` on a first attempt.
            tools: For a tool-using agent, its tools (OpenAI function format), listed first,
                under ``## Tools you can call`` (origin ``tool_spec:<name>``); the prompt
                then closes with the tool-using trailer.
            tool_steps: The agent's finished tool calls, in order, under ``## Results of your
                tool calls``: per call a block ``tool:<call id>``, then one block
                ``store:<namespace>/<key>`` per store entry it read.
            memories: Long-term memory records retrieved for this task; each must be in the
                clearance's ``memory_scopes``. Rendered under ``## From memory``.
            child_results: Final results of the children this task spawned (child id →
                text, as aggregated), under ``## Results from subagents`` (origin
                ``child_result:<child id>``); never the children's steps.
            child_labels: The label of each child's result (child id →
                `child_result_label`: its agent and goal); a child without one is labelled
                with its id (`legacy_child_label`).
            findings: For a later round of a review loop: ``(round, reviewer, findings)``
                of the reviewer who sent the candidate of ``round`` back, under ``## Review
                findings to address`` (origin ``review:<task id>/<round>``); never the
                earlier candidate or conversation.
            hook_items: Items the user's hooks offered (``(ref, title, text)``), under
                ``## From hooks`` (origin ``hook:<ref>``).

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
        if hook_items:
            clearance = replace(clearance, hooks=frozenset(r for r, _, _ in hook_items))
        if agent.name != task.assignee:
            raise ContextViolation(task.id, f"instructions:{agent.name}")
        files_parts = [
            self._admit(clearance, Part(str(Origin(OriginKind.FILE, path)), path, content))
            for path, content in (files or {}).items()
        ]
        message_parts = []
        for message in messages.for_agent(agent.name) if messages else ():
            origin = str(Origin(OriginKind.MESSAGE, message.id))
            if not clearance.admits(origin, message=message):
                raise ContextViolation(task.id, origin)
            message_parts.append(Part(origin, message_title(message), message.content))
        sections: dict[str, Sequence[Part]] = {
            L.TASK: [_task_part(task)],
            L.FILES: files_parts,
            L.RESULTS: self._result_parts(task, clearance, queue, max_dependency_tokens),
            L.MESSAGES: message_parts,
        }
        # The sections most tasks have nothing for are only looked at when they may have
        # something (an absent section is an empty one: it is not rendered).
        if task.after_failure == "proceed":
            sections[L.FAILED_PREREQUISITES] = self._failed_parts(task, clearance, queue)
        if memories:
            sections[L.MEMORY] = self._memory_parts(clearance, task.id, memories)
        if child_results:
            sections[L.CHILDREN] = self._child_parts(clearance, child_results, child_labels)
        if repair is not None:
            part = Part(
                str(Origin(OriginKind.REPAIR, task.id)),
                "Previous answer and validation error",
                repair,
            )
            sections[L.REPAIR] = [self._admit(clearance, part)]
        if hook_items:
            hook_parts = [Part(str(Origin(OriginKind.HOOK, r)), t, x) for r, t, x in hook_items]
            sections[L.HOOKS] = [self._admit(clearance, p) for p in hook_parts]
        if findings:
            parts = [
                Part(
                    str(Origin(OriginKind.REVIEW, f"{task.id}/{n}")), f"Round {n}: {reviewer}", text
                )
                for n, reviewer, text in findings
            ]
            sections[L.REVIEW_FINDINGS] = [self._admit(clearance, p) for p in parts]
        if tools or tool_steps:
            sections.update(self._tool_sections(clearance, tools, tool_steps))
        return self._assemble(
            Subject.text(PromptKind.TASK, task.id), agent, PromptKind.TASK, sections,
            trailer="tools" if tools else "default",
            max_prompt_tokens=max_prompt_tokens, clearance=clearance,
        )  # fmt: skip

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
        holds the delegate's own tools, ``# Delegated task`` (origin ``delegation:<tool call
        id>``), then its tool results (see `build_task_prompt`). The manifest's subject is
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
        origin = str(Origin(OriginKind.DELEGATION, tool_call_id))
        sections: dict[str, Sequence[Part]] = {L.DELEGATED: [Part(origin, "Task", task_text)]}
        sections.update(self._tool_sections(clearance, tools, tool_steps))
        return self._assemble(
            origin, agent, PromptKind.DELEGATION, sections, trailer="tools" if tools else "default",
            max_prompt_tokens=max_prompt_tokens, clearance=clearance,
        )  # fmt: skip

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

        Layout: the child agent's instructions; its tools; ``# Your goal`` (``child_goal:<child
        id>``); its tool results, as in a task prompt. Subject ``child:<id>``. Nothing of the
        parent's context reaches it.

        Raises:
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        clearance = Clearance.for_child(child_id, agent)
        sections: dict[str, Sequence[Part]] = {
            L.CHILD_GOAL: [Part(str(Origin(OriginKind.CHILD_GOAL, child_id)), "Goal", goal)]
        }
        sections.update(self._tool_sections(clearance, tools, tool_steps))
        return self._assemble(
            str(Subject(PromptKind.CHILD, child_id)), agent, PromptKind.CHILD, sections,
            trailer="tools" if tools else "default",
            max_prompt_tokens=max_prompt_tokens, clearance=clearance,
        )  # fmt: skip

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
        kind = PromptKind.SUMMARY if summarize else PromptKind.CONVERSATION
        subject = str(Subject(kind, agent.name))
        clearance = Clearance(
            task_id=subject,
            agent=agent.name,
            result_task_ids=frozenset(),
            files=frozenset(),
            memory_scopes=memory_scopes_of(agent.name, self._memory_groups),
        )
        turn_parts = [
            Part(
                str(
                    Origin(
                        OriginKind.SUMMARY if t.id.startswith("summary_") else OriginKind.TURN, t.id
                    )
                ),
                turn_title(t),
                t.content,
            )
            for t in turns
        ]
        sections = {L.TURNS: turn_parts, L.MEMORY: self._memory_parts(clearance, subject, memories)}
        return self._assemble(
            subject, agent, kind, sections, max_prompt_tokens=max_prompt_tokens,
            clearance=clearance, compression=compression,
        )  # fmt: skip

    # -- admitted parts ----------------------------------------------------------------------

    @staticmethod
    def _admit(clearance: Clearance, part: Part) -> Part:
        """``part``, if ``clearance`` admits its origin.

        Raises:
            ContextViolation: It does not.
        """
        if not clearance.admits(part.origin):
            raise ContextViolation(clearance.task_id, part.origin)
        return part

    def _tool_sections(
        self,
        clearance: Clearance,
        tools: Sequence[dict[str, Any]],
        tool_steps: Sequence[ToolStep],
    ) -> dict[str, list[Part]]:
        """The ``## Tools you can call`` and ``## Results of your tool calls`` sections."""
        specs = []
        for spec in tools:
            name = str(spec["function"]["name"])
            part = Part(str(Origin(OriginKind.TOOL_SPEC, name)), name, tool_spec_text(spec))
            specs.append(self._admit(clearance, part))
        results = []
        for step in tool_steps:
            part = Part(
                str(Origin(OriginKind.TOOL, step.call_id)), tool_heading(step), step.content
            )
            results.append(self._admit(clearance, part))
            for entry in step.store_reads:
                origin = str(Origin(OriginKind.STORE, f"{entry.namespace}/{entry.key}"))
                if not clearance.admits_store(entry.namespace):
                    raise ContextViolation(clearance.task_id, origin)
                results.append(Part(origin, store_heading(entry), entry.value))
        return {L.TOOLS: specs, L.TOOL_RESULTS: results}

    def _result_parts(
        self,
        task: Task,
        clearance: Clearance,
        queue: TaskQueue,
        max_dependency_tokens: int | None,
    ) -> list[Part]:
        """The completed results ``clearance`` admits, in graph order, verbatim."""
        parts = []
        # Only the admitted tasks are looked at (not every task of the run), in graph order.
        for tid in sorted(clearance.result_task_ids, key=queue.graph.position):
            state = queue.get(tid)
            if state.status is not TaskStatus.COMPLETED:
                continue
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
            parts.append(self._admit(clearance, result_part(state.task, content)))
        return parts

    def _failed_parts(self, task: Task, clearance: Clearance, queue: TaskQueue) -> list[Part]:
        """Admitted tasks that failed or were skipped, for a task that proceeds after failures.

        Each is one ``task_status:<id>`` block holding its recorded reason, never a result.
        """
        if task.after_failure != "proceed":
            return []
        parts = []
        for tid in sorted(clearance.result_task_ids, key=queue.graph.position):
            state = queue.get(tid)
            if state.status not in (TaskStatus.FAILED, TaskStatus.SKIPPED):
                continue
            title = L.status_label(state.task.title, state.task.assignee, str(state.status))
            part = Part(
                str(Origin(OriginKind.TASK_STATUS, tid)), title, state.error or str(state.status)
            )
            parts.append(self._admit(clearance, part))
        return parts

    def _child_parts(
        self,
        clearance: Clearance,
        child_results: Mapping[str, str],
        child_labels: Mapping[str, str] | None,
    ) -> list[Part]:
        labels = child_labels or {}
        return [
            self._admit(
                clearance,
                Part(
                    str(Origin(OriginKind.CHILD_RESULT, child)),
                    labels.get(child) or L.legacy_child_label(child),
                    text,
                ),
            )
            for child, text in child_results.items()
        ]

    def _memory_parts(
        self, clearance: Clearance, subject: str, memories: Sequence[MemoryRecord]
    ) -> list[Part]:
        parts = []
        for record in memories:
            if not clearance.admits(record.origin, memory=record):
                raise ContextViolation(subject, record.origin)
            parts.append(Part(record.origin, memory_title(record), record.content))
        return parts


def _task_part(task: Task) -> Part:
    """The task's own text (``task:<id>``), labelled with its title (`task_label`)."""
    return Part(Origin.text(OriginKind.TASK, task.id), L.task_label(task.title), task.description)


def result_part(task: Task, result: str) -> Part:
    """A completed task's result (``task_result:<id>``), labelled (`result_label`)."""
    return Part(*_result_head(task.id, task.title, task.assignee), result)


@lru_cache(maxsize=4096)
def _result_head(task_id: str, title: str, assignee: str) -> tuple[str, str]:
    """The origin and label of a task's result (memoized: a result enters several prompts)."""
    return str(Origin(OriginKind.TASK_RESULT, task_id)), L.result_label(title, assignee)
