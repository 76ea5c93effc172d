"""Running a `RunSpec` as ``clearance run`` does, and resuming a recorded run as ``resume`` does.

`run_spec` prepares the spec (checks, ``for_each_file`` expansion, task files confined to the
input folder), opens what it names (ledger, executor, store, memory, tools), runs its tasks
or plans its goal, and closes what it opened. `resume_run` does the same for a recorded run,
from the spec the run recorded (`recorded_run_spec`, changed with ``model_copy`` if need be).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from clearance._agents.tools import Tool
from clearance._core.errors import ConfigError
from clearance._core.run_spec import ExecutorSpec, RunSpec
from clearance._core.spec import Task
from clearance._core.teamfile import LoadedTeam
from clearance._core.vocabulary import ExecutorKind
from clearance._orchestration.executor import ModelExecutor
from clearance._orchestration.orchestrator import Orchestrator
from clearance._orchestration.plan_only import plan_hooks
from clearance._orchestration.ray_executor import RayExecutor
from clearance._orchestration.result import RunResult
from clearance._orchestration.resume import recorded_spec
from clearance._orchestration.resume_checks import (
    check_run_record,
    check_team_file,
    one_chain_check,
)
from clearance._orchestration.run import RunServices
from clearance._orchestration.run_config import spec_tools
from clearance._orchestration.run_memory import absolute_url, default_memory_url
from clearance._orchestration.spec_check import checked_run
from clearance._state.ledger import RunLedger

__all__ = [
    "checked_run",
    "open_executor",
    "recorded_run_spec",
    "resume_run",
    "run_spec",
    "run_spec_sync",
    "with_resources",
]

Tools = Mapping[str, Tool | Callable[..., Any]]


def with_resources(spec: RunSpec, *, ledger_url: str) -> RunSpec:
    """``spec`` with its store and memory where a run will find them again.

    A relative SQLite path becomes absolute (so ``resume`` works from another folder), and
    an agent with ``memory`` settings in a spec without ``memory:`` gets ``memory.db`` next
    to the ledger (`default_memory_url`).

    Raises:
        ConfigError: A URL is not a database URL.
    """
    update: dict[str, Any] = {}
    if spec.store is not None:
        update["store"] = absolute_url(spec.store, field="store")
    settings = spec.memory_settings
    uses = spec.memory is not None or any(a.memory is not None for a in spec.agents)
    if uses:
        url = absolute_url(settings.url or default_memory_url(ledger_url))
        update["memory"] = settings.model_copy(update={"url": url})
    return spec.model_copy(update=update) if update else spec


@contextlib.contextmanager
def open_executor(spec: ExecutorSpec) -> Iterator[ModelExecutor | None]:
    """The executor ``spec`` names, started; stopped on exit (``None`` for local).

    Raises:
        ConfigError: An ``env`` variable is not set; Ray is missing, unreachable, or its
            workers did not start.
    """
    if spec.kind == ExecutorKind.LOCAL:
        yield None
        return
    forwarded = {}
    for key in spec.env:
        if key not in os.environ:
            raise ConfigError(f"{key!r} is not set in this environment", field="executor.env")
        forwarded[key] = os.environ[key]
    workers = spec.workers or 2
    with RayExecutor(address=spec.address, workers=workers, worker_env=forwarded) as executor:
        yield executor


async def run_spec(
    spec: RunSpec | LoadedTeam,
    *,
    ledger: RunLedger | None = None,
    services: RunServices | None = None,
    tools: Tools | None = None,
    stream_text: bool = False,
) -> RunResult:
    """Run a spec as ``clearance run`` does: its tasks, or a plan for its goal; then synthesize.

    Opens what the spec names and ``services`` does not give (the executor, store, memory,
    tools) and closes it when the run ends; the run records the spec, and a spec with
    ``plan:`` (written by `plan_only`) records the plan it replays (`PlanLink`).

    Args:
        spec: The run's spec (`RunSpec.from_file`, with changes), or one prepared with
            `prepare_run` / `checked_run`.
        ledger: Where the run is recorded; ``None`` opens the default ledger
            (``.clearance/runs.db``) for the run.
        services: Model instances, callbacks, clock, executor, person asked; ``None`` for
            `RunServices()`.
        tools: User tools by name, instead of importing the spec's ``tools:`` entries.
        stream_text: Make every model call stream its text to ``services.on_event``.

    Returns:
        The run's result (task failures are in it, not raised).

    Raises:
        ConfigError: The spec fails a check, has no tasks and no goal, or names something
            that cannot be opened or imported.
    """
    loaded = spec if isinstance(spec, LoadedTeam) else checked_run(spec, tools=tools or ())[0]
    if not loaded.tasks and not loaded.spec.goal:
        raise ConfigError("the run has no tasks; give a goal so the coordinator can plan")
    services = services or RunServices()
    with contextlib.ExitStack() as stack:
        if ledger is None:
            ledger = stack.enter_context(RunLedger())
        if services.executor is None:
            executor = stack.enter_context(open_executor(loaded.spec.executor))
            services = dataclasses.replace(services, executor=executor)
        if linked := plan_hooks(loaded, ledger):  # a planned team file: record its plan
            services = dataclasses.replace(services, hooks=(*services.hooks, *linked))
        given = await asyncio.to_thread(spec_tools, loaded.spec, tools)
        orchestrator = Orchestrator.from_spec(
            loaded, ledger=ledger, tools=given, services=services, stream_text=stream_text
        )
        _close_opened(stack, orchestrator)
        if loaded.tasks:
            return await orchestrator.run_tasks(loaded.tasks, goal=loaded.spec.goal)
        assert loaded.spec.goal is not None
        return await orchestrator.run_team(loaded.spec.goal)
    raise AssertionError("unreachable")  # pragma: no cover


def run_spec_sync(spec: RunSpec | LoadedTeam, **kwargs: Any) -> RunResult:
    """`run_spec` for code not in an event loop (a script); same arguments.

    Raises:
        ConfigError: As `run_spec`.
    """
    return asyncio.run(run_spec(spec, **kwargs))


def recorded_run_spec(ledger: RunLedger, run_id: str) -> RunSpec:
    """The spec a run recorded when it started (secrets masked, see `RunSpec.to_record`).

    Raises:
        StoreError: No run (or several) match ``run_id``.
        ConfigError: The run was recorded without its spec, or the record is damaged.
    """
    return recorded_spec(ledger.get_run(run_id))[0]


async def resume_run(
    run_id: str,
    *,
    ledger: RunLedger,
    spec: RunSpec | None = None,
    services: RunServices | None = None,
    tools: Tools | None = None,
    force: bool = False,
    tasks: Iterable[Task] = (),
    team: RunSpec | None = None,
) -> RunResult:
    """Resume a stopped run as ``clearance resume`` does: keep completed results, run the rest.

    Args:
        run_id: The run's id, or a unique prefix of it.
        ledger: The ledger the run is recorded in.
        spec: The run's spec with changes (`recorded_run_spec`, then ``model_copy``);
            ``None`` for the recorded one.
        services: Model instances, callbacks, clock, executor, approver.
        tools: User tools by name, instead of importing the recorded ones.
        force: Resume even a run recorded ``running`` by a live process (see
            `Orchestrator.resume`).
        tasks: The team file's tasks: a recorded ``python:`` step must be among them.
        team: The team file given to resume the run (``clearance resume --team``), or
            ``None``: its ``tools:`` entries must import the recorded functions with the
            recorded approval, and the run's agents must have their recorded capabilities
            there (`check_team_file`).

    Raises:
        StoreError: No run (or several) match ``run_id``.
        ConfigError: The run's records fail their hash-chain check (refused before anything
            they name is imported or opened), ``team`` changes a recorded tool or agent, and as
            `Orchestrator.from_run` and `Orchestrator.resume`.
    """
    # Nothing named by the record (a tool's module, an executor's address) is imported or
    # opened before the record is checked against its hash chain; checked once for the
    # whole resume (`from_run` and `resume` read the run back again).
    with one_chain_check():
        check_run_record(ledger, ledger.get_run(run_id).run_id)
        return await _resume_checked(run_id, ledger, spec, services, tools, force, tasks, team)


async def _resume_checked(
    run_id: str,
    ledger: RunLedger,
    spec: RunSpec | None,
    services: RunServices | None,
    tools: Tools | None,
    force: bool,
    tasks: Iterable[Task],
    team: RunSpec | None,
) -> RunResult:
    """`resume_run` once the run's chain is checked."""
    if team is not None:
        check_team_file(recorded_run_spec(ledger, run_id), team)
    spec = spec if spec is not None else recorded_run_spec(ledger, run_id)
    services = services or RunServices()
    with contextlib.ExitStack() as stack:
        if services.executor is None:
            executor = stack.enter_context(open_executor(spec.executor))
            services = dataclasses.replace(services, executor=executor)
        given = await asyncio.to_thread(spec_tools, spec, tools)
        orchestrator = Orchestrator.from_run(
            run_id, ledger=ledger, spec=spec, tools=given, services=services
        )
        _close_opened(stack, orchestrator)
        return await orchestrator.resume(run_id, force=force, tasks=tasks)
    raise AssertionError("unreachable")  # pragma: no cover


def _close_opened(stack: contextlib.ExitStack, orchestrator: Orchestrator) -> None:
    for opened in (orchestrator.store, orchestrator.memory):
        if opened is not None:
            stack.callback(opened.close)
