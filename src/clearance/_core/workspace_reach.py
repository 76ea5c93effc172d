"""Where a run's own state lies inside a folder it reads: never part of what it reads.

Agents' workspaces (every agent's outputs, an earlier run's included) lie under the run's
workspace root (``workspace:``, ``.clearance/workspaces`` by default), and Clearance's other
state (the default ledger and stores) under ``.clearance/``. When either lies inside the
project or input folder, it is no part of that folder as a task sees it: an isolated
subagent is never shown nor given a file of it (`clearance._orchestration.subagents`), and a
``for_each_file`` pattern never matches one (`clearance._core.for_each_file`).

A folder is found inside a root however it is spelled: relative to the working folder, with
``..`` parts, through links (to the folder or to the root), in another case. Paths are compared
case-insensitively (a case-insensitive disk serves ``WORK/x`` from ``work/``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from clearance._core.errors import ConfigError

__all__ = [
    "DEFAULT_WORKSPACE_ROOT",
    "STATE_FOLDERS",
    "check_workspace_root",
    "is_state_path",
    "state_prefixes",
    "under_prefixes",
]

DEFAULT_WORKSPACE_ROOT = ".clearance/workspaces"
"""The workspace root when ``workspace:`` is not set (relative to the working folder)."""
STATE_FOLDERS = frozenset({".clearance"})
"""Clearance's own state (the default ledger, stores and workspaces): never listed, never given,
even when ``input.include`` names it (compared case-insensitively)."""
_STATE_FOLDED = frozenset(name.casefold() for name in STATE_FOLDERS)


def is_state_path(path: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) lies in Clearance's own state folder."""
    return any(part.casefold() in _STATE_FOLDED for part in PurePosixPath(path).parts)


def _spellings(path: Path) -> set[str]:
    """``path`` as written (absolute, ``..`` applied) and with its links resolved."""
    absolute = os.path.normpath(os.path.abspath(path))
    try:
        resolved = os.path.realpath(path)
    except (OSError, ValueError):  # a link loop, a NUL: the written form still counts
        return {absolute}
    return {absolute, resolved}


def state_prefixes(root: Path, folders: Iterable[Path]) -> tuple[str, ...]:
    """Where each of ``folders`` lies inside ``root``: relative paths, casefolded.

    ``"."`` when a folder is ``root`` itself or holds it (all of ``root`` is state). A folder
    outside ``root`` gives none.
    """
    roots = _spellings(root)
    found: set[str] = set()
    for folder in folders:
        for spelled in _spellings(folder):
            for base in roots:
                rel = os.path.relpath(spelled, base)
                if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
                    # the folder holds the root (or is it): everything under the root is state
                    if rel == os.curdir or os.path.commonpath([spelled, base]) == spelled:
                        found.add(".")
                    continue
                found.add(PurePosixPath(*Path(rel).parts).as_posix().casefold())
    return tuple(sorted(found))


def under_prefixes(path: str, prefixes: Iterable[str]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) lies under one of ``prefixes``.

    ``.`` parts and repeated ``/`` are dropped and ``..`` applied first (``src/../outs/x`` is
    ``outs/x``); the comparison is case-insensitive.
    """
    normal = os.path.normpath(path.replace("\\", "/")).replace(os.sep, "/").casefold()
    for prefix in prefixes:
        if prefix == "." or normal == prefix or normal.startswith(prefix + "/"):
            return True
    return False


def check_workspace_root(
    path: Path, *, holds_not: Iterable[tuple[str, Path]] = (), field: str = "workspace"
) -> None:
    """Refuse a workspace root that cannot be a folder: a file at its path or above it.

    Nothing is made; a folder that does not exist yet is fine (it is made on first use).

    Args:
        path: The workspace root (relative to the working folder, or absolute).
        holds_not: ``(name, folder)`` pairs: folders the workspace root may not be nor hold
            (the project an isolated task is shown, the input folder a pattern is matched
            in): all of them would be agents' outputs, never given.
        field: The field named in the error.

    Raises:
        ConfigError: One line naming what is in the way.
    """
    for name, folder in holds_not:
        if "." in state_prefixes(folder, [path]):
            raise ConfigError(
                f"the workspace folder {str(path)!r} holds the {name} folder, so every file of "
                "it would be agents' outputs: give a workspace folder beside or inside it",
                field=field,
            )
    current = Path(os.path.abspath(path))
    for place in (current, *current.parents):
        try:
            is_dir = place.is_dir()
            exists = is_dir or place.exists() or place.is_symlink()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise ConfigError(
                f"cannot use {str(path)!r} as the workspace folder: {why}", field=field
            ) from None
        if not exists:
            continue
        if is_dir:
            return
        what = "is" if place == current else f"lies under {str(place)!r}, which is"
        raise ConfigError(
            f"the workspace folder {str(path)!r} {what} not a folder (a file or a broken link)",
            field=field,
        )
