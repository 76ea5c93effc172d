"""Turning the coordinator's answer into a validated `TaskGraph`."""

from __future__ import annotations

from collections.abc import Mapping

from clearance._agents.caller import CallBudget, ModelCaller
from clearance._context.builder import ContextBuilder
from clearance._context.plan_answer import MAX_PLAN_TASKS, PLAN_SCHEMA, parse_plan
from clearance._context.prompts_coordinator import plan_feedback_quotes
from clearance._context.verify_children import child_id_problem
from clearance._core.errors import ConfigError, LimitExceeded, PlanError
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Team
from clearance._core.vocabulary import PromptKind
from clearance._orchestration.run import prompt_budget
from clearance._state.graph import TaskGraph
from clearance._state.ledger.recorder import record_breach
from clearance.models._base import ChatModel

__all__ = ["MAX_PLAN_TASKS", "PLAN_SCHEMA", "parse_plan", "plan_tasks"]


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
            graph = parse_plan(response.text, agents=names)
        except ValueError as exc:
            reason = str(exc)
        else:  # tasks sharing their children's ids, or with no room for them: repaired too
            if (problem := child_id_problem(graph, team)) is None:
                return graph
            reason = problem[1]
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
