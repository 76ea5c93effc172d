"""The ``plan`` command: the coordinator's plan for a goal, written as an editable team file."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from clearance._core.errors import ConfigError
from clearance._core.hooks import RunHooks, RunInfo
from clearance._core.safe_yaml import load_yaml_file
from clearance._core.teamfile import LoadedTeam
from clearance._orchestration.orchestrator import Orchestrator
from clearance._orchestration.plan_only import plan_link_event, plan_only, plan_team_file
from clearance._state.graph import TaskGraph
from clearance._state.ledger import DEFAULT_LEDGER_URL, Recorder, RunLedger
from clearance.cli._common import one_line_errors, out, safe_text
from clearance.cli._options import DbOption, InputOption
from clearance.cli._team_setup import (
    configured_models,
    load_checked,
    team_model_options,
    with_model,
)
from clearance.events import EventKind

__all__ = ["PlanLink", "plan", "plan_hooks"]


@one_line_errors
def plan(
    team_file: Annotated[Path, typer.Argument(help="Team file (YAML) whose coordinator plans.")],
    goal: Annotated[str | None, typer.Option(help="The goal to plan for.")] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the planned team file.")
    ] = Path("plan.yaml"),
    model: Annotated[str | None, typer.Option(help="Model id for every agent.")] = None,
    db: DbOption = DEFAULT_LEDGER_URL,
    input_dir: InputOption = None,
) -> None:
    """Plan only: write the coordinator's validated plan as a team file to review and edit.

    Run it with ``clearance run PLAN.yaml``; the run records which plan it replays.
    """
    loaded, model_id = with_model(load_checked(team_file, input_dir)[0], model)
    goal = goal or loaded.spec.goal
    if not goal:
        raise ConfigError("give --goal (or goal: in the team file) to plan", field="--goal")
    if output.exists():
        raise ConfigError(f"{str(output)!r} exists: choose another file", field="--output")
    if not output.parent.is_dir():
        raise ConfigError(f"folder {str(output.parent)!r} does not exist", field="--output")
    options = team_model_options(loaded, model_id)
    with RunLedger(db) as ledger:
        orchestrator = Orchestrator(
            loaded.team, model=model_id, models=configured_models(options),
            model_options=options, ledger=ledger,
        )  # fmt: skip
        planned = asyncio.run(plan_only(orchestrator, goal))
    data = plan_team_file(load_yaml_file(team_file), planned, goal)
    output.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), "utf-8")
    out.print(safe_text(f"plan: {len(planned.graph)} tasks (run {planned.run_id})"))
    out.print(safe_text(f"written to {output}; edit it, then: clearance run {output}"))


class PlanLink(RunHooks):
    """Records, as a run starts, the plan it replays (event ``plan``)."""

    def __init__(self, ledger: Recorder, data: dict[str, Any]) -> None:
        self.ledger = ledger
        self.data = data

    def before_run(self, run: RunInfo) -> None:
        """Record the link to the plan (`plan_link_event`)."""
        self.ledger.record_event(run.run_id, EventKind.PLAN, "run", self.data)


def plan_hooks(loaded: LoadedTeam, ledger: Recorder) -> list[RunHooks]:
    """The hook linking a run of a planned team file to its plan (none for other files)."""
    if loaded.spec.plan is None:
        return []
    data = plan_link_event(loaded.spec.plan.model_dump(), TaskGraph(loaded.tasks))
    return [PlanLink(ledger, data)]
