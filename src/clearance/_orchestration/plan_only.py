"""Plan-only runs: the coordinator's validated plan as an editable team file, then replayed.

`plan_only` has the coordinator of a spec plan a goal exactly as `Orchestrator.run_team`
does (the same prompt, validation and repair), records the planning as a run of its own (its
spec, its call, its graph and a ``plan`` event), and runs nothing. `plan_team_file` writes
the plan into a copy of the team file: the planned ``tasks:``, the ``goal:`` and ``plan:
{run_id, tasks_sha256}``, which a person may edit. Running that file (`clearance.run_spec`,
``clearance run``) replays it as a normal run and records the link (`PlanLink`,
`plan_link_event`): the plan's run id and whether the tasks were edited since.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clearance._core.errors import StoreError
from clearance._core.hooks import RunHooks, RunInfo
from clearance._core.run_spec import RunSpec
from clearance._core.teamfile import LoadedTeam, prepare_run
from clearance._core.vocabulary import EventKind
from clearance._orchestration.orchestrator import Orchestrator
from clearance._orchestration.run import RunServices
from clearance._orchestration.run_config import spec_options
from clearance._state.graph import TaskGraph, tasks_sha256
from clearance._state.ledger import Recorder, RunLedger
from clearance.models._registry import DEFAULT_MODEL_ID

__all__ = [
    "PlanLink",
    "PlannedRun",
    "plan_hooks",
    "plan_link_event",
    "plan_only",
    "plan_team_file",
    "recorded_plan_sha256",
    "tasks_sha256",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class PlannedRun:
    """A recorded plan: the run that made it, and the validated graph."""

    run_id: str
    graph: TaskGraph


async def plan_only(
    spec: RunSpec | LoadedTeam, goal: str, *, ledger: Recorder, services: RunServices | None = None
) -> PlannedRun:
    """Have the spec's coordinator plan ``goal``; record it as a run of its own; run nothing.

    The run records the spec; nothing it names is opened (no store, memory or tools: the
    plan needs none).

    Args:
        spec: The run's spec, or one prepared with `prepare_run`.
        goal: What to plan for.
        ledger: Where the planning is recorded.
        services: Model instances, callbacks, clock; ``None`` for `RunServices()`.

    Raises:
        ConfigError: The spec fails a check of `prepare_run`, or a model cannot be made.
        PlanError: The plan is invalid after the repair attempt (the run is recorded
            ``failed``).
        ModelError: The coordinator's model failed.
    """
    loaded = spec if isinstance(spec, LoadedTeam) else prepare_run(spec)
    options = spec_options(loaded.spec, synthesis_from=loaded.synthesis_from)
    orchestrator = Orchestrator(
        loaded.team, model=loaded.spec.model or DEFAULT_MODEL_ID, ledger=ledger,
        options=options, services=services,
    )  # fmt: skip
    orchestrator.spec = loaded.spec  # the run records the spec as it is
    run_id, graph, usage = await orchestrator.plan(goal)
    ledger.record_event(run_id, EventKind.PLAN, "plan", {"tasks_sha256": tasks_sha256(graph),
                                                 "tasks": len(graph)})  # fmt: skip
    ledger.finish_run(run_id, status="completed", synthesis=None, usage=usage, error=None)
    return PlannedRun(run_id=run_id, graph=graph)


def plan_team_file(raw: Mapping[str, Any], planned: PlannedRun, goal: str) -> dict[str, Any]:
    """The team file ``raw`` (as read) with the plan's tasks, its goal and a link to the plan.

    Each task keeps the keys a plan has: ``id``, ``title``, ``description``, ``assignee``,
    ``depends_on``. A ``synthesis_from`` naming a task the plan does not hold (one of the
    file's own tasks, which the plan replaces) is left out, as the tasks it named are.
    """
    tasks = [
        {key: task[key] for key in ("id", "title", "description", "assignee", "depends_on")}
        for task in planned.graph.to_dict()
    ]
    data = {key: value for key, value in raw.items() if key not in ("tasks", "goal", "plan")}
    named = data.get("synthesis_from")
    if isinstance(named, list) and not {t["id"] for t in tasks}.issuperset(map(str, named)):
        del data["synthesis_from"]
    return {
        **data,
        "goal": goal,
        "plan": {"run_id": planned.run_id, "tasks_sha256": tasks_sha256(planned.graph)},
        "tasks": tasks,
    }


def plan_link_event(
    plan: Mapping[str, str], graph: TaskGraph, *, ledger: Recorder | None = None
) -> dict[str, Any]:
    """The data of a replayed run's ``plan`` event: its plan's run, and whether it was edited.

    The planned tasks' hash is that of the plan's run as ``ledger`` recorded it when the run
    is there (`recorded_plan_sha256`): the team file's ``plan.tasks_sha256`` is as editable as
    its tasks, so a copy of the edited tasks' hash written there never makes edited tasks
    ``edited: false``. Without the plan's run at hand, it is the team file's.
    """
    planned = recorded_plan_sha256(ledger, plan["run_id"]) or plan["tasks_sha256"]
    digest = tasks_sha256(graph)
    return {
        "plan_run_id": plan["run_id"],
        "planned_tasks_sha256": planned,
        "tasks_sha256": digest,
        "edited": digest != planned,
    }


def recorded_plan_sha256(ledger: Recorder | None, run_id: str) -> str | None:
    """The hash of the tasks run ``run_id`` (exactly that id) recorded in ``ledger``.

    ``None`` when ``ledger`` is no `RunLedger`, or holds no such run, or the run has no graph.
    """
    if not isinstance(ledger, RunLedger):
        return None
    try:
        record = ledger.get_run(run_id)
    except StoreError:
        return None
    if record.run_id != run_id or record.graph is None:  # a prefix names no plan
        return None
    return tasks_sha256(record.graph)


class PlanLink(RunHooks):
    """Records, as a run starts, the plan it replays (event ``plan``, see `plan_link_event`)."""

    def __init__(self, ledger: Recorder, data: dict[str, Any]) -> None:
        self.ledger = ledger
        self.data = data

    def before_run(self, run: RunInfo) -> None:
        """Record the link to the plan."""
        self.ledger.record_event(run.run_id, EventKind.PLAN, "run", self.data)


def plan_hooks(loaded: LoadedTeam, ledger: Recorder) -> tuple[RunHooks, ...]:
    """The hook linking a run of a planned team file to its plan (none for other specs)."""
    if loaded.spec.plan is None:
        return ()
    data = plan_link_event(loaded.spec.plan.model_dump(), TaskGraph(loaded.tasks), ledger=ledger)
    return (PlanLink(ledger, data),)
