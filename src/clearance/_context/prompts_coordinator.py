"""The coordinator's prompts: planning, synthesis (whole or map/reduce), clarifications.

The coordinator has the full view of a run for planning and synthesis; for a clarification
it sees only what the asking task is cleared for. Every one of these prompts opens with the
coordinator's instructions, then (except a clarification) ``# Goal``: one run's planning and
synthesis prompts share that prefix.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from clearance._context import layout as L
from clearance._context.assemble import Part
from clearance._context.clearance import Clearance
from clearance._context.prompts_task import TaskPrompts, _task_part, result_part
from clearance._core.errors import ContextViolation
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Task
from clearance._core.vocabulary import OriginKind, PromptKind
from clearance._state.queue import TaskQueue, TaskStatus
from clearance._state.shared_memory import SharedMemory

__all__ = ["PLAN_SHOWN_ANSWER_CHARS", "CoordinatorPrompts", "MapSummary", "plan_feedback_quotes"]

PLAN_SHOWN_ANSWER_CHARS = 2000
"""Most characters of a rejected plan a repair prompt shows when the whole does not fit."""


def plan_feedback_quotes(answer: str) -> list[str]:
    """How a repair prompt may open its feedback on the rejected plan ``answer``.

    Each is followed by the reason it was rejected. Longest first: the whole answer; its
    first `PLAN_SHOWN_ANSWER_CHARS` characters (when it is longer) with how many more there
    are; none of it. The planner takes the first whose prompt fits the coordinator's budget,
    and ``clearance verify`` accepts only these, each quoting an earlier answer.
    """
    quotes = [f"Your answer was:\n{answer}\n\nIt was rejected: "]
    cut = answer[:PLAN_SHOWN_ANSWER_CHARS]
    if len(cut) < len(answer):
        hidden = len(answer) - len(cut)
        quotes.append(f"Your answer began:\n{cut}\n[{hidden:,} more characters of your answer "
                      "are not shown]\n\nIt was rejected: ")  # fmt: skip
    quotes.append("Your answer was rejected: ")
    return quotes


@dataclass(frozen=True, slots=True)
class MapSummary:
    """A map step's summary as a later synthesis prompt shows it, labelled by what it covers.

    Attributes:
        text: The summary (the map call's answer, as kept).
        tasks: Ids of the tasks whose results it covers, in order: the step's own results,
            then those each summary it merged covers (transitively).
        summaries: How many earlier summaries the step merged (0: it summarized results).
    """

    text: str
    tasks: tuple[str, ...]
    summaries: int = 0


class CoordinatorPrompts(TaskPrompts):
    """`ContextBuilder`'s prompts for the coordinator."""

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

        Holds the goal, every completed result (untruncated), each under its label
        ``### <title> (by <assignee>)``, and every failed and skipped task with its reason;
        with ``include``, only those of its tasks. The shared memory's summary is shown
        only for tasks whose result or reason is not already shown, so each result enters
        the prompt once; when a run ends, every task is shown, so a run's synthesis holds
        no summary.

        Args:
            goal: What the synthesis answers.
            coordinator: The agent that writes it.
            queue: The run's state.
            shared_memory: The run's shared memory.
            max_prompt_tokens: Token budget, ``None`` for no limit.
            include: Ids of the tasks whose results are shown (the team file's
                ``synthesis_from``); ``None`` for all. The other tasks are left out,
                completed, failed or skipped (a failure's reason may quote the task's
                rejected answer), from the summary too.

        Raises:
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        sections = self._synthesis_view(queue, shared_memory, include)
        return self._assemble(
            PromptKind.SYNTHESIS,
            coordinator,
            PromptKind.SYNTHESIS,
            {L.GOAL: [_goal(goal)], **sections},
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
        summaries: Mapping[int, MapSummary] | None = None,
        max_prompt_tokens: int | None = None,
    ) -> Prompt:
        """Build one map step of a hierarchical synthesis: the goal and one group to summarize.

        Used when the full view does not fit the coordinator's budget. The user message holds
        ``# Goal``, then ``## Completed tasks`` (the results of ``task_ids``, origin
        ``task_result:<id>``, each untruncated) and ``## Summaries of completed tasks``
        (earlier map steps' summaries, origin ``summary_of:<step>``, each labelled with the
        tasks it covers: `layout.summary_label`), then a request to summarize them. Subject
        ``synthesis_map:<step>``; the manifest's clearance lists exactly the results and
        summaries the step may hold.

        Args:
            step: The map step's number (from 1, unique in the run).
            goal: What the synthesis answers.
            coordinator: The agent that writes the summary.
            queue: The run's state; each of ``task_ids`` must be completed.
            task_ids: Tasks whose results the step summarizes, in graph order.
            summaries: Earlier map steps' summaries by step number (a summary of summaries);
                each task they cover must be in ``queue``.
            max_prompt_tokens: Token budget, ``None`` for no limit.

        Raises:
            ContextViolation: A task of ``task_ids`` is not completed.
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        subject = str(Subject(PromptKind.SYNTHESIS_MAP, str(step)))
        results = []
        for tid in task_ids:
            state = queue.get(tid)
            if state.status is not TaskStatus.COMPLETED:
                raise ContextViolation(subject, str(Origin(OriginKind.TASK_RESULT, tid)))
            results.append(result_part(state.task, state.result or ""))
        kept = dict(summaries or {})
        summary_parts = _summaries(queue, kept)
        sections = {L.GOAL: [_goal(goal)], L.COMPLETED: results, L.SUMMARIES: summary_parts}
        step_clearance = {"step": subject, "task_results": list(task_ids), "summaries": list(kept)}
        return self._assemble(
            subject, coordinator, PromptKind.SYNTHESIS_MAP, sections,
            max_prompt_tokens=max_prompt_tokens, clearance_dict=step_clearance,
        )  # fmt: skip

    def build_synthesis_reduce_prompt(
        self,
        goal: str,
        *,
        coordinator: Agent,
        queue: TaskQueue,
        shared_memory: SharedMemory,
        summaries: Mapping[int, MapSummary],
        max_prompt_tokens: int | None = None,
        include: Collection[str] | None = None,
    ) -> Prompt:
        """Build the reduce step of a hierarchical synthesis: the goal and the map summaries.

        As `build_synthesis_prompt`, with ``## Summaries of completed tasks`` (origin
        ``summary_of:<step>``, each the response of map step ``<step>`` under a label naming
        the tasks it covers) in place of the completed results; failed and skipped tasks and
        the shared memory are shown as there. Subject ``synthesis``; the manifest's clearance
        lists the summaries.

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
        sections = self._synthesis_view(queue, shared_memory, include)
        sections.pop(L.COMPLETED)
        kept = dict(summaries)
        return self._assemble(
            PromptKind.SYNTHESIS, coordinator, PromptKind.SYNTHESIS_REDUCE,
            {L.GOAL: [_goal(goal)], L.SUMMARIES: _summaries(queue, kept), **sections},
            max_prompt_tokens=max_prompt_tokens,
            clearance_dict={"step": "synthesis", "task_results": [], "summaries": list(kept)},
        )  # fmt: skip

    def synthesis_result_tokens(self, queue: TaskQueue, task_id: str) -> int:
        """Tokens of a completed task's block in a synthesis prompt (heading and fence too)."""
        state = queue.get(task_id)
        part = result_part(state.task, state.result or "")
        return self._block_tokens("synthesis", L.COMPLETED, part)

    def summary_tokens(self, queue: TaskQueue, step: int, summary: MapSummary) -> int:
        """Tokens of map step ``step``'s summary as a block of a later synthesis prompt.

        The block as every later prompt renders it: heading (its label), fence and text.
        """
        part = _summaries(queue, {step: summary})[0]
        return self._block_tokens("synthesis_reduce", L.SUMMARIES, part)

    def _synthesis_view(
        self, queue: TaskQueue, shared_memory: SharedMemory, include: Collection[str] | None
    ) -> dict[str, list[Part]]:
        """The synthesis' completed, failed and skipped parts, and its shared-memory part."""
        completed, failed, skipped = [], [], []
        shown: set[str] = set()
        for state in queue.states():
            t = state.task
            if state.status.is_final:
                shown.add(t.id)
            if include is not None and t.id not in include:
                continue  # nor its failure: a reason may quote its rejected answer
            if state.status is TaskStatus.COMPLETED:
                completed.append(result_part(t, state.result or ""))
            elif state.status is TaskStatus.FAILED:
                failed.append(_status_part(t, state.error or "failed"))
            elif state.status is TaskStatus.SKIPPED:
                skipped.append(_status_part(t, state.error or "skipped"))
        # In graph order: the prompt must not depend on which concurrent task finished first.
        summary = shared_memory.get_summary(
            [s.task.id for s in queue.states() if s.task.id not in shown]
        )
        memory = [Part("shared_memory", "Summary of all results", summary)] if summary else []
        return {
            L.COMPLETED: completed, L.FAILED: failed, L.SKIPPED: skipped, L.SHARED_MEMORY: memory,
        }  # fmt: skip

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
        sections = {
            L.GOAL: [_goal(goal)],
            L.TEAM: [
                Part(str(Origin(OriginKind.AGENT, a.name)), a.name, a.summary) for a in roster
            ],
        }
        if feedback is not None:
            sections[L.PLAN_REJECTED] = [Part("plan_feedback", "What was wrong", feedback)]
        return self._assemble(
            PromptKind.PLAN,
            coordinator,
            PromptKind.PLAN,
            sections,
            trailer_suffix=L.plan_example(roster[0].name if roster else None),
            max_prompt_tokens=max_prompt_tokens,
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
        question_part = Part(str(Origin(OriginKind.QUESTION, task.id)), "Question", question)
        sections = {
            L.QUESTION: [self._admit(clearance, question_part)],
            L.TASK: [_task_part(task)],
            L.RESULTS: self._result_parts(task, clearance, queue, max_dependency_tokens),
        }
        return self._assemble(
            str(Subject(PromptKind.CLARIFICATION, task.id)),
            coordinator,
            PromptKind.CLARIFICATION,
            sections,
            max_prompt_tokens=max_prompt_tokens,
            clearance=clearance,
        )


def _goal(goal: str) -> Part:
    return Part("goal", "Goal", goal)


def _summaries(queue: TaskQueue, summaries: Mapping[int, MapSummary]) -> list[Part]:
    """Each summary (``summary_of:<step>``) under the label of the tasks it covers."""
    parts = []
    for step, summary in summaries.items():
        covered = [queue.get(tid).task for tid in summary.tasks]
        named = [(t.id, t.title, t.assignee) for t in covered]
        label = L.summary_label(step, named, summary.summaries)
        parts.append(Part(str(Origin.of(OriginKind.SUMMARY_OF, step)), label, summary.text))
    return parts


def _status_part(task: Task, reason: str) -> Part:
    """Why a task of the synthesis did not complete (``task_status:<id>``), labelled."""
    title = L.result_label(task.title, task.assignee)
    return Part(str(Origin(OriginKind.TASK_STATUS, task.id)), title, reason)
