"""`TaskContext`: what one task's run needs, shared by its tool loop, children and dispatches."""

from __future__ import annotations

from dataclasses import dataclass, field

from clearance._agents.caller import CallBudget
from clearance._context.builder import ContextBuilder
from clearance._core.spec import Agent, Task
from clearance._state.memory import MemoryRecord
from clearance._state.queue import TaskQueue
from clearance.models._base import ChatModel

__all__ = ["TaskContext"]


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
        child_labels: The label of each child's result (child id → `child_result_label`).
        prompt_tokens: Tokens of the task's latest prompt (0 until one is built).
        memories: The long-term memory records recalled for the task (empty for none).
        hook_items: Items the user's hooks offered for the task: ``(ref, title, text)``.
        findings: In a review loop's later round: ``(round, reviewer, findings)`` of the
            reviewer who sent the previous candidate back (empty otherwise).
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
    child_labels: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int = 0
    memories: tuple[MemoryRecord, ...] = ()
    findings: tuple[tuple[int, str, str], ...] = ()
    hook_items: tuple[tuple[str, str, str], ...] = ()
