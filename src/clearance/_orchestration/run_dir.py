"""A run's own folder for the workspaces of the children it spawns."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from clearance._core.errors import ConfigError

__all__ = ["new_run_dir"]


def new_run_dir(root: Path, run_id: str) -> Path:
    """A new folder for a run's workspaces, created exclusively (never an earlier one).

    ``<root>/<run id>``, or ``<run id>.2``, ``.3``... for the later sessions of a resumed run.

    Raises:
        ConfigError: No folder could be made (``root`` is a file, say): one line with the
            system's reason, never the host's path (a model may be told it).
    """
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not root.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        for n in range(1, 1000):
            path = root / (run_id if n == 1 else f"{run_id}.{n}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path
    except (FileExistsError, NotADirectoryError):
        message = "the workspace root (or a folder above it) is not a folder"
        raise ConfigError(f"cannot make the run's workspace folder: {message}",
                          field="workspace_root") from None  # fmt: skip
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__  # never the path: a model may be told
        raise ConfigError(f"cannot make the run's workspace folder: {reason}",
                          field="workspace_root") from None  # fmt: skip
    raise ConfigError(f"cannot make the run's workspace folder: 999 folders of run {run_id} "
                      "exist already", field="workspace_root")  # fmt: skip
