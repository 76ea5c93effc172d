"""Pre-flight: each task's estimated prompt tokens against its budget, before any run.

The estimate needs no model call and no tokenizer load: text is counted with the byte
heuristic (`heuristic_tokens`), files by their size, and the result of a dependency by its
upper bound (a model task's ``max_output_tokens``; a step's `STEP_RESULT_TOKENS`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from clearance._core.spec import Agent, Task, Team
from clearance.tokens import heuristic_tokens

__all__ = ["STEP_RESULT_TOKENS", "TaskEstimate", "estimate_tasks"]

STEP_RESULT_TOKENS = 4000
"""Assumed tokens of a non-model task's result (a module's facts stay well under it)."""
_OVERHEAD_TOKENS = 120
"""Headings, fences and the closing instruction of a task prompt."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskEstimate:
    """One task's estimate.

    Attributes:
        task_id: The task.
        prompt_tokens: Estimated prompt tokens (``0`` for a non-model task).
        budget: Its agent's prompt budget, or ``None`` when unknown.
        context_window: The model's context window, or ``None`` when unknown.
    """

    task_id: str
    prompt_tokens: int
    budget: int | None
    context_window: int | None

    @property
    def over(self) -> bool:
        """Whether the estimate exceeds the budget."""
        return self.budget is not None and self.prompt_tokens > self.budget


def estimate_tasks(
    tasks: Iterable[Task],
    team: Team,
    *,
    input_root: Path | None,
    context_window: Callable[[Agent], int | None],
) -> list[TaskEstimate]:
    """Estimate every task's prompt (see the module docstring).

    Args:
        tasks: The tasks, in graph order.
        team: Their agents.
        input_root: Where the tasks' files are (sizes only are read).
        context_window: The context window of an agent's model (``None``: unknown).
    """
    tasks = list(tasks)
    by_id = {t.id: t for t in tasks}
    names = {a.name: a for a in team.agents}
    estimates = []
    for task in tasks:
        agent = names.get(task.assignee)
        if task.run is not None or agent is None:
            estimates.append(TaskEstimate(task_id=task.id, prompt_tokens=0, budget=None,
                                          context_window=None))  # fmt: skip
            continue
        tokens = _OVERHEAD_TOKENS + heuristic_tokens(agent.instructions)
        tokens += heuristic_tokens(task.title) + heuristic_tokens(task.description)
        for path in task.files:
            tokens += _file_tokens(input_root, path)
        for dep in task.depends_on:
            other = by_id.get(dep)
            if other is None:
                continue
            helper = names.get(other.assignee)
            if other.run is not None or helper is None:
                tokens += STEP_RESULT_TOKENS
            else:
                tokens += helper.limits.max_output_tokens
        window = context_window(agent)
        budget = agent.limits.max_prompt_tokens
        if budget is None and window is not None:
            budget = window - agent.limits.max_output_tokens
        estimates.append(TaskEstimate(task_id=task.id, prompt_tokens=tokens, budget=budget,
                                      context_window=window))  # fmt: skip
    return estimates


def _file_tokens(root: Path | None, path: str) -> int:
    if root is None:
        return 0
    try:
        return (root / path).stat().st_size // 4 + 1
    except OSError:
        return 0
