"""The coordinator's synthesis, hierarchical when the full view does not fit its window.

Without overflow the synthesis is one call (subject ``synthesis``) holding the full view of
the run (`ContextBuilder.build_synthesis_prompt`). When that prompt exceeds the coordinator's
budget, the synthesis is a map-reduce:

1. **Map.** The completed results, in graph order, are packed greedily into groups whose
   prompts fit the budget; each group is summarized by one call ``synthesis_map:<n>`` (the
   goal and the group's results, nothing else). Every result reaches exactly one map step.
2. **Reduce.** The coordinator writes the final answer from the goal, the map summaries
   (items ``summary_of:<n>``, each labelled with the tasks it covers), the failed and
   skipped tasks and the shared memory: one call, subject ``synthesis``, as before.

If the summaries themselves overflow the reduce prompt, they are summarized again in groups
(summaries of summaries), at most `MAX_SYNTHESIS_DEPTH` levels in all. Nothing is truncated:
a single result or summary too big for a map prompt, or a view still too big after the last
level, fails the synthesis with `LimitExceeded`. The coordinator's ``limits.max_model_calls``
caps the calls of one synthesis, map steps and reduce together. This follows the map-reduce
summarization of long documents (as in LangChain's ``MapReduceDocumentsChain``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from clearance._agents.caller import CallBudget, ModelCaller
from clearance._context.builder import SUMMARIES_SECTION, ContextBuilder
from clearance._context.prompts_coordinator import MapSummary
from clearance._core.errors import LimitExceeded, ModelError
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent
from clearance._core.vocabulary import OriginKind, PromptKind
from clearance._state.queue import TaskQueue, TaskStatus
from clearance._state.shared_memory import SharedMemory
from clearance.models._base import ChatModel, ModelResponse

__all__ = ["MAX_SYNTHESIS_DEPTH", "Synthesis", "synthesize"]

MAX_SYNTHESIS_DEPTH = 4
"""Most levels of map steps (summaries of summaries) before the synthesis gives up."""

MAP_CONCURRENCY = 4
"""Most map calls of one level in flight at once."""

Marker = Callable[[str, ModelResponse], str]
"""Returns a call's answer as kept (marks for a cut-off or looping answer; see `mark_answer`)."""

_Item = tuple[Literal[OriginKind.TASK_RESULT, OriginKind.SUMMARY_OF], str | int]
"""One thing a map step summarizes: a task's result (by task id) or a summary (by step)."""


@dataclass(kw_only=True)
class Synthesis:
    """What a synthesis needs: the run's view, the coordinator and its caller.

    Attributes:
        goal: What the synthesis answers.
        coordinator: The agent that writes every step.
        model: The coordinator's model.
        builder: The run's prompt builder for ``model``.
        caller: The run's model caller (each step is a recorded call).
        queue: The run's state.
        shared_memory: The run's shared memory.
        budget: Token budget of each prompt; ``None`` for none (no overflow possible).
        include: Ids of the tasks whose results are shown; ``None`` for all.
        mark: Turns a response into the kept answer, given the call's subject.
        steps: Map steps numbered so far (set while synthesizing).
        summaries: Every map step's summary, with the tasks it covers, by step number (set
            while synthesizing).
        calls: Counts the synthesis's calls against the coordinator's
            ``limits.max_model_calls`` (made with the synthesis when not given).
    """

    goal: str
    coordinator: Agent
    model: ChatModel
    builder: ContextBuilder
    caller: ModelCaller
    queue: TaskQueue
    shared_memory: SharedMemory
    budget: int | None
    include: Collection[str] | None
    mark: Marker
    steps: int = field(default=0)
    summaries: dict[int, MapSummary] = field(default_factory=dict)
    calls: CallBudget | None = None

    def __post_init__(self) -> None:
        if self.calls is None:
            limit = self.coordinator.limits.max_model_calls
            self.calls = CallBudget(limit, subject=str(PromptKind.SYNTHESIS))


async def synthesize(s: Synthesis) -> str:
    """Write the synthesis: one call, or map steps and a reduce when the view overflows.

    Returns:
        The coordinator's final answer, as kept (see ``s.mark``).

    Raises:
        LimitExceeded: A single result or summary does not fit a map prompt (the error names
            it), the view still overflows after `MAX_SYNTHESIS_DEPTH` levels, or one more
            call would pass the coordinator's ``max_model_calls`` (nothing is sent).
        ModelError: A call failed, or a map step returned an empty summary.
    """
    try:
        prompt = s.builder.build_synthesis_prompt(
            s.goal,
            coordinator=s.coordinator,
            queue=s.queue,
            shared_memory=s.shared_memory,
            max_prompt_tokens=s.budget,
            include=s.include,
        )
    except LimitExceeded as exc:
        if s.budget is None or exc.limit != "max_prompt_tokens":
            raise
        return await _hierarchical(s, s.budget)
    response = await s.caller.call(
        subject="synthesis", agent=s.coordinator, model=s.model, prompt=prompt, budget=s.calls
    )
    return s.mark("synthesis", response)


async def _hierarchical(s: Synthesis, budget: int) -> str:
    """Map the results into summaries, level by level, until the reduce prompt fits.

    Stops with `LimitExceeded` when the reduce still overflows and another level cannot
    help: a single summary is left, a level of summaries did not merge any of them (each
    fills a map prompt alone), or `MAX_SYNTHESIS_DEPTH` levels were made.
    """
    items: list[_Item] = [
        (OriginKind.TASK_RESULT, tid) for tid in _shown_results(s.queue, s.include)
    ]
    for level in range(1, MAX_SYNTHESIS_DEPTH + 1):
        summaries = await _map_level(s, items, budget)
        try:
            prompt = s.builder.build_synthesis_reduce_prompt(
                s.goal,
                coordinator=s.coordinator,
                queue=s.queue,
                shared_memory=s.shared_memory,
                summaries=summaries,
                max_prompt_tokens=budget,
                include=s.include,
            )
        except LimitExceeded as exc:
            stuck = len(summaries) == 1 or (level > 1 and len(summaries) >= len(items))
            if exc.limit != "max_prompt_tokens" or stuck or level == MAX_SYNTHESIS_DEPTH:
                levels = f"{level} level{'s' if level > 1 else ''}"
                raise LimitExceeded(
                    "max_prompt_tokens", value=exc.value, maximum=exc.maximum,
                    subject=f"synthesis (still over budget with {len(summaries)} summaries "
                    f"after {levels} of map steps, at most {MAX_SYNTHESIS_DEPTH})",
                ) from None  # fmt: skip
            items = [(OriginKind.SUMMARY_OF, step) for step in summaries]
            continue
        response = await s.caller.call(
            subject="synthesis",
            agent=s.coordinator,
            model=s.model,
            prompt=prompt,
            budget=s.calls,
        )
        return s.mark("synthesis", response)
    raise AssertionError("unreachable: the last level returns or raises")  # pragma: no cover


def _shown_results(queue: TaskQueue, include: Collection[str] | None) -> list[str]:
    """The completed tasks whose results the synthesis shows, in graph order."""
    return [
        state.task.id
        for state in queue.states()
        if state.status is TaskStatus.COMPLETED and (include is None or state.task.id in include)
    ]


async def _map_level(s: Synthesis, items: Sequence[_Item], budget: int) -> dict[int, MapSummary]:
    """Summarize ``items`` in groups that fit ``budget``; return ``{step: summary}``."""
    numbered = []
    for group in _pack(s, items, budget):
        s.steps += 1
        numbered.append((s.steps, group))
    gate = asyncio.Semaphore(MAP_CONCURRENCY)

    async def one(step: int, group: list[_Item]) -> MapSummary:
        async with gate:
            text = await _map_step(s, step, group, budget)
        merged = [s.summaries[int(ref)] for kind, ref in group if kind == OriginKind.SUMMARY_OF]
        # In the order the map prompt shows them: its results, then its summaries' tasks.
        tasks = [str(ref) for kind, ref in group if kind == OriginKind.TASK_RESULT]
        tasks += [tid for summary in merged for tid in summary.tasks]
        return MapSummary(text, tuple(tasks), len(merged))

    try:
        async with asyncio.TaskGroup() as tasks:
            running = [(step, tasks.create_task(one(step, group))) for step, group in numbered]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    kept = {step: task.result() for step, task in running}
    s.summaries.update(kept)
    return kept


async def _map_step(s: Synthesis, step: int, group: list[_Item], budget: int) -> str:
    """One recorded map call: the group's summary, as kept."""
    subject = f"{PromptKind.SYNTHESIS_MAP}:{step}"
    prompt = _map_prompt(s, step, group, budget)
    response = await s.caller.call(
        subject=subject, agent=s.coordinator, model=s.model, prompt=prompt, budget=s.calls
    )
    text = s.mark(subject, response)
    if not text.strip():
        raise ModelError(
            f"{subject}: the coordinator returned an empty summary", model_id=s.model.model_id
        )
    return text


def _map_prompt(s: Synthesis, step: int, group: Sequence[_Item], budget: int | None) -> Prompt:
    return s.builder.build_synthesis_map_prompt(
        step,
        s.goal,
        coordinator=s.coordinator,
        queue=s.queue,
        task_ids=[str(ref) for kind, ref in group if kind == OriginKind.TASK_RESULT],
        summaries={
            int(ref): s.summaries[int(ref)] for kind, ref in group if kind == OriginKind.SUMMARY_OF
        },
        max_prompt_tokens=budget,
    )


def _pack(s: Synthesis, items: Sequence[_Item], budget: int) -> list[list[_Item]]:
    """Pack ``items`` in order, greedily by tokens, into groups whose map prompts fit."""
    count = s.model.count_tokens
    base = _map_prompt(s, 0, (), None).manifest.total_tokens
    base += count(f"\n\n{SUMMARIES_SECTION}") + count("\n\n## Completed tasks")
    groups: list[list[_Item]] = []
    current: list[_Item] = []
    size = base
    for item in items:
        kind, ref = item
        if kind == OriginKind.TASK_RESULT:
            tokens = s.builder.synthesis_result_tokens(s.queue, str(ref))
        else:
            tokens = s.builder.summary_tokens(s.queue, int(ref), s.summaries[int(ref)])
        tokens += 1  # the blank line before the block
        if base + tokens > budget:
            raise _too_big(item, base + tokens, budget)
        if current and size + tokens > budget:
            groups.append(current)
            current, size = [], base
        current.append(item)
        size += tokens
    if current:
        groups.append(current)
    # Estimates add up for the usual counters; a counter that does not gets its group split.
    return [fitted for group in groups for fitted in _fit(s, group, budget)]


def _fit(s: Synthesis, group: list[_Item], budget: int) -> list[list[_Item]]:
    """``group`` as one group if its map prompt fits ``budget``, else split in halves."""
    try:
        _map_prompt(s, 0, group, budget)
    except LimitExceeded as exc:
        if len(group) == 1:
            raise _too_big(group[0], exc.value, budget) from None
        half = len(group) // 2
        return _fit(s, group[:half], budget) + _fit(s, group[half:], budget)
    return [group]


def _too_big(item: _Item, tokens: int | float, budget: int) -> LimitExceeded:
    kind, ref = item
    what = f"the result of task {ref!r}" if kind == OriginKind.TASK_RESULT else f"summary {ref}"
    return LimitExceeded(
        "max_prompt_tokens",
        value=tokens,
        maximum=budget,
        subject=f"{what}, alone in a synthesis map prompt",
    )
