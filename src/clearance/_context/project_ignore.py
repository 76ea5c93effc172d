"""What a project's listing leaves out: version-control metadata, Clearance's own state.

The project scan (`project_scan.walk_structure`) lists neither, nor what the root
``.gitignore`` hides, and a subagent's ``FILE:`` request (`clearance._orchestration.subagents`)
is not given them, nor what lies under the run's workspace root (``workspace:``) when it is in
the project: ``.git/config`` may hold a remote's credentials, ``.clearance/`` holds the
ledger, the stores and every agent's workspace (another agent's outputs, an earlier run's
included), and what ``.gitignore`` hides (``.env``, build output) is no part of the
project a subagent was shown. The ``.gitignore`` is applied with caps on its patterns' count
and shape, and on the paths matched, so that a hostile one cannot make a match slow.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import pathspec

from clearance._core.workspace_reach import STATE_FOLDERS, is_state_path, under_prefixes

__all__ = [
    "ALWAYS_SKIPPED",
    "MAX_IGNORE_PATTERNS",
    "MAX_IGNORE_PATTERN_CHARS",
    "MAX_IGNORE_WILDCARDS",
    "MAX_MATCHED_PATH_CHARS",
    "STATE_FOLDERS",
    "STATE_REFUSAL",
    "WORKSPACE_REFUSAL",
    "gitignore_spec",
    "is_run_state",
    "left_out",
]

ALWAYS_SKIPPED = frozenset({".git", ".hg", ".svn", ".bzr"})
"""Version-control folders: never listed, never given (compared case-insensitively)."""
MAX_IGNORE_PATTERNS = 500
"""Most patterns of the root ``.gitignore`` applied (the first ones)."""
MAX_IGNORE_WILDCARDS = 2
"""Most runs of ``*`` in a ``.gitignore`` pattern (``*a*a*a*a*a*b`` backtracks for minutes)."""
MAX_IGNORE_PATTERN_CHARS = 1024
"""Longest ``.gitignore`` pattern applied; a longer one is skipped."""
MAX_MATCHED_PATH_CHARS = 1024
"""Longest path matched against ``.gitignore`` (a match's time grows with it)."""

_STARS = re.compile(r"\*+")
_SKIPPED_FOLDED = frozenset(name.casefold() for name in ALWAYS_SKIPPED)


def gitignore_spec(text: str) -> pathspec.GitIgnoreSpec:
    """The spec of a ``.gitignore``'s text: its first `MAX_IGNORE_PATTERNS` usable patterns.

    A pattern over `MAX_IGNORE_PATTERN_CHARS` or with more than `MAX_IGNORE_WILDCARDS` runs of
    ``*`` is skipped, as is a line that is no pattern (``!``), as git skips it.
    """
    patterns = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    usable = []
    for line in patterns[:MAX_IGNORE_PATTERNS]:
        if len(line) > MAX_IGNORE_PATTERN_CHARS or len(_STARS.findall(line)) > MAX_IGNORE_WILDCARDS:
            continue
        try:
            pathspec.GitIgnoreSpec.from_lines([line])
        except ValueError:
            continue
        usable.append(line)
    return pathspec.GitIgnoreSpec.from_lines(usable)


def is_vcs_metadata(path: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) lies in a version-control folder."""
    return any(part.casefold() in _SKIPPED_FOLDED for part in PurePosixPath(path).parts)


def is_run_state(path: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) lies in Clearance's own state folder."""
    return is_state_path(path)


STATE_REFUSAL = ("it is Clearance's own state (runs, stores and agents' workspaces), which no "
                 "subagent is given")  # fmt: skip
"""Why a file under Clearance's state folder (``.clearance/``) is not given (`left_out`)."""
WORKSPACE_REFUSAL = "it is the run's workspace folder (agents' outputs), which no subagent is given"
"""Why a file under the run's workspace root is not given (`left_out`)."""


def left_out(
    path: str, spec: pathspec.GitIgnoreSpec | None, workspace: tuple[str, ...] = ()
) -> str | None:
    """Why the project's listing leaves ``path`` out, or ``None`` when it does not.

    Args:
        path: A path relative to the project folder, ``/``-separated.
        spec: The root ``.gitignore``'s spec (`gitignore_spec`); ``None``: not applied.
        workspace: Where the run's workspace root lies in the project
            (`clearance._core.workspace_reach.state_prefixes`): never given either.
    """
    if is_vcs_metadata(path):
        return "it is version-control metadata, which the project's listing leaves out"
    if is_run_state(path):
        return STATE_REFUSAL
    if under_prefixes(path, workspace):
        return WORKSPACE_REFUSAL
    if spec is None:
        return None
    if len(path) > MAX_MATCHED_PATH_CHARS:
        return f"its path is over {MAX_MATCHED_PATH_CHARS:,} characters"
    relative = str(PurePosixPath(path))  # "./a//b" -> "a/b"
    if spec.match_file(relative):
        return "the project's .gitignore leaves it out"
    return None
