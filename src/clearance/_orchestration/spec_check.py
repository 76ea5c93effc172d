"""The check before a run: a `RunSpec` prepared and checked as its run would, before anything runs.

`checked_run` is what ``clearance run``, ``plan`` and ``graph`` share. It imports no ledger,
store, orchestrator or executor (``graph`` reads no database): `run_spec` imports it.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from clearance._agents.files import confined_path
from clearance._core.confined_path import open_regular_file
from clearance._core.errors import ConfigError, GraphError, PathEscapeError
from clearance._core.run_spec import RunSpec
from clearance._core.teamfile import LoadedTeam, prepare_run
from clearance._orchestration.graph_check import check_spec
from clearance._orchestration.run_config import model_settings
from clearance._state.graph import TaskGraph

__all__ = ["checked_run"]


def checked_run(
    spec: RunSpec, *, source: str | None = None, tools: Collection[str] = ()
) -> tuple[LoadedTeam, TaskGraph | None]:
    """Prepare a spec (`prepare_run`) and check it as its run would, before anything runs.

    The one check before a run that ``clearance run``, ``plan`` and ``graph`` share: the
    models' settings (`model_settings`), the graph and task files, then `check_spec` (tools,
    prices, agents, reviewers, fan-out, steps). It needs no model, ledger, store or network
    and runs no user code: a ``tools:`` entry's or ``python:`` step's module is only looked
    up, not imported, and MCP servers are not started (see `check_spec` for what only the
    run itself can refuse).

    Args:
        spec: The run's spec.
        source: Where it was read from (a file), named in errors.
        tools: Names of the user tools the run is given in code (``tools=``).

    Returns:
        The prepared spec, and its task graph (``None`` when the coordinator plans).

    Raises:
        ConfigError: As `model_settings`, `prepare_run` and `check_spec`; the graph is
            invalid, or a task lists files without an input folder, or a listed file is
            absolute, has a ``..`` part, leads outside its folder (the input folder; the
            project for an isolated task), does not exist or is not a regular file (the
            message names ``source`` and the task's ``files``).
    """
    try:  # first, as ``run`` checks them before the rest: the same file, the same line
        model_settings(spec)
    except ConfigError as exc:
        if source is None:
            raise
        raise exc.with_source(source) from exc
    loaded = prepare_run(spec, source=source)
    graph = _task_files_and_graph(loaded, source=source)
    try:
        check_spec(loaded, graph, given_tools=tools)
    except ConfigError as exc:
        if source is None:
            raise
        raise exc.with_source(source) from exc
    return loaded, graph


def _task_files_and_graph(loaded: LoadedTeam, *, source: str | None) -> TaskGraph | None:
    """The tasks' graph (``None`` without tasks), once every task file can be read.

    Raises:
        ConfigError: As `checked_run`, for the task files and the graph.
    """
    if not loaded.tasks:
        return None
    input_root = loaded.input_root.resolve() if loaded.input_root is not None else None
    project_root = loaded.project_root.resolve() if loaded.project_root is not None else None
    for task in loaded.tasks:
        root = project_root if task.mode == "isolated" and project_root else input_root
        for rel in task.files:
            if root is None:
                raise ConfigError(
                    f"task {task.id!r} lists files but there is no input folder "
                    "(input.default or --input)",
                    source=source,
                )
            _check_task_file(root, rel, source=source, field=f"tasks.{task.id}.files")
    try:
        return TaskGraph(loaded.tasks)
    except GraphError as exc:
        raise ConfigError(str(exc), source=source) from exc


def _check_task_file(root: Path, rel: str, *, source: str | None, field: str) -> None:
    """Refuse, before anything runs, a task file that cannot be read when its task runs.

    It is opened as the task will open it (`open_regular_file`: confined to ``root``, links
    that stay inside followed, regular files only) and closed at once; the task reads it
    again when it runs, so a file changed meanwhile is still checked then.

    Raises:
        ConfigError: The file leaves ``root``, does not exist or is not a regular file
            (the message names ``source`` and ``field``).
    """
    try:
        confined_path(root, rel)
        os.close(open_regular_file(root, rel, follow_symlinks=True))
    except (PathEscapeError, ConfigError) as exc:
        message = exc.message if isinstance(exc, ConfigError) else str(exc)
        raise ConfigError(message, source=source, field=field) from exc
