"""Pre-flight: each task's estimated prompt tokens against its budget, before any run.

The estimate needs no model call and no tokenizer load: text is counted with the byte
heuristic (`heuristic_tokens`), files by their size (an isolated task's as its run reads
them, within ``isolation.file_caps``: `capped_sizes`), and the result of a dependency by its
upper bound (a model task's ``max_output_tokens``; a built-in step's own bound,
`step_result_tokens`; another step's `STEP_RESULT_TOKENS`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from clearance._core.run_spec import RunSpec
from clearance._core.spec import Agent, FileCaps, Task, Team
from clearance._orchestration.model_pool import ModelPool
from clearance._orchestration.run_config import model_settings
from clearance.analysis import step_result_tokens
from clearance.models._registry import DEFAULT_MODEL_ID
from clearance.tokens import heuristic_tokens

__all__ = [
    "EMBEDDED_RATES",
    "STEP_RESULT_TOKENS",
    "TaskEstimate",
    "estimate_tasks",
    "model_windows",
    "wall_time_range",
]

STEP_RESULT_TOKENS = 4000
"""Assumed tokens of a non-model task's result (a module's facts stay well under it)."""
EMBEDDED_RATES: dict[str, tuple[float, float]] = {
    "prefill": (48.0, 276.0),
    "generation": (6.0, 40.0),
}
"""Tokens/s of the embedded model (``llama-cpp:``) on a 2-core machine, busy then idle: the
ends of `wall_time_range`. Prefill: two threads fell from 276 (idle) to 48 (busy).
Generation under a JSON-schema grammar on a machine at load 10: about 6 (the code review of
``json``: 1229 completion tokens in the 184 s its prefill left of 283 s); unconstrained on
an idle one: about 40."""
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
        error: Why the run would fail the task before its prompt is sent (an isolated
            task's files over ``isolation.file_caps`` under ``on_oversize: error``), or
            ``None``.
    """

    task_id: str
    prompt_tokens: int
    budget: int | None
    context_window: int | None
    error: str | None = None

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
    project_root: Path | None = None,
    file_caps: FileCaps | None = None,
) -> list[TaskEstimate]:
    """Estimate every task's prompt (see the module docstring).

    Args:
        tasks: The tasks, in graph order.
        team: Their agents.
        input_root: Where the tasks' files are (sizes only are read).
        project_root: Where an isolated task's files are (``None``: ``input_root``).
        file_caps: The caps an isolated task's files are read within (``None``: the
            defaults), as the run reads them (`capped_sizes`).
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
        error = None
        if task.mode == "isolated":
            root = project_root if project_root is not None else input_root
            sizes, error = capped_sizes(root, task.files, file_caps or FileCaps())
            tokens += sum(size // 4 + 1 for size in sizes)
        else:
            for path in task.files:
                tokens += _file_tokens(input_root, path)
        for dep in task.depends_on:
            other = by_id.get(dep)
            if other is None:
                continue
            helper = names.get(other.assignee)
            if other.run is not None or helper is None:
                tokens += _step_tokens(other)
            else:
                tokens += helper.limits.max_output_tokens
        window = context_window(agent)
        budget = agent.limits.max_prompt_tokens
        if budget is None and window is not None:
            budget = window - agent.limits.max_output_tokens
        estimates.append(TaskEstimate(task_id=task.id, prompt_tokens=tokens, budget=budget,
                                      context_window=window, error=error))  # fmt: skip
    return estimates


def capped_sizes(
    root: Path | None, paths: Iterable[str], caps: FileCaps
) -> tuple[list[int], str | None]:
    """The bytes of each file an isolated task is given, in order, as `load_text_file` cuts them.

    A file over what is left (``max_file_bytes``, and ``max_total_bytes`` less the earlier
    files) is cut to it under ``truncate`` (the marker included); under ``error``, or when
    nothing is left, the run fails the task: the reason is returned instead (the sizes so far).
    """
    sizes: list[int] = []
    if root is None:
        return sizes, None
    for path in paths:
        try:
            size = (root / path).stat().st_size
        except OSError:
            continue
        allowed = min(caps.max_file_bytes, caps.max_total_bytes - sum(sizes))
        if size <= allowed:
            sizes.append(size)
            continue
        if caps.on_oversize == "error" or allowed <= 0:
            over_file = caps.on_oversize == "error" and size > caps.max_file_bytes
            cap = "max_file_bytes" if over_file else "max_total_bytes"
            return sizes, f"{path}: over isolation.file_caps.{cap}"
        sizes.append(allowed)  # what is kept, then the marker, fills what was left
    return sizes, None


def model_windows(spec: RunSpec) -> Callable[[Agent], int | None]:
    """The context window of an agent's model, as ``spec``'s run makes the model.

    The run's models, made the one way a run makes them: `model_settings` (the team-wide
    ``model_options`` and ``by_model``), then `ModelPool`; a window a built-in provider is
    given is read from its settings, with no model made (`ModelPool.context_window`).

    Raises:
        ConfigError: As `model_settings`; the function returned, as `ModelPool.for_agent`.
    """
    return ModelPool(spec.model or DEFAULT_MODEL_ID, options=model_settings(spec)).context_window


def wall_time_range(
    estimates: Iterable[TaskEstimate],
    completion_bounds: Iterable[int],
) -> tuple[float, float]:
    """Seconds a run of the embedded model may take: ``(idle machine, busy machine)``.

    The model answers one call at a time, so calls add up whatever the concurrency;
    steps take a fraction of a second and are left out.

    Args:
        estimates: The model tasks' estimates (their prompts are upper bounds; the low end
            assumes half of each).
        completion_bounds: Each model call's ``max_output_tokens`` (tasks and synthesis;
            the low end assumes a quarter of each, the high end 60%: small models stop
            early, and answers reached about half their bound in the measured runs).
    """
    prompt = sum(e.prompt_tokens for e in estimates)
    completion = sum(completion_bounds)
    (prefill_slow, prefill_fast), (gen_slow, gen_fast) = (
        EMBEDDED_RATES["prefill"],
        EMBEDDED_RATES["generation"],
    )
    low = prompt * 0.5 / prefill_fast + completion * 0.25 / gen_fast
    high = prompt / prefill_slow + completion * 0.6 / gen_slow
    return low, high


def _step_tokens(task: Task) -> int:
    """Upper bound of a non-model task's result: the built-in step's own, else the default."""
    if task.run is not None and task.run.startswith("step:"):
        bound = step_result_tokens(task.run.removeprefix("step:"), len(task.depends_on))
        if bound is not None:
            return bound
    return STEP_RESULT_TOKENS


def _file_tokens(root: Path | None, path: str) -> int:
    if root is None:
        return 0
    try:
        return (root / path).stat().st_size // 4 + 1
    except OSError:
        return 0
