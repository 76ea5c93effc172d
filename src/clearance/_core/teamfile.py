"""Team files: YAML that declares agents, a coordinator, tasks and an input folder.

Validated with pydantic, so an error names the file, the field and the problem. A task may
carry ``for_each_file: GLOB``: it then stands for one task per matching file of the input
folder, with ``{path}``, ``{name}``, ``{stem}`` and ``{slug}`` filled in from the file.
A ``depends_on`` entry equal to such a task's ``id`` template depends on all of its copies;
in a ``for_each_file`` task it depends on the copy for the same file (when there is one).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from clearance._core.errors import ConfigError
from clearance._core.for_each_file import expand_ids, expand_tasks
from clearance._core.mcp_spec import check_mcp_entries
from clearance._core.run_spec import RunSpec
from clearance._core.spec import FileCaps, Task, Team
from clearance._core.teamfile_checks import (
    check_effective,
    check_input,
    check_messages,
    check_paths,
    check_tool_entries,
)
from clearance._core.teamfile_unread import check_unread
from clearance._core.workspace_reach import DEFAULT_WORKSPACE_ROOT, check_workspace_root

__all__ = ["LoadedTeam", "load_team_file", "prepare_run", "resolve_input"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadedTeam:
    """A run's spec prepared to run: its team built and its tasks expanded.

    Attributes:
        spec: The run's spec (a team file, with any overrides).
        team: The agents and coordinator.
        tasks: The tasks, with ``for_each_file`` entries expanded (empty: plan from a goal).
        synthesis_from: Ids of the tasks whose results the synthesis sees (``for_each_file``
            templates expanded), or ``None`` for every task's.
        input_root: The folder task files are relative to, or ``None``.
        source: The file's path, for messages.
        project_root: The project folder of isolated tasks (``project:``, else the input
            folder), or ``None``.
    """

    spec: RunSpec
    team: Team
    tasks: tuple[Task, ...]
    input_root: Path | None
    source: str
    project_root: Path | None = None

    def file_caps(self) -> FileCaps:
        """The ``isolation.file_caps`` of the file, as `FileCaps`."""
        return self.spec.file_caps()

    synthesis_from: tuple[str, ...] | None = None


def resolve_input(value: str) -> Path:
    """Resolve an input folder: a path, or ``python:<package>`` for an installed package.

    ``python:json`` is the folder of the running interpreter's ``json`` package, and
    ``python:email.mime`` its ``email`` package's ``mime`` folder. Nothing is imported: the
    top-level package is only looked up (`importlib.util.find_spec` of a name without a dot
    runs no code), and a subpackage is found as a folder inside it, so a team file cannot run
    a package's code by naming it.

    Raises:
        ConfigError: The folder does not exist, or the name is not a dotted Python name, or
            the package is unknown or not a package.
    """
    if value.startswith("python:"):
        name = value.removeprefix("python:")
        parts = name.split(".")
        if not all(part.isidentifier() for part in parts):
            raise ConfigError(
                f"{name!r} is not a Python package name (python:json, python:email.mime)",
                field="input",
            )
        spec = importlib.util.find_spec(parts[0])
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"{name!r} is not an installed Python package", field="input")
        folder = Path(next(iter(spec.submodule_search_locations)))
        for part in parts[1:]:
            folder = folder / part
            if not (folder / "__init__.py").is_file():
                raise ConfigError(f"{name!r} is not an installed Python package", field="input")
        return folder
    path = Path(os.path.expanduser(value))  # "~nobody" stays as it is (no RuntimeError)
    if not os.path.isdir(path):  # False for a name the system refuses (too long...) too
        what = "is not a folder" if os.path.lexists(path) else "does not exist"
        raise ConfigError(f"input folder {value!r} {what}", field="input")
    return path


def load_team_file(
    path: str | Path, *, input_dir: str | Path | None = None, resuming: bool = False
) -> LoadedTeam:
    """Read, validate and prepare a team file (`RunSpec.from_file`, then `prepare_run`).

    Args:
        path: The YAML file.
        input_dir: Overrides ``input.default`` (a folder, or ``python:<package>``).
        resuming: The file a recorded run is resumed with (see `prepare_run`).

    Returns:
        The spec, its team, its tasks (``for_each_file`` expanded, sorted by path), and the
        input root.

    Raises:
        ConfigError: The file is missing, is not a regular file, is over the size, depth or
            alias-expansion caps of `clearance._core.safe_yaml`, is not YAML, fails
            validation, or sets a key that would have no effect; the message names the file,
            the field and the problem.
    """
    spec = RunSpec.from_file(path)
    if input_dir is not None:
        folder = spec.input.model_copy(update={"default": str(input_dir)})
        spec = spec.model_copy(update={"input": folder})
    return prepare_run(spec, source=str(path), resuming=resuming)


def prepare_run(spec: RunSpec, *, source: str | None = None, resuming: bool = False) -> LoadedTeam:
    """Check a run's spec across its keys, build its team and expand its tasks.

    Args:
        spec: The run's spec.
        source: The team file it was read from, named in error messages; ``None`` for none.
        resuming: The team file a recorded run is resumed with (``clearance resume
            --team``): keys that nothing reads (`check_unread`) are not refused, since the
            run recorded them and its team file must hold them as recorded
            (`clearance._orchestration.resume_checks.check_team_file`), a run recorded
            before such a key was refused included.

    Raises:
        ConfigError: A key would have no effect, a message names an unknown agent, an MCP
            tool entry is malformed, the input or project folder does not exist, or a
            ``for_each_file`` pattern matches nothing; the message names the file (when the
            spec was read from one) and the field.
    """
    try:
        team = spec.team()
        root_value = spec.input.default
        input_root = resolve_input(root_value) if root_value else None
        project_root = _project_root(spec.project) if spec.project else input_root
        tasks, groups = expand_tasks(spec, input_root)
        synthesis_from = expand_ids(spec.synthesis_from, groups, tasks)
        check_messages(spec)
        check_mcp_entries(
            spec.mcp_servers,
            [(a.name, a.tools) for a in (*spec.agents, *filter(None, [spec.coordinator]))],
        )
        check_effective(spec, team, tasks)
        _check_workspace(spec, team, tasks, input_root, project_root)
        check_input(spec, tasks)
        check_paths(spec, tasks)
        if not resuming:
            check_unread(spec, tasks)
        check_tool_entries(spec)
    except ConfigError as exc:
        if source is None:
            raise
        raise exc.with_source(source) from exc
    return LoadedTeam(
        spec=spec,
        team=team,
        tasks=tasks,
        input_root=input_root,
        source=source or "the run spec",
        project_root=project_root,
        synthesis_from=synthesis_from,
    )


def _check_workspace(
    spec: RunSpec,
    team: Team,
    tasks: tuple[Task, ...],
    input_root: Path | None,
    project_root: Path | None,
) -> None:
    """Refuse, before the run starts, a workspace root no agent's workspace could be made in.

    Only when some agent gets a workspace (a tool loop, spawning, a fan-out): a file at its
    path or above it, or a folder that holds the project an isolated task is shown or the
    input folder a ``for_each_file`` pattern is matched in (`check_workspace_root`).
    """
    if not (any(a.can_spawn or a.uses_tools for a in team.agents)
            or any(t.fan_out is not None for t in tasks)):  # fmt: skip
        return
    holds_not: list[tuple[str, Path]] = []
    if project_root is not None and any(t.mode == "isolated" for t in tasks):
        holds_not.append(("project", project_root))
    if input_root is not None and any(t.for_each_file is not None for t in spec.tasks):
        holds_not.append(("input", input_root))
    check_workspace_root(Path(spec.workspace or DEFAULT_WORKSPACE_ROOT), holds_not=holds_not)


def _project_root(value: str) -> Path:
    """The ``project:`` folder (a path, or ``python:<package>``).

    Raises:
        ConfigError: It does not exist or is not a folder.
    """
    try:
        return resolve_input(value)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("input folder", "project folder"),
                          field="project") from exc  # fmt: skip
