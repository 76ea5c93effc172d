"""Plan-only runs: the coordinator's validated plan as an editable team file, then replayed.

`plan_only` has the coordinator plan a goal exactly as `Orchestrator.run_team` does (the
same prompt, validation and repair), records the planning as a run of its own (its call,
its graph and a ``plan`` event), and runs nothing. `plan_team_file` writes the plan into a
copy of the team file: the planned ``tasks:``, the ``goal:`` and ``plan: {run_id,
tasks_sha256}``, which a person may edit. ``clearance run`` of that file replays it as a
normal run and records the link (`plan_link_event`): the plan's run id and whether the
tasks were edited since.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clearance._core.ids import new_id
from clearance._core.prompt import canonical_json
from clearance._core.vocabulary import EventKind
from clearance._orchestration.orchestrator import Orchestrator
from clearance._state.graph import TaskGraph
from clearance.models._base import Usage

__all__ = ["PlannedRun", "plan_link_event", "plan_only", "plan_team_file", "tasks_sha256"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PlannedRun:
    """A recorded plan: the run that made it, and the validated graph."""

    run_id: str
    graph: TaskGraph


def tasks_sha256(graph: TaskGraph) -> str:
    """The hash of a graph's tasks in their recorded form (``TaskGraph.to_dict``)."""
    return hashlib.sha256(canonical_json(graph.to_dict()).encode("utf-8")).hexdigest()


async def plan_only(orchestrator: Orchestrator, goal: str) -> PlannedRun:
    """Have the coordinator plan ``goal``; record it as a run of its own; run nothing.

    Raises:
        PlanError: The plan is invalid after the repair attempt (the run is recorded
            ``failed``).
        ModelError: The coordinator's model failed.
    """
    orchestrator._resolve_models()
    run_id = new_id("run")
    ledger = orchestrator.ledger
    ledger.start_run(run_id=run_id, team=orchestrator.team.name, goal=goal, graph=None,
                     config=orchestrator._config())  # fmt: skip
    graph, usage = await orchestrator._plan(run_id, goal, Usage())
    ledger.record_event(run_id, EventKind.PLAN, "plan", {"tasks_sha256": tasks_sha256(graph),
                                                 "tasks": len(graph)})  # fmt: skip
    ledger.finish_run(run_id, status="completed", synthesis=None, usage=usage, error=None)
    return PlannedRun(run_id=run_id, graph=graph)


def plan_team_file(raw: Mapping[str, Any], planned: PlannedRun, goal: str) -> dict[str, Any]:
    """The team file ``raw`` (as read) with the plan's tasks, its goal and a link to the plan.

    Each task keeps the keys a plan has: ``id``, ``title``, ``description``, ``assignee``,
    ``depends_on``.
    """
    tasks = [
        {key: task[key] for key in ("id", "title", "description", "assignee", "depends_on")}
        for task in planned.graph.to_dict()
    ]
    data = {key: value for key, value in raw.items() if key not in ("tasks", "goal", "plan")}
    return {
        **data,
        "goal": goal,
        "plan": {"run_id": planned.run_id, "tasks_sha256": tasks_sha256(planned.graph)},
        "tasks": tasks,
    }


def plan_link_event(plan: Mapping[str, str], graph: TaskGraph) -> dict[str, Any]:
    """The data of a replayed run's ``plan`` event: its plan's run, and whether it was edited."""
    return {
        "plan_run_id": plan["run_id"],
        "planned_tasks_sha256": plan["tasks_sha256"],
        "tasks_sha256": tasks_sha256(graph),
        "edited": tasks_sha256(graph) != plan["tasks_sha256"],
    }
