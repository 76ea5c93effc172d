"""Turning the coordinator's answer into a validated `TaskGraph`."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clearance._agents.caller import CallBudget, ModelCaller
from clearance._context.builder import ContextBuilder
from clearance._context.prompts_coordinator import plan_feedback_quotes
from clearance._core.errors import ClearanceError, ConfigError, LimitExceeded, PlanError
from clearance._core.json_answer import loads_strict
from clearance._core.names import check_label
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Task, Team
from clearance._core.vocabulary import PromptKind
from clearance._orchestration.run import prompt_budget
from clearance._state.graph import TaskGraph
from clearance._state.ledger.recorder import record_breach
from clearance.models._base import ChatModel

__all__ = ["MAX_PLAN_TASKS", "PLAN_SCHEMA", "parse_plan", "plan_tasks"]

MAX_PLAN_TASKS = 20
"""Most tasks a coordinator's plan may hold."""

_MAX_FIELD_CHARS = 8000


class _PlannedTask(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    id: str = Field(min_length=1, max_length=128)
    title: str = Field(min_length=1, max_length=300)
    description: str = Field(min_length=1, max_length=_MAX_FIELD_CHARS)
    assignee: str = Field(min_length=1, max_length=128)
    depends_on: list[str] = Field(default_factory=list, max_length=MAX_PLAN_TASKS)


class _Plan(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tasks: list[_PlannedTask] = Field(min_length=1, max_length=MAX_PLAN_TASKS)


PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tasks": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_PLAN_TASKS,
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "title": {"type": "string"},
                    "description": {"type": "string"},
                    "assignee": {"type": "string"},
                    "depends_on": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "title", "description", "assignee", "depends_on"],
            },
        }
    },
    "required": ["tasks"],
}
"""JSON Schema of a plan, sent to providers that support structured output."""

_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _extract_json(text: str) -> str:
    """The JSON object in ``text``: a fenced code block's body, else first ``{`` to last ``}``."""
    match = _FENCED.search(text)
    if match:
        text = match.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end < start:
        raise ValueError("the answer holds no JSON object")
    return text[start : end + 1]


def parse_plan(text: str, *, agents: Collection[str]) -> TaskGraph:
    """Validate the coordinator's answer as a task graph.

    Dependency edges are kept exactly as planned.

    Args:
        text: The coordinator's answer: a JSON object ``{"tasks": [...]}``, optionally inside
            a fenced code block.
        agents: Names the tasks may be assigned to.

    Returns:
        The validated graph.

    Raises:
        ValueError: With a one-paragraph reason fit to send back to the coordinator for
            repair (invalid JSON, or JSON that reads two ways: a key given twice in one
            object, ``NaN``; wrong shape; a title that is not one line of text, or that
            another task has too, ignoring case; unknown assignee; invalid graph).
    """
    try:
        data = loads_strict(_extract_json(text))
    except RecursionError as exc:
        raise ValueError("invalid JSON: it is nested too deeply") from exc
    except ValueError as exc:  # a key given twice, NaN, or not JSON at all
        if str(exc) == "the answer holds no JSON object":
            raise
        raise ValueError(f"invalid JSON: {exc}") from exc
    try:
        plan = _Plan.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'plan'}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        raise ValueError(f"the plan does not have the required shape: {problems}") from exc
    known = set(agents)
    tasks = []
    titles: dict[str, str] = {}
    for index, planned in enumerate(plan.tasks):
        try:  # a title is one line, as in a team file (where `clearance plan` writes it)
            check_label(f"tasks.{index}.title", planned.title)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc
        # A result is labelled by its title (and assignee) where others read it (dependents,
        # the synthesis): two tasks of one title would be results no one can tell apart.
        if (other := titles.setdefault(planned.title.casefold(), planned.id)) != planned.id:
            raise ValueError(
                f"tasks {other!r} and {planned.id!r} have the same title {planned.title!r}: "
                "give each task a title of its own"
            )
        if planned.assignee not in known:
            raise ValueError(
                f"task {planned.id!r} is assigned to unknown agent {planned.assignee!r}; "
                f"choose one of: {', '.join(sorted(known))}"
            )
        try:
            tasks.append(
                Task(
                    id=planned.id,
                    title=planned.title,
                    description=planned.description,
                    assignee=planned.assignee,
                    depends_on=tuple(planned.depends_on),
                )
            )
        except ClearanceError as exc:
            raise ValueError(str(exc)) from exc
    try:
        return TaskGraph(tasks)
    except ClearanceError as exc:
        raise ValueError(str(exc)) from exc


async def plan_tasks(
    caller: ModelCaller,
    goal: str,
    *,
    team: Team,
    coordinator: Agent,
    model: ChatModel,
    memory_groups: Mapping[str, frozenset[str]],
) -> TaskGraph:
    """Ask the coordinator for a plan of tasks for ``goal`` (with one repair attempt).

    Args:
        caller: The run's `ModelCaller`; the planning calls go through it (and are recorded).
        goal: What the team is to achieve.
        team: The team; its agents' names and role summaries make the roster.
        coordinator: The agent that plans.
        model: The coordinator's model.
        memory_groups: The team's memory groups (``{group name: members}``).

    Returns:
        The validated plan (see `parse_plan`).

    Raises:
        ConfigError: The team has no agents.
        PlanError: The plan is still invalid after the repair attempt.
        LimitExceeded: The repair would pass the coordinator's ``limits.max_model_calls``
            (nothing is sent), or a planning prompt is over its budget.
        ModelError: The coordinator's model failed.
    """
    builder = ContextBuilder(count_tokens=model.count_tokens, memory_groups=memory_groups)
    names = [a.name for a in team.agents]
    if not names:
        raise ConfigError("the team has no agents to assign tasks to", field="agents")
    rejected: tuple[str, str] | None = None  # the answer sent back, and why
    calls = CallBudget(coordinator.limits.max_model_calls, subject=str(PromptKind.PLAN))
    for _attempt in range(2):
        try:
            prompt = _plan_prompt(builder, goal, team, coordinator, model, rejected)
            response = await caller.call(
                subject="plan", agent=coordinator, model=model, prompt=prompt,
                json_schema=PLAN_SCHEMA, budget=calls,
            )  # fmt: skip
        except LimitExceeded as exc:  # on record, as a task's breach is
            if caller.ledger is not None and caller.run_id is not None:
                record_breach(caller.ledger, caller.run_id, str(PromptKind.PLAN), exc)
            raise
        try:
            return parse_plan(response.text, agents=names)
        except ValueError as exc:
            reason = str(exc)
            rejected = (response.text, reason)
    raise PlanError(reason, response=response.text)


def _plan_prompt(
    builder: ContextBuilder,
    goal: str,
    team: Team,
    coordinator: Agent,
    model: ChatModel,
    rejected: tuple[str, str] | None,
) -> Prompt:
    """The planning prompt; on the repair attempt, with the rejected answer and why.

    The rejected answer is shown whole when the prompt fits the coordinator's budget, else
    its first characters, else the reason alone (`plan_feedback_quotes`).

    Raises:
        LimitExceeded: Even the prompt with the reason alone is over the budget.
    """
    budget = prompt_budget(coordinator, model)
    if rejected is None:
        return builder.build_plan_prompt(goal, coordinator=coordinator, roster=team.agents,
                                         max_prompt_tokens=budget)  # fmt: skip
    answer, reason = rejected
    shown = [quote + reason for quote in plan_feedback_quotes(answer)]
    for number, feedback in enumerate(shown, 1):
        try:
            return builder.build_plan_prompt(
                goal, coordinator=coordinator, roster=team.agents, feedback=feedback,
                max_prompt_tokens=budget,
            )  # fmt: skip
        except LimitExceeded:
            if number == len(shown):
                raise
    raise AssertionError("unreachable")  # pragma: no cover
