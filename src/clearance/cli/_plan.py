"""The ``plan`` command: the coordinator's plan for a goal, written as an editable team file."""

from __future__ import annotations

import asyncio
import os
import shlex
from pathlib import Path
from typing import Annotated

import typer
import yaml

from clearance import ConfigError
from clearance.cli._common import (
    check_output_files,
    one_line_errors,
    out,
    safe_text,
    write_output_file,
)
from clearance.cli._options import (
    DbOption,
    InputOption,
    check_database_folder,
    model_id_option,
    utf8_text,
)
from clearance.cli._team_setup import configured_models, model_error
from clearance.runs import DEFAULT_LEDGER_URL

__all__ = ["plan"]


@one_line_errors
def plan(
    team_file: Annotated[Path, typer.Argument(help="Team file (YAML) whose coordinator plans.")],
    goal: Annotated[
        str | None, typer.Option(callback=utf8_text, help="The goal to plan for.")
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the planned team file.")
    ] = Path("plan.yaml"),
    model: Annotated[
        str | None, typer.Option(callback=model_id_option, help="Model id for every agent.")
    ] = None,
    db: DbOption = DEFAULT_LEDGER_URL,
    input_dir: InputOption = None,
) -> None:
    """Plan only: write the coordinator's validated plan as a team file to review and edit.

    Run it with ``clearance run PLAN.yaml``; the run records which plan it replays. The
    folder --input gives is written into the plan as its input.default.
    """
    from clearance import RunLedger, RunServices, RunSpec
    from clearance.runs import checked_run, model_settings, plan_only, plan_team_file

    written = RunSpec.from_file(team_file)
    if input_dir is not None:  # kept in the plan written, so running it reads the folder
        folder = input_dir if input_dir.startswith("python:") else os.path.abspath(input_dir)
        written = written.model_copy(
            update={"input": written.input.model_copy(update={"default": folder})}
        )
    spec = written.with_model(model) if model is not None else written
    goal = goal or spec.goal
    if not goal:
        raise ConfigError("give --goal (or goal: in the team file) to plan", field="--goal")
    check_output_files({"--output": output})
    taken = f"{str(output)!r} exists: choose another file"
    if output.exists():
        raise ConfigError(taken, field="--output")
    check_database_folder(db, default=DEFAULT_LEDGER_URL)
    try:
        loaded, _ = checked_run(spec, source=str(team_file))
    except ConfigError as exc:  # the folder --input gave is named as the option
        if input_dir is None or exc.field != "input.default":
            raise
        raise ConfigError(exc.message, field="--input") from exc
    try:
        services = RunServices(models=configured_models(model_settings(spec)))
    except ConfigError as exc:
        raise model_error(exc, team_file, model_option=model is not None) from exc
    with RunLedger(db) as ledger:
        try:  # a model refused before the plan's run starts
            planned = asyncio.run(plan_only(loaded, goal, ledger=ledger, services=services))
        except ConfigError as exc:
            raise model_error(exc, team_file, model_option=model is not None) from exc
    data = plan_team_file(written.to_data(), planned, goal)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    recorded = f"; the plan is recorded as run {planned.run_id}"
    write_output_file(output, text, flag="--output", after=recorded, exists=taken + recorded)
    out.print(safe_text(f"plan: {len(planned.graph)} tasks (run {planned.run_id})"))
    shown = shlex.quote(str(output))  # a command to type back, spaces and quotes included
    out.print(safe_text(f"written to {output}; edit it, then: clearance run {shown}"))
