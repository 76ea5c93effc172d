"""A run's own folder for the workspaces of the children it spawns."""

from __future__ import annotations

from pathlib import Path

from clearance._core.errors import ConfigError

__all__ = ["new_run_dir"]


def new_run_dir(root: Path, run_id: str) -> Path:
    """A new folder for a run's workspaces, created exclusively (never an earlier one).

    ``<root>/<run id>``, or ``<run id>.2``, ``.3``... for the later sessions of a resumed run.

    Raises:
        ConfigError: No folder could be made.
    """
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = root / (run_id if n == 1 else f"{run_id}.{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise ConfigError(
        f"cannot make a workspace folder for run {run_id} in {str(root)!r}",
        field="workspace_root",
    )
